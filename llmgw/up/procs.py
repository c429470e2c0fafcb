"""The processes `llmgw up` starts, and stopping every one of them, engines included.

The agent starts engines in sessions of their own, so they outlive it (that
is how an agent restart keeps them serving). `up` must stop them anyway, so
it makes itself a *child subreaper* (Linux): an engine whose agent has gone
is re-parented to `up` instead of to init, and `up` finds it among its own
descendants when it stops everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

#: How often `up` starts a child that died again within one minute before it gives up.
RESTARTS_PER_MINUTE = 5
PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux only); False where the system has no such thing."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when `up` dies, even by kill -9 (Linux only)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _parents() -> dict[int, int]:
    """pid -> parent pid for every process (from /proc), zombies left out."""
    out: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: read after the last ')'.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) >= 2 and fields[0] != "Z":
            out[int(entry)] = int(fields[1])
    return out


def descendants(root: int | None = None) -> list[int]:
    """Every live process below `root` (this process), children first."""
    root = os.getpid() if root is None else root
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    queue = list(children.get(root, []))
    while queue:
        pid = queue.pop(0)
        found.append(pid)
        queue.extend(children.get(pid, []))
    return found


def _reap(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


async def stop_descendants(grace: float = 10.0, *, exclude: Sequence[int] = ()) -> list[int]:
    """SIGTERM every descendant (engines left by the agent), SIGKILL what is left after `grace`."""
    targets = [p for p in descendants() if p not in exclude]
    for pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(targets)
        alive = [p for p in descendants() if p in targets]
        if not alive:
            return targets
        await asyncio.sleep(0.1)
    for pid in descendants():
        if pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    await asyncio.sleep(0.1)
    _reap(targets)
    return targets


def _open_log(path: Path):
    """The child's log, appended to across runs (a small local file: no executor)."""
    return open(path, "ab")  # handed to the child, closed by the caller


class Child:
    """One child (the server or the agent): its process and its log file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None
        self._restarts: list[float] = []  # monotonic times of the restarts in the last minute

    def may_restart(self, now: float | None = None) -> bool:
        """Whether another restart fits in RESTARTS_PER_MINUTE; counts it when it does."""
        now = time.monotonic() if now is None else now
        self._restarts = [t for t in self._restarts if now - t < 60.0]
        if len(self._restarts) >= RESTARTS_PER_MINUTE:
            return False
        self._restarts.append(now)
        return True

    @property
    def restarts_in_last_minute(self) -> int:
        now = time.monotonic()
        return sum(1 for t in self._restarts if now - t < 60.0)

    async def start(self) -> None:
        log = _open_log(self.log_path)
        try:
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            # Its own session: Ctrl-C reaches `up` alone, which stops the children in order.
            # And should `up` be killed outright, the child is told to stop rather than left behind.
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        finally:
            log.close()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def stop(self, grace: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after `grace`; the exit status."""
        if self.proc is None:
            return None
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace):
                    await self.proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        return self.proc.returncode

    def log_tail(self, lines: int = 20) -> list[str]:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return text.splitlines()[-lines:]
