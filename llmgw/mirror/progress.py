"""Download progress for a person: a bar on a terminal, lines in a log.

On a terminal (stderr is a tty) one line is redrawn at most ten times a
second; anywhere else (a journal, a CI log) a line is written when a file
starts or ends and every `interval` seconds in between, so a log is
readable and not a flood of carriage returns.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def human_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


class Progress:
    """Bytes of several files of one fetch, shown as one figure."""

    def __init__(self, label: str, *, stream: TextIO | None = None, tty: bool | None = None,
                 interval: float = 5.0, width: int = 30) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = interval
        self.width = width
        self._expected: dict[str, int | None] = {}
        self._done: dict[str, int] = {}
        self._finished: set[str] = set()
        self._started = time.monotonic()
        self._last_draw = 0.0
        self._drawn = False

    @property
    def total(self) -> int | None:
        if any(v is None for v in self._expected.values()):
            return None
        return sum(v or 0 for v in self._expected.values())

    @property
    def done(self) -> int:
        return sum(self._done.values())

    def expect(self, path: str, size: int | None) -> None:
        self._expected[path] = size
        self._done.setdefault(path, 0)

    def update(self, path: str, done: int, size: int | None = None) -> None:
        if size is not None and self._expected.get(path) is None:
            self._expected[path] = size
        self._done[path] = done
        now = time.monotonic()
        if self.tty and now - self._last_draw >= 0.1:
            self._draw_bar(now)
        elif not self.tty and now - self._last_draw >= self.interval:
            self._line(f"{self._figure()}")

    def finish(self, path: str, note: str = "done") -> None:
        self._finished.add(path)
        if self._expected.get(path) is not None:
            self._done[path] = self._expected[path] or 0
        if self.tty:
            self._clear()
            self.stream.write(f"{self.label}: {path}: {note}\n")
            self._draw_bar(time.monotonic())
        else:
            self._line(f"{path}: {note} ({self._figure()})")

    def close(self) -> None:
        if self.tty and self._drawn:
            self._clear()
        self.stream.flush()

    def _figure(self) -> str:
        total = self.total
        pct = f"{100 * self.done // total}%" if total else "?%"
        files = f"{len(self._finished)} of {len(self._expected)} files"
        return f"{pct}, {human_bytes(self.done)} of {human_bytes(total)}, {files}"

    def _line(self, text: str) -> None:
        self._last_draw = time.monotonic()
        self.stream.write(f"{self.label}: {text}\n")
        self.stream.flush()

    def _draw_bar(self, now: float) -> None:
        self._last_draw = now
        total = self.total
        fraction = min(1.0, self.done / total) if total else 0.0
        filled = int(fraction * self.width)
        rate = self.done / max(now - self._started, 1e-6)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {self._figure()}  {human_bytes(int(rate))}/s\x1b[K")
        self.stream.flush()
        self._drawn = True

    def _clear(self) -> None:
        self.stream.write("\r\x1b[K")
