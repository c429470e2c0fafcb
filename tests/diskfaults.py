"""A small disk that tests fill up and free again: a tmpfs mounted for the test (root only; skipped
otherwise, with the reason)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator

import pytest

FILLER = ".filler"


class SmallDisk:
    def __init__(self, path: str) -> None:
        self.path = path

    def fill(self) -> None:
        """Write a file until the disk has no byte left."""
        fd = os.open(os.path.join(self.path, FILLER), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (1 << 20, 4096, 1):
                with contextlib.suppress(OSError):
                    while os.write(fd, bytes(size)):
                        pass
        finally:
            os.close(fd)

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(self.path, FILLER))


@contextlib.contextmanager
def small_disk(path: str, size: str = "24m") -> Iterator[SmallDisk]:
    os.makedirs(path, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("a full disk is simulated with a tmpfs mount, which needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", path],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill up: {done.stderr.strip()}")
    try:
        yield SmallDisk(path)
    finally:
        subprocess.run(["umount", "-l", path], capture_output=True)
