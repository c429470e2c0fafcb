"""`llmgw node add [user@]host`: make a machine a node over SSH.

It uses the system's `ssh` in batch mode (no password prompts),
so the operator's keys, ssh agent, ~/.ssh/config, known_hosts and jump
hosts work as they do for them, and no SSH library has to be shipped in the
file. First it checks the machine (reachable, root or sudo without a
password, Linux on this file's architecture, a Python 3.10 to 3.13, systemd
or not); then it copies this very file there, runs `llmgw join` on it with
a fresh join code (so the node's key is made on the node), removes the copy,
and waits until the node has registered and reported its hardware.
Whatever fails is said in a sentence, and what was copied is removed.
"""

from __future__ import annotations

import platform
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

__all__ = ["AddError", "Probe", "Target", "SshNodeAdder", "add_node", "parse_target", "pyz_to_copy"]

CONNECT_TIMEOUT = 10
PYTHONS = ("3.13", "3.12", "3.11", "3.10")

PROBE = (
    'echo "os=$(uname -s)"; echo "arch=$(uname -m)"; echo "uid=$(id -u)"; echo "host=$(hostname -s 2>/dev/null || hostname)"; '
    'if [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; then echo sudo=yes; else echo sudo=no; fi; '
    'for p in python3.13 python3.12 python3.11 python3.10 python3; do '
    'q=$(command -v $p 2>/dev/null) && echo "python=$q $($q -c \'import sys; print(\"%d.%d\" % sys.version_info[:2])\' 2>/dev/null)"; '
    'done; '
    'if [ -d /run/systemd/system ]; then echo systemd=yes; else echo systemd=no; fi'
)


class AddError(Exception):
    """The machine did not become a node; the message says why and what to do."""


