"""llmgw's roles as services: a systemd unit each, started by systemd where it runs, directly where not.

One unit per role (`llmgw-server.service`, `llmgw-agent.service`,
`llmgw-mirror.service`), restarted on failure, with the hardening each role
can live with: the server and the mirror run as the `llmgw` user with the
system read-only around them; the agent runs as root because it manages
GPUs and installs engines, and its engines outlive an agent restart
(KillMode=process) so a restart does not stop serving.

Where systemd does not run (a container, a test, `--root DIR`), the same
ExecStart is started directly: detached in a session of its own, its pid in
`<state>/llmgw-ROLE.pid`, its output in `<logs>/ROLE.log`; every sentence
these functions return says which of the two happened.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Sequence

from llmgw.agent.procs import pid_running, reap
from llmgw.install.layout import Layout

__all__ = [
    "ServiceError",
    "MARKER",
    "unit_text",
    "install_service",
    "start_service",
    "stop_service",
    "remove_service",
    "service_running",
    "systemd_runs",
    "unit_argv",
]

#: The first line of every unit llmgw writes: a unit without it is the operator's and left alone.
MARKER = "# Written by llmgw (`llmgw docs install` explains it); `llmgw wipe` removes it."

_ROLE = re.compile(r"[a-z][a-z0-9-]{0,30}")
_DESCRIPTIONS = {
    "server": "llmgw control plane (client API, admin API, scheduler, agent endpoint)",
    "agent": "llmgw node agent (GPUs, engines, weights)",
    "mirror": "llmgw model mirror",
}
_STOP_GRACE = 20.0
_STARTED: list[subprocess.Popen] = []


class ServiceError(Exception):
    """A unit cannot be written, or a service started or stopped; the message says what to do."""


def systemd_runs(layout: Layout) -> bool:
    """systemd manages services here: the machine itself (root /) booted with systemd."""
    return layout.system and Path("/run/systemd/system").is_dir()


def _check_role(role: str) -> str:
    if not _ROLE.fullmatch(role):
        raise ServiceError(f"service role {role!r}: use lower-case letters, digits and '-'")
    return role


def _quote(word: str) -> str:
    """One ExecStart word as systemd reads it: `%` and `$` doubled, quoted when it holds spaces or quotes."""
    escaped = word.replace("%", "%%").replace("$", "$$")
    if escaped and not re.search(r'[\s"\'\\;]', escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _hardening(role: str, layout: Layout, user: str | None) -> list[str]:
    # The server edits server.yaml (console Settings, ctl server-config), so /etc/llmgw stays writable to it.
    writable = " ".join(_quote(str(p)) for p in (layout.etc, layout.state, layout.logs))
    common = [
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "ProtectKernelLogs=yes",
        "ProtectClock=yes",
        "RestrictRealtime=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        "LimitNOFILE=65536",
    ]
    if role == "agent":
        # Root, the devices it needs (/dev/nvidia*) and the driver's modules; /usr and /boot stay read-only, but
        # for the folder of its own file, which `ctl upgrade` has it replace (docs/upgrades.md).
        return [*common, "ProtectSystem=full", f"ReadWritePaths=-{_quote(str(layout.binary.parent))}",
                "KillMode=process"]
    lines = [
        *common,
        "ProtectSystem=strict",
        f"ReadWritePaths={writable}",
        "ProtectHome=yes",
        "PrivateDevices=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelTunables=yes",
        "ProtectControlGroups=yes",
        "ProtectHostname=yes",
        "RestrictNamespaces=yes",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
        "SystemCallArchitectures=native",
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
        "AmbientCapabilities=CAP_NET_BIND_SERVICE" if user else "",
    ]
    return [line for line in lines if line]


def unit_text(layout: Layout, role: str, argv: Sequence[str], *, user: str | None = None) -> str:
    """The systemd unit that runs `argv` as `role` (as `user`, or root when None)."""
    _check_role(role)
    if not argv:
        raise ServiceError(f"llmgw-{role}.service needs a command to run")
    description = _DESCRIPTIONS.get(role, f"llmgw {role}")
    lines = [
        MARKER,
        "[Unit]",
        f"Description={description}",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={' '.join(_quote(w) for w in argv)}",
        "Restart=on-failure",
        "RestartSec=5s",
        "TimeoutStopSec=30s",
        "Environment=PYTHONUNBUFFERED=1",
    ]
    if user:
        lines += [f"User={user}", f"Group={user}"]
    lines += _hardening(role, layout, user)
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


def unit_argv(text: str) -> list[str]:
    """The command a unit llmgw wrote runs (its ExecStart, unquoted)."""
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            words = shlex.split(line.removeprefix("ExecStart="))
            return [w.replace("%%", "%").replace("$$", "$") for w in words]
    raise ServiceError("the unit has no ExecStart line")


def _unit_user(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("User="):
            return line.removeprefix("User=").strip() or None
    return None


def _read_unit(layout: Layout, role: str) -> str:
    path = layout.unit(role)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ServiceError(f"{path} does not exist; run `llmgw server init` (or `llmgw join`) first") from None
    except OSError as exc:
        raise ServiceError(f"{path} cannot be read: {exc.strerror or exc}") from None


def _systemctl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=90)
    except FileNotFoundError:
        raise ServiceError("systemd runs here but systemctl is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise ServiceError(f"`systemctl {' '.join(args)}` did not finish within 90 s") from None
    if check and done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        raise ServiceError(f"`systemctl {' '.join(args)}` failed: {said or f'exit {done.returncode}'}")
    return done


def install_service(layout: Layout, role: str, argv: list[str], *, user: str | None = None) -> str:
    """Write llmgw-ROLE.service; a sentence saying it was written, replaced, or unchanged.

    A unit at that path that llmgw did not write (no MARKER) is the
    operator's: it is left alone and ServiceError says so.
    """
    path = layout.unit(role)
    text = unit_text(layout, role, argv, user=user)
    old: str | None = None
    try:
        old = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ServiceError(f"{path} cannot be read: {exc.strerror or exc}") from None
    if old is not None and not old.startswith(MARKER):
        raise ServiceError(f"{path} exists and was not written by llmgw; move it away to let llmgw write its own")
    if old == text:
        return f"{path}: unchanged"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    if systemd_runs(layout):
        _systemctl("daemon-reload")
    return f"{path}: {'replaced' if old is not None else 'wrote'} the unit for llmgw {role}"


def _pid(layout: Layout, role: str) -> int | None:
    """The pid in ROLE's pid file while that process still runs llmgw; else None."""
    try:
        pid = int(layout.pid_file(role).read_text().strip())
    except (OSError, ValueError):
        return None
    if not pid_running(pid):
        return None
    try:
        # A pid reused by something else since is not ours to signal.
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return pid
    return pid if b"llmgw" in cmdline else None


