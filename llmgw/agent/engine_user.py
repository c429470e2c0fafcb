"""Who engines run as, and where they listen.

An agent running as root starts every engine as `llmgw-engine`, a system
user of llmgw's own (made with `useradd --system` the first time it is
missing), in the groups that open GPU device nodes (`video`, `render`) when
the machine has them. The engine can read its weights and its program and
write to its log (the agent opens it and hands the engine the descriptor),
and nothing of root's. An agent that is not root runs engines as itself, and
says so when it starts.

Engines listen on one address: the one `engine_host` names, or else the
address this node reaches its first control plane from (loopback when the
control plane is on this machine). Never every address: an engine demands
its key, but it need not be offered to every network the node is on.
"""

from __future__ import annotations

import grp
import ipaddress
import logging
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Sequence
from urllib.parse import urlsplit

import attrs

__all__ = [
    "ENGINE_USER", "GPU_GROUPS", "as_engine_user", "is_every_address", "EngineUser", "EngineUserError", "engine_user", "management_address",
    "make_reachable", "unreachable_part", "EVERY_ADDRESS", "listen_address", "runnable_argv",
]

log = logging.getLogger("llmgw.agent.engine_user")

ENGINE_USER = "llmgw-engine"
#: Groups that own /dev/nvidia*, /dev/dri/* and /dev/kfd on the distributions llmgw runs on.
GPU_GROUPS = ("video", "render")
EVERY_ADDRESS = ("0.0.0.0", "::", "[::]")


class EngineUserError(Exception):
    """The engine user cannot be had; the message says what to do."""


@attrs.frozen
class EngineUser:
    """The account engines run as."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...] = ()  #: supplementary groups (the GPU ones present)
    home: str = "/nonexistent"

    @property
    def is_self(self) -> bool:
        return self.uid == os.geteuid()


def engine_user(name: str = ENGINE_USER, *, home: str | os.PathLike[str] | None = None) -> EngineUser:
    """The user engines run as: `name` when the agent is root (made when missing), else the agent's own."""
    if os.geteuid() != 0:
        me = pwd.getpwuid(os.geteuid())
        return EngineUser(name=me.pw_name, uid=me.pw_uid, gid=me.pw_gid, groups=tuple(os.getgroups()),
                          home=me.pw_dir)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        entry = _create(name)
    groups = []
    for group in GPU_GROUPS:
        try:
            groups.append(grp.getgrnam(group).gr_gid)
        except KeyError:
            continue
    return EngineUser(name=name, uid=entry.pw_uid, gid=entry.pw_gid, groups=tuple(groups),
                      home=str(home) if home else entry.pw_dir)


def _create(name: str) -> pwd.struct_passwd:
    command = ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
               "--shell", "/usr/sbin/nologin", "--comment", "llmgw inference engines", name]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise EngineUserError(f"could not make the engine user {name} (useradd: {exc}); make it with "
                              f"`useradd --system --user-group {name}`") from None
    try:
        entry = pwd.getpwnam(name)  # another agent may have made it at the same moment
    except KeyError:
        why = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        raise EngineUserError(f"could not make the engine user {name}: {why}; make it with "
                              f"`useradd --system --user-group {name}`") from None
    log.info("made the system user %s (uid %d) to run engines as", name, entry.pw_uid)
    return entry


#: The agent's own places an engine running as another user has no business being pointed at.
_PERSONAL_ENV = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR",
                 "SHIV_ROOT", "TMPDIR", "MAIL")


def as_engine_user(env: dict[str, str], user: EngineUser) -> dict[str, str]:
    """An engine's environment, for running it as `user`: its own home, none of the agent's folders."""
    out = {k: v for k, v in env.items() if k not in _PERSONAL_ENV}
    out.update(HOME=user.home, USER=user.name, LOGNAME=user.name)
    return out


def unreachable_part(path: str | os.PathLike[str], user: EngineUser, *, write: bool = False) -> Path | None:
    """The first folder on the way to `path` (or `path` itself) that `user` cannot enter or read; None when none.

    Judged from the modes and owners, as the kernel would for that user
    (ACLs aside): root's own answer from os.access would say yes to all.
    """
    target = Path(path).absolute()
    chain = [*reversed(target.parents), target]
    for part in chain:
        try:
            st = part.stat()
        except OSError:
            return part
        last = part == target
        if stat.S_ISDIR(st.st_mode):
            need = 0o1 | (0o4 if last else 0) | (0o2 if last and write else 0)  # x to pass; r to list the last
        else:
            need = 0o4 | (0o1 if st.st_mode & 0o111 else 0)
        if not _may(st, user, need):
            return part
    return None


def _may(st: os.stat_result, user: EngineUser, need: int) -> bool:
    if user.uid == 0:
        return True
    if st.st_uid == user.uid:
        bits = (st.st_mode >> 6) & 0o7
    elif st.st_gid == user.gid or st.st_gid in user.groups:
        bits = (st.st_mode >> 3) & 0o7
    else:
        bits = st.st_mode & 0o7
    return bits & need == need


