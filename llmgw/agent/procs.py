"""Engine processes as the kernel sees them, and their output.

The supervisor's building blocks, each small and tested on its own:

- which process a pid is (`ProcessIdentity`: pid, the start time the kernel
  gives it in /proc/PID/stat, the boot it belongs to), so a pid recycled for
  another program after an engine died is never taken for that engine, nor
  signalled;
- launching a plan's argv in a session of its own with its output going
  straight to a file, so the engine outlives the agent and keeps writing
  when nobody reads;
- `${NAME}` in argv, filled from the plan's own environment;
- `LogRing` (the last lines in memory) and `LogTail` (follows the file into
  the ring and rotates it by size).
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import attrs

from llmgw.agent.engine_user import EngineUser

__all__ = [
    "ProcessIdentity", "LaunchError", "identify", "is_alive", "pid_running", "group_members", "signal_group",
    "expand_argv", "engine_environment", "launch", "LogRing", "LogTail", "read_last_lines", "boot_id",
    "ProcStat", "proc_stat", "rss_bytes", "clock_ticks", "reap", "find_by_env",
]

_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Names an engine must not inherit from the agent: the agent's own secrets.
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
_DEAD_STATES = ("Z", "X", "x")


class LaunchError(Exception):
    """The engine's process could not be started; the message says why, in words."""


# --- which process a pid is ------------------------------------------------------


@attrs.frozen
class ProcStat:
    """The fields of /proc/PID/stat the agent uses."""

    pid: int
    state: str  #: R, S, D, Z (a zombie: dead, not yet reaped), …
    pgrp: int
    session: int
    utime: int  #: clock ticks
    stime: int
    start_ticks: int  #: clock ticks after boot the process started