def service_running(layout: Layout, role: str) -> bool:
    """ROLE runs: systemd says it is active, or the process in its pid file is alive."""
    _check_role(role)
    if systemd_runs(layout):
        return _systemctl("is-active", "--quiet", f"llmgw-{role}.service", check=False).returncode == 0
    return _pid(layout, role) is not None


def _run_as(layout: Layout, user: str | None) -> tuple[dict, str]:
    """subprocess arguments to run as `user` when this process may, and a word on who it runs as.

    Under --root DIR the files belong to whoever ran init, so the service runs as them too."""
    if user and os.geteuid() == 0 and layout.system:
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            return {}, f"as root (no user {user} on this machine)"
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}, f"as {user}"
    name = pwd.getpwuid(os.geteuid()).pw_name if hasattr(os, "geteuid") else "this user"
    return {}, f"as {name}"


def start_service(layout: Layout, role: str) -> str:
    """Start ROLE (systemctl enable --now, or directly without systemd); a sentence saying how."""
    _check_role(role)
    unit = f"llmgw-{role}.service"
    if systemd_runs(layout):
        _read_unit(layout, role)
        _systemctl("enable", "--now", unit)
        return f"{unit}: enabled and started by systemd"
    text = _read_unit(layout, role)
    pid = _pid(layout, role)
    if pid is not None:
        return f"llmgw {role}: already running (pid {pid}, started directly: no systemd here)"
    argv = unit_argv(text)
    layout.logs.mkdir(parents=True, exist_ok=True)
    layout.state.mkdir(parents=True, exist_ok=True)
    log_path = layout.log_file(role)
    extra, who = _run_as(layout, _unit_user(text))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log_path, "ab") as log:
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                start_new_session=True, close_fds=True, cwd="/", **extra,
            )
        except OSError as exc:
            raise ServiceError(f"llmgw {role} cannot be started ({argv[0]}): {exc.strerror or exc}") from None
    # Until it has exec'd, the child still shows this process's command line: wait for that
    # (a moment), and say so at once should it exit straight away.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = _log_tail(log_path)
            raise ServiceError(f"llmgw {role} exited at once (status {proc.returncode}); its log {log_path} ends:\n{tail}")
        try:
            if Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[:len(argv)] == [a.encode() for a in argv]:
                break
        except OSError:
            break
        time.sleep(0.02)
    pid_file = layout.pid_file(role)
    tmp = pid_file.with_name(pid_file.name + ".tmp")
    tmp.write_text(f"{proc.pid}\n")
    os.replace(tmp, pid_file)
    # Not waited on: a detached service outlives this command. Kept here so
    # Popen's destructor does not warn; _alive reaps it should it stop first.
    _STARTED.append(proc)
    return (f"llmgw {role}: started directly {who} (no systemd here), pid {proc.pid}, "
            f"pid file {pid_file}, log {log_path}")


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "  (no log)"
    return "\n".join(f"  {line}" for line in text.splitlines()[-lines:])


def stop_service(layout: Layout, role: str) -> str:
    """Stop ROLE (systemctl stop, or SIGTERM then SIGKILL to the process in its pid file); a sentence."""
    _check_role(role)
    unit = f"llmgw-{role}.service"
    if systemd_runs(layout):
        if not layout.unit(role).exists():
            return f"{unit}: not installed"
        _systemctl("stop", unit)
        return f"{unit}: stopped by systemd"
    pid = _pid(layout, role)
    pid_file = layout.pid_file(role)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return f"llmgw {role}: not running"
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + _STOP_GRACE
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    how = "stopped"
    if _alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        how = f"killed (it did not stop within {_STOP_GRACE:.0f} s of SIGTERM)"
        time.sleep(0.1)
    pid_file.unlink(missing_ok=True)
    return f"llmgw {role}: {how} (pid {pid})"


def _alive(pid: int) -> bool:
    reap(pid)  # ours when this process started it
    return pid_running(pid)


def remove_service(layout: Layout, role: str) -> str:
    """Stop ROLE, disable it and remove its unit (only one llmgw wrote); a sentence."""
    _check_role(role)
    path = layout.unit(role)
    said = [stop_service(layout, role)]
    if not path.exists():
        said.append(f"{path}: not there")
        return "; ".join(said)
    if not path.read_text(encoding="utf-8", errors="replace").startswith(MARKER):
        said.append(f"{path} was not written by llmgw: left alone")
        return "; ".join(said)
    if systemd_runs(layout):
        _systemctl("disable", path.name, check=False)
    path.unlink()
    if systemd_runs(layout):
        _systemctl("daemon-reload", check=False)
    said.append(f"{path}: removed")
    return "; ".join(said)