def make_reachable(folders: Iterable[str | os.PathLike[str]], user: EngineUser) -> list[str]:
    """Let `user` read the agent's weights and engines folders: each made 0755 when it is the agent's.

    Returns what is still out of reach, in words (a parent folder the agent
    did not make and will not open up, like a home directory).
    """
    problems = []
    for folder in folders:
        path = Path(folder)
        try:
            path.mkdir(parents=True, exist_ok=True)
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & 0o005 != 0o005:
                os.chmod(path, mode | 0o055)
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror or exc}")
            continue
        blocked = unreachable_part(path, user)
        if blocked is not None:
            problems.append(f"{blocked} is not open to {user.name} (mode {_mode(blocked)}), so engines cannot "
                            f"read {path}; give others execute permission on it (chmod o+x {blocked}) or move "
                            f"the folder")
    return problems


def _mode(path: Path) -> str:
    try:
        return oct(stat.S_IMODE(path.stat().st_mode))
    except OSError:
        return "unknown"


def management_address(control_planes: Sequence[str]) -> str:
    """The local address this node reaches its first control plane from; 127.0.0.1 when it cannot tell.

    A UDP socket's connect() picks the route without sending anything.
    """
    for address in control_planes:
        host, port = _host_port(address)
        if not host:
            continue
        try:
            infos = socket.getaddrinfo(host, port or 7443, type=socket.SOCK_DGRAM)
        except OSError:
            continue
        for family, _, _, _, sockaddr in infos:
            try:
                with socket.socket(family, socket.SOCK_DGRAM) as s:
                    s.connect(sockaddr)
                    local = s.getsockname()[0]
            except OSError:
                continue
            if local and local not in EVERY_ADDRESS:
                return local
    return "127.0.0.1"


def _host_port(address: str) -> tuple[str, int | None]:
    text = address if "://" in address else f"//{address}"
    try:
        parts = urlsplit(text)
        return parts.hostname or "", parts.port
    except ValueError:
        return "", None


def is_every_address(host: str) -> bool:
    """Whether `host` means every address of the machine (0.0.0.0, ::)."""
    if host.strip() in EVERY_ADDRESS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def listen_address(configured: str, control_planes: Sequence[str]) -> str:
    """Where engines listen: `engine_host` when it names one address, else this node's management address."""
    host = configured.strip()
    if host and not is_every_address(host):
        return host
    chosen = management_address(control_planes)
    if host:
        log.warning("engine_host %s is every address of the node; engines listen on %s instead", host, chosen)
    return chosen


def runnable_argv(argv: Sequence[str], weights: str, user: EngineUser, engines_dir: str | os.PathLike[str],
                  engine: str) -> list[str]:
    """`argv`, with its program made reachable for `user` where llmgw can; EngineUserError saying what blocks it.

    A llama-server that llmgw built sits in the build cache, often under
    root's home: it is static, so a copy goes to ENGINES/<engine>/bin/,
    where the engine user can run it. Anything else that `user` cannot
    reach (the program, the Python running llmgw, the weights) is an
    error naming the folder in the way.
    """
    out = list(argv)
    if not out:
        return out
    program = out[0] if os.sep in out[0] else (shutil.which(out[0]) or out[0])
    if os.path.isfile(program) and unreachable_part(program, user) is not None and _is_llama_build(program):
        out[0] = program = _install_copy(Path(program), Path(engines_dir) / engine / "bin")
    needed = [("its program", program)]
    if os.path.realpath(program) == os.path.realpath(sys.executable):
        needed.append(("the Python running llmgw", os.path.dirname(os.__file__)))
        if len(out) > 1 and out[1].endswith(".pyz"):
            needed.append(("the llmgw zipapp", out[1]))
        else:
            import llmgw

            needed.append(("llmgw's own files", os.path.dirname(llmgw.__file__)))
    if weights:
        needed.append(("its weights", weights))
    for what, path in needed:
        blocked = unreachable_part(path, user)
        if blocked is not None:
            raise EngineUserError(
                f"engines run as {user.name}, who cannot reach {what} ({path}): {blocked} is closed to it "
                f"(mode {_mode(blocked)}); open it to others (chmod o+rx), put the files where every user can "
                f"read them, or set engine_user: \"\" in agent.yaml to run engines as root")
    return out


def _is_llama_build(program: str) -> bool:
    from llmgw.agent.llamacpp_build import BINARY, default_cache_dir

    path = Path(program).resolve()
    return path.name == BINARY and default_cache_dir().resolve() in path.parents


def _install_copy(program: Path, folder: Path) -> str:
    """A copy of a static program in `folder` (0755), replaced only when the original changed."""
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / program.name
    src = program.stat()
    try:
        have = dest.stat()
        if have.st_size == src.st_size and have.st_mtime >= src.st_mtime:
            return str(dest)
    except OSError:
        pass
    tmp = folder / f".{program.name}.{os.getpid()}.tmp"
    shutil.copy2(program, tmp)
    os.chmod(tmp, 0o755)
    os.replace(tmp, dest)
    log.info("copied %s to %s, where the engine user can run it", program, dest)
    return str(dest)