def proc_stat(pid: int, proc: str = "/proc") -> ProcStat | None:
    """The process's stat line, read; None when there is no such process."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError, OSError):
        return None
    # The command name sits in parentheses and may hold spaces or ')': the
    # fields that follow start after the last ')'.
    close = raw.rfind(")")
    fields = raw[close + 2:].split()
    try:
        return ProcStat(pid=pid, state=fields[0], pgrp=int(fields[2]), session=int(fields[3]),
                        utime=int(fields[11]), stime=int(fields[12]), start_ticks=int(fields[19]))
    except (IndexError, ValueError):
        return None


def boot_id(proc: str = "/proc") -> str:
    """This boot's id: start times only mean something within one boot."""
    try:
        with open(f"{proc}/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def clock_ticks() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return 100


@attrs.frozen
class ProcessIdentity:
    """A process, told apart from any later one given the same pid."""

    pid: int
    start_ticks: int
    boot_id: str = ""


def identify(pid: int, proc: str = "/proc") -> ProcessIdentity | None:
    stat = proc_stat(pid, proc)
    if stat is None:
        return None
    return ProcessIdentity(pid=pid, start_ticks=stat.start_ticks, boot_id=boot_id(proc))


def is_alive(ident: ProcessIdentity, proc: str = "/proc") -> bool:
    """Whether this very process still runs: not gone, not a zombie, not a newer one with its pid."""
    stat = proc_stat(ident.pid, proc)
    if stat is None or stat.state in _DEAD_STATES:
        return False
    if stat.start_ticks != ident.start_ticks:
        return False
    return not (ident.boot_id and boot_id(proc) != ident.boot_id)


def pid_running(pid: int, proc: str = "/proc") -> bool:
    """Whether a process has this pid and has not ended (a zombie has); which program it is, `identify` tells."""
    stat = proc_stat(pid, proc)
    return stat is not None and stat.state not in _DEAD_STATES


def reap(pid: int) -> int | None:
    """The exit status of our own child `pid` once it has ended, reaping it; None otherwise.

    After `Restart` the agent is the same process with a new program, so
    engines it started before are still its children, dead ones zombies
    until reaped here.
    """
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    if done != pid:
        return None
    return os.waitstatus_to_exitcode(status)


def group_members(pgid: int, proc: str = "/proc") -> list[ProcStat]:
    """Every live process in the process group (an engine's workers included)."""
    out = []
    try:
        names = os.listdir(proc)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        stat = proc_stat(int(name), proc)
        if stat is not None and stat.pgrp == pgid and stat.state not in _DEAD_STATES:
            out.append(stat)
    return out


def rss_bytes(pid: int, proc: str = "/proc") -> int:
    try:
        with open(f"{proc}/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def signal_group(ident: ProcessIdentity, sig: int, proc: str = "/proc") -> bool:
    """Send `sig` to the engine's whole process group, only if the leader is still that engine.

    Engines are started as session (and group) leaders, so the group id is
    the pid. Returns False when there was nothing to signal.
    """
    if ident.boot_id and boot_id(proc) != ident.boot_id:
        return False
    stat = proc_stat(ident.pid, proc)
    if stat is not None and stat.start_ticks != ident.start_ticks:
        return False  # the pid is another program's now
    if (stat is None or stat.state in _DEAD_STATES) and not group_members(ident.pid, proc):
        return False  # the leader is gone and left no workers behind
    try:
        os.killpg(ident.pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


# --- launching --------------------------------------------------------------------


def expand_argv(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """`${NAME}` in each argument replaced by NAME's value in the plan's own `env`.

    Only the plan's environment is looked in, never the agent's: a plugin
    names what it set itself. A name it did not set is an error rather than
    an empty string passed on.
    """
    out = []
    for i, arg in enumerate(argv):
        def fill(m: re.Match[str], i: int = i) -> str:
            name = m.group(1)
            if name not in env:
                raise LaunchError(f"argv[{i}] refers to ${{{name}}}, which the launch plan's environment does not set")
            return env[name]
        out.append(_REF.sub(fill, arg))
    return out


def engine_environment(plan_env: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment an engine runs with: the agent's, less its secrets, then the plan's on top."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if not _SECRET_NAME.search(k) and not k.startswith("LLMGW_AGENT_")}
    env.update(plan_env)
    return env


def launch(argv: Sequence[str], env: Mapping[str, str], log_path: Path, *, cwd: Path | None = None,
           header: str = "", user: EngineUser | None = None) -> subprocess.Popen:
    """Start `argv` in a new session, stdout and stderr appended to `log_path`, stdin from /dev/null.

    The engine writes to the file itself: with no pipe to the agent, the
    agent's death cannot break its output (a pipe would, with SIGPIPE).
    The agent opens the file, so an engine running as `user` (another
    account than the agent's) writes to it without being able to open it.
    """
    if not argv:
        raise LaunchError("the launch plan has an empty command line")
    program = argv[0]
    if os.sep not in program:
        found = shutil.which(program, path=env.get("PATH", os.defpath))
        if found is None:
            raise LaunchError(f"{program} is not installed on this node (not found on PATH)")
        program = found
    elif not os.access(program, os.X_OK):
        raise LaunchError(f"{program} does not exist or is not executable")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        if header:
            os.write(fd, header.encode("utf-8", "replace"))
        as_user = {}
        if user is not None and not user.is_self:
            as_user = {"user": user.uid, "group": user.gid, "extra_groups": list(user.groups)}
        return subprocess.Popen(
            [program, *argv[1:]], env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
            start_new_session=True, close_fds=True, **as_user,
        )
    except OSError as exc:
        raise LaunchError(f"could not run {program}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


# --- output -------------------------------------------------------------------------


class LogRing:
    """The last `size` lines of an engine's output, in memory."""

    def __init__(self, size: int) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=max(1, size))

    def extend(self, lines: Iterable[str]) -> None:
        self._lines.extend(lines)

    def last(self, n: int | None = None) -> list[str]:
        if n is None or n >= len(self._lines):
            return list(self._lines)
        if n <= 0:
            return []
        return list(self._lines)[-n:]

    def __len__(self) -> int:
        return len(self._lines)


_MAX_LINE = 64 * 1024


class LogTail:
    """Follows an engine's log file into a ring, and rotates the file when it grows past `max_bytes`.

    Rotation copies the file to `NAME.1` (older copies moving up to
    `NAME.<keep>`) and truncates it: the engine holds the file open in
    append mode, so it carries on writing at the new end. Lines written in
    the instant between the copy and the truncation are lost; that is the
    price of an engine that needs nobody to read its output.
    """

    def __init__(self, path: Path, ring: LogRing, *, max_bytes: int = 20 << 20, keep: int = 3) -> None:
        self.path = path
        self.ring = ring
        self.max_bytes = max_bytes
        self.keep = keep
        self._offset = 0
        self._partial = b""

    def start_at_end(self, preload: int) -> None:
        """Begin at the file's end, with its last `preload` lines in the ring (an adopted engine)."""
        self.ring.extend(read_last_lines(self.path, preload))
        with contextlib.suppress(OSError):
            self._offset = self.path.stat().st_size

    def poll(self) -> int:
        """Read what was written since the last poll into the ring; returns the lines added."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return 0
        if size < self._offset:  # truncated by someone else
            self._offset, self._partial = 0, b""
        added = 0
        if size > self._offset:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read(size - self._offset)
            self._offset += len(data)
            added = self._take(data)
        if self.max_bytes and self._offset > self.max_bytes:
            self.rotate()
        return added

    def flush(self) -> None:
        """The last line, even without its newline (the process has ended)."""
        self.poll()
        if self._partial:
            self.ring.extend([self._partial.decode("utf-8", "replace")])
            self._partial = b""

    def rotate(self) -> None:
        for n in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{n}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{n + 1}"))
        if self.keep > 0:
            shutil.copyfile(self.path, self.path.with_name(f"{self.path.name}.1"))
        os.truncate(self.path, 0)
        self._offset = 0

    def _take(self, data: bytes) -> int:
        chunks = (self._partial + data).split(b"\n")
        self._partial = chunks.pop()
        if len(self._partial) > _MAX_LINE:  # a line without end: cut it rather than grow without bound
            chunks.append(self._partial)
            self._partial = b""
        lines = [c.rstrip(b"\r").decode("utf-8", "replace") for c in chunks]
        self.ring.extend(lines)
        return len(lines)


def read_last_lines(path: Path, n: int, *, block: int = 64 * 1024) -> list[str]:
    """The last `n` lines of a file, read from its end."""
    if n <= 0:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            data = b""
            while end > 0 and data.count(b"\n") <= n:
                start = max(0, end - block)
                f.seek(start)
                data = f.read(end - start) + data
                end = start
    except OSError:
        return []
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line.rstrip(b"\r").decode("utf-8", "replace") for line in lines[-n:]]



def find_by_env(name: str, value: str, proc: str = "/proc") -> ProcessIdentity | None:
    """The oldest live process whose environment holds NAME=VALUE (an engine whose pid was never written down)."""
    wanted = f"{name}={value}".encode()
    found: list[ProcStat] = []
    try:
        names = os.listdir(proc)
    except OSError:
        return None
    for entry in names:
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/environ", "rb") as f:
                if wanted not in f.read().split(b"\0"):
                    continue
        except OSError:
            continue
        stat = proc_stat(int(entry), proc)
        if stat is not None and stat.state not in _DEAD_STATES and stat.pid == stat.pgrp:
            found.append(stat)
    if not found:
        return None
    first = min(found, key=lambda s: s.start_ticks)
    return ProcessIdentity(pid=first.pid, start_ticks=first.start_ticks, boot_id=boot_id(proc))
