"""A program in a real terminal for tests: a tmux server of its own (`-L SOCKET`), one session, typed into with
send-keys and read with capture-pane.

    with tmux_screen("llmgw-console-test", "console") as screen:
        screen.start(command)
        screen.wait_for("nodes: 2 ready")
        screen.keys("Down", "Enter")

`tmux_screen` skips the test when tmux is missing, except under CI (the
environment variable CI set), where .ci/run installs it and its absence is a
failure; the server is killed at the end, even on failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest


class Screen:
    """One tmux session named `session` on the tmux server `socket`."""

    def __init__(self, socket: str, session: str, *, scrollback: int = 0, pause: float = 0.15) -> None:
        self.base = ["tmux", "-L", socket]
        self.session = session
        self.scrollback = scrollback  # lines above the visible screen that `text` reads too (joined as typed)
        self.pause = pause  # after each key, so the program has drawn before the next

    def __call__(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, check=True, timeout=20).stdout

    def start(self, command: str, width: int = 120, height: int = 40) -> None:
        self("new-session", "-d", "-s", self.session, "-x", str(width), "-y", str(height), command)

    def text(self) -> str:
        history = ["-J", "-S", f"-{self.scrollback}"] if self.scrollback else []
        return self("capture-pane", "-p", *history, "-t", self.session)

    def keys(self, *keys: str, literal: bool = False) -> None:
        """Each key (a tmux key name, or with literal=True text typed as it is), one after another."""
        for key in keys:
            self("send-keys", "-t", self.session, *(["-l"] if literal else []), key)
            time.sleep(self.pause)

    def wait_for(self, text: str, timeout: float = 30) -> str:
        """The screen once it shows `text`; AssertionError with the last screen if it never does."""
        deadline = time.monotonic() + timeout
        shown = ""
        while time.monotonic() < deadline:
            shown = self.text()
            if text in shown:
                return shown
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never showed; the screen was:\n{shown}")

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, check=False)


@contextlib.contextmanager
def tmux_screen(socket: str, session: str, **options) -> Iterator[Screen]:
    """A Screen on a tmux server of this test process's own; skipped without tmux (failed under CI)."""
    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is not installed; .ci/run installs it")
        pytest.skip("tmux is not installed (apt-get install tmux); this terminal test needs it")
    screen = Screen(f"{socket}-{os.getpid()}", session, **options)
    try:
        yield screen
    finally:
        screen.close()
