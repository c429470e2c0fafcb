"""Ending what a slow test started: its processes (SIGTERM, then SIGKILL for one that stays) and the engines
they left running (engines outlive their agent by design)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterable


def end_processes(procs: Iterable[subprocess.Popen | None], engines: Iterable[int] = (), *,
                  wait: float = 30) -> None:
    """SIGTERM each process still running, last started first; kill one that has not ended within `wait`
    seconds; then SIGKILL every engine pid in `engines` still there."""
    started = [p for p in procs if p is not None]
    for proc in reversed(started):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in reversed(started):
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    for pid in engines:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