@attrs.frozen
class Target:
    user: str
    host: str
    port: int = 22

    @property
    def login(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def __str__(self) -> str:
        return self.login + (f" (port {self.port})" if self.port != 22 else "")


def parse_target(text: str, port: int = 22) -> Target:
    user, _, host = text.rpartition("@")
    if not host or host.startswith("-") or any(c.isspace() for c in text):
        raise AddError(f"{text!r} is not [user@]host")
    return Target(user=user, host=host.strip("[]"), port=port)


@attrs.frozen
class Probe:
    """What the checks found on the machine."""

    os: str = ""
    arch: str = ""
    uid: int = -1
    hostname: str = ""
    sudo: bool = False
    python: str = ""  #: the path of the newest Python 3.10 to 3.13, or empty
    python_version: str = ""
    pythons_seen: tuple[str, ...] = ()
    systemd: bool = False

    @classmethod
    def parse(cls, text: str) -> Probe:
        values: dict[str, Any] = {}
        pythons: list[tuple[str, str]] = []
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key == "python":
                path, _, version = value.partition(" ")
                pythons.append((path, version.strip()))
            elif key in ("os", "arch", "host", "sudo", "systemd", "uid"):
                values[key] = value.strip()
        good = [(p, v) for p, v in pythons if v in PYTHONS]
        good.sort(key=lambda pv: PYTHONS.index(pv[1]))
        return cls(os=values.get("os", ""), arch=values.get("arch", ""),
                   uid=int(values["uid"]) if values.get("uid", "").isdigit() else -1,
                   hostname=values.get("host", ""), sudo=values.get("sudo") == "yes",
                   python=good[0][0] if good else "", python_version=good[0][1] if good else "",
                   pythons_seen=tuple(f"{v or '?'} ({p})" for p, v in pythons), systemd=values.get("systemd") == "yes")


def pyz_to_copy(say: Callable[[str], None]) -> Path:
    """This very file: the zipapp running now, else a dev checkout's dist/llmgw.pyz (said so)."""
    from llmgw.buildinfo import zipapp_path

    pyz = zipapp_path()
    if pyz:
        return Path(pyz)
    built = Path(__file__).resolve().parents[2] / "dist" / "llmgw.pyz"
    if built.is_file():
        say(f"running from a source checkout: copying {built} (built by `python3 build.py`)")
        return built
    raise AddError("this llmgw runs from source and no dist/llmgw.pyz is built: run `python3 build.py` first, "
                   "or run node add from the llmgw.pyz file")


class SshNodeAdder:
    def __init__(self, target: Target, *, identity: str | None = None, ssh_options: Sequence[str] = (),
                 say: Callable[[str], None] = print, runner: Callable[..., subprocess.CompletedProcess] = subprocess.run):
        self.target = target
        self.identity = identity
        self.ssh_options = list(ssh_options)
        self.say = say
        self.run = runner

    def _options(self) -> list[str]:
        opts = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT}",
                "-o", "StrictHostKeyChecking=accept-new"]
        if self.identity:
            opts += ["-i", self.identity, "-o", "IdentitiesOnly=yes"]
        for o in self.ssh_options:
            opts += ["-o", o]
        return opts

    def ssh(self, command: str, *, timeout: float = 60, stream: bool = False) -> subprocess.CompletedProcess:
        argv = ["ssh", *self._options(), "-p", str(self.target.port), "--", self.target.login, command]
        try:
            if stream:
                return self._stream(argv, timeout)
            return self.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise AddError("no `ssh` here: install the OpenSSH client (apt-get install openssh-client)") from None
        except subprocess.TimeoutExpired:
            raise AddError(f"{self.target}: no answer within {timeout:g} s") from None

    def _stream(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        """Run, saying each line of the machine's output as it comes."""
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        lines = []
        deadline = time.monotonic() + timeout
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            self.say(f"  {self.target.host}: {line.rstrip()}")
            if time.monotonic() > deadline:
                proc.kill()
                break
        rc = proc.wait()
        return subprocess.CompletedProcess(argv, rc, "".join(lines), "".join(lines))

    def copy(self, local: Path, remote: str) -> None:
        """Copy a file through ssh itself (`cat >`): no scp or SFTP subsystem needed on the machine."""
        argv = ["ssh", *self._options(), "-p", str(self.target.port), "--", self.target.login,
                f"umask 077 && cat > {shlex.quote(remote)}"]
        with open(local, "rb") as f:
            done = self.run(argv, stdin=f, capture_output=True, timeout=600)
        if done.returncode != 0:
            err = done.stderr.decode(errors="replace") if isinstance(done.stderr, bytes) else done.stderr
            raise AddError(f"copying {local.name} to {self.target.host} failed: {_last_line(err)}")

    # ------------------------------------------------------------------ the steps

    def check(self, local_arch: str | None = None) -> Probe:
        """Reachable, a login, root or sudo, Linux on this architecture, a Python; AddError says what is not."""
        self.say(f"checking {self.target}")
        done = self.ssh(PROBE)
        if done.returncode == 255:
            raise AddError(_ssh_failure(self.target, done.stderr))
        probe = Probe.parse(done.stdout)
        arch = local_arch or platform.machine()
        if probe.os != "Linux":
            raise AddError(f"{self.target.host} runs {probe.os or 'an unknown system'}, not Linux; llmgw nodes are Linux")
        if probe.arch != arch:
            raise AddError(f"{self.target.host} is {probe.arch}, but this llmgw.pyz is built for {arch}: build one on "
                           f"a {probe.arch} machine and run node add from it")
        if not probe.python:
            seen = ", ".join(probe.pythons_seen) or "none"
            raise AddError(f"{self.target.host} has no Python 3.10 to 3.13 (found: {seen}); install python3 there "
                           "(Debian 12, Ubuntu 22.04/24.04 and RHEL 10 ship one)")
        if probe.uid != 0 and not probe.sudo:
            raise AddError(f"{self.target.user or 'that user'} on {self.target.host} is not root and has no sudo "
                           "without a password (sudo -n true failed); log in as root, or give the user NOPASSWD "
                           "sudo for the time of the install")
        self.say(f"{self.target.host}: Linux {probe.arch}, Python {probe.python_version} ({probe.python}), "
                 f"{'root' if probe.uid == 0 else 'sudo without a password'}, "
                 + ("systemd runs the agent" if probe.systemd else "no systemd: the agent is started directly"))
        return probe

    def install(self, probe: Probe, pyz: Path, code: str, *, name: str, root: str = "/",
                timeout: float = 300, firewall: bool = True, dry_run: bool = False) -> None:
        """Copy the file, run `llmgw join` with the code there (`--dry-run`: join's dry run, its lines said),
        and remove the copy whatever happens."""
        made = self.ssh("mktemp -d /tmp/llmgw-add.XXXXXX")
        tmp = made.stdout.strip()
        if made.returncode != 0 or not tmp.startswith("/tmp/llmgw-add."):
            raise AddError(f"could not make a temporary directory on {self.target.host}: {_last_line(made.stderr)}")
        try:
            size = pyz.stat().st_size / 1e6
            self.say(f"copying {pyz.name} ({size:.0f} MB) to {self.target.host}:{tmp}")
            self.copy(pyz, f"{tmp}/llmgw.pyz")
            sudo = "" if probe.uid == 0 else "sudo -n "
            command = (f"{sudo}{shlex.quote(probe.python)} {tmp}/llmgw.pyz join {shlex.quote(code)} "
                       f"--name {shlex.quote(name)} --root {shlex.quote(root)}"
                       + ("" if firewall else " --no-firewall") + (" --dry-run" if dry_run else ""))
            self.say(f"running llmgw join{' --dry-run' if dry_run else ''} on {self.target.host}")
            done = self.ssh(command, timeout=timeout, stream=True)
            if done.returncode != 0:
                raise AddError(f"llmgw join on {self.target.host} failed: {_last_line(done.stdout)}")
        finally:
            removed = self.ssh(f"rm -rf {shlex.quote(tmp)}")
            if removed.returncode != 0:
                self.say(f"could not remove {tmp} on {self.target.host}: {_last_line(removed.stderr)}")


def add_node(target_text: str, *, make_code: Callable[[str], dict], get_node: Callable[[str], dict | None],
             port: int = 22, identity: str | None = None, ssh_options: Sequence[str] = (), name: str = "",
             root: str = "/", timeout: float = 120.0, say: Callable[[str], None] = print, firewall: bool = True,
             dry_run: bool = False, revoke_code: Callable[[str], Any] | None = None) -> dict:
    """The whole of `llmgw node add` (the CLI and the console's Add a node run this): the node as the
    control plane reports it once ready. `make_code(name)` makes a join code for it, `get_node(name)` reads
    it back (None while unknown); AddError says what failed, each step having been said.

    `dry_run`: the checks, then join's dry run on the machine (what it would write, nothing written there);
    the code made for it is revoked with `revoke_code(id)` afterwards; {} is returned."""
    target = parse_target(target_text, port)
    adder = SshNodeAdder(target, identity=identity, ssh_options=ssh_options, say=say)
    probe = adder.check()
    name = name or probe.hostname.split(".")[0]
    if not name:
        raise AddError(f"{target.host} did not say its host name; give one with --name")
    pyz = pyz_to_copy(say)
    code = make_code(name)
    say(f"made join code {code['id']} for node {name} (works once, 15 minutes)")
    if dry_run:
        try:
            adder.install(probe, pyz, code["code"], name=name, root=root, timeout=timeout + 60, firewall=firewall,
                          dry_run=True)
        finally:
            if revoke_code is not None:
                revoke_code(code["id"])
                say(f"join code {code['id']} revoked: a dry run joins nothing")
        return {}
    adder.install(probe, pyz, code["code"], name=name, root=root, timeout=timeout + 60, firewall=firewall)
    node = _wait_ready(get_node, name, timeout)
    gpus = node.get("gpus") or []
    say(f"node {name} is ready: {node.get('cores', 0)} cores, {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}, "
        f"{node.get('memory_total_bytes', 0) / 2**30:.1f} GiB memory")
    return node


def _wait_ready(get_node: Callable[[str], dict | None], name: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    last = "not seen yet"
    while time.monotonic() < deadline:
        node = get_node(name)
        if node is not None:
            if node.get("state") == "ready" and node.get("cores", 0) > 0:
                return node
            last = f"state {node.get('state')}"
        time.sleep(0.5)
    raise AddError(f"node {name} joined but the control plane has not seen it ready with its hardware within "
                   f"{timeout:g} s ({last}); `llmgw ctl node logs {name}` or its agent log says why")


def _ssh_failure(target: Target, stderr: str) -> str:
    text = stderr.strip()
    last = _last_line(text)
    if "Permission denied" in text or "Too many authentication failures" in text:
        return (f"{target}: the login was refused ({last}); give the key with --identity, or add this machine's "
                "key to that user's authorized_keys")
    if "Host key verification failed" in text or "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        return (f"{target}: its host key is not the one known_hosts holds; if the machine was reinstalled, "
                f"remove the old key (ssh-keygen -R {target.host}) and try again")
    if any(s in text for s in ("Connection refused", "No route to host", "timed out", "Could not resolve",
                               "Network is unreachable", "Name or service not known")):
        return f"cannot reach {target}: {last}"
    return f"ssh to {target} failed: {last or 'no reason given'}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""

