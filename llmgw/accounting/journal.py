"""A local journal: records the store could not take, kept on the server's own
disk until it can.

The file holds JSON lines, each led by the CRC-32 of its JSON in hex
(``0a1b2c3d {...}\\n``); a line whose checksum does not match (a write cut
short by a crash) is skipped when the file is read. Every append is written
and fsync'd before it returns. The file's first ``reserve`` bytes are
allocated when it is opened (``posix_fallocate``), so appends keep working
on a disk that has since filled up; the end of the records is the first NUL
byte. ``clear()`` zeroes what was written and keeps the reservation.

The journal is opened mode 0600 (usage rows name keys and people).
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from collections.abc import Iterable
from typing import Any

log = logging.getLogger("llmgw.accounting")

#: Bytes allocated ahead when the journal is opened (about 13,000 usage rows of some 600 bytes).
RESERVE = 8 << 20
_CHUNK = 1 << 20


def encode_line(entry: Any) -> bytes:
    """One journal line: the CRC-32 of the JSON, a space, the JSON (ASCII only), a newline."""
    text = json.dumps(entry, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    data = text.encode("ascii")
    return b"%08x %s\n" % (zlib.crc32(data), data)


def decode_line(line: bytes) -> Any:
    """The entry of one line, or ValueError when it is cut short or damaged."""
    crc, _, data = line.rstrip(b"\n").partition(b" ")
    if len(crc) != 8 or int(crc, 16) != zlib.crc32(data):
        raise ValueError("checksum mismatch")
    return json.loads(data)


class Journal:
    """An append-only, fsync'd file of JSON entries (see the module's doc)."""

    def __init__(self, path: str, *, reserve: int = RESERVE) -> None:
        self.path = path
        self.reserve = max(0, int(reserve))
        self._fd: int | None = None
        self._end = 0  #: where the next line goes
        #: lines skipped on reading because their checksum did not match
        self.damaged = 0

    @property
    def size(self) -> int:
        """Bytes of records in the file."""
        return self._end

    def open(self) -> list[Any]:
        """Open (creating when absent) and return the entries already there."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        self._fd = fd
        entries, self._end = self._scan(fd)
        size = os.fstat(fd).st_size
        if self.reserve and size < self.reserve:
            try:
                os.posix_fallocate(fd, 0, self.reserve)
            except (OSError, AttributeError) as exc:  # a full disk, or a file system without it: append as we go
                log.warning("could not reserve room for the usage journal: %s", exc,
                            extra={"fields": {"path": self.path}})
        return entries

    def _scan(self, fd: int) -> tuple[list[Any], int]:
        entries: list[Any] = []
        data = b""
        offset = 0
        while True:
            chunk = os.pread(fd, _CHUNK, offset)
            if not chunk:
                break
            nul = chunk.find(b"\0")
            if nul >= 0:
                data += chunk[:nul]
                break
            data += chunk
            offset += len(chunk)
        end = len(data)
        lines = data.split(b"\n")
        if lines and lines[-1]:
            # The last line has no newline: a write cut short. Records go on after what is whole.
            self.damaged += 1
            end -= len(lines[-1])
        for line in lines[:-1]:
            if not line:
                continue
            try:
                entries.append(decode_line(line))
            except ValueError:
                self.damaged += 1
        if self.damaged:
            log.warning("the usage journal had damaged lines; they were skipped",
                        extra={"fields": {"path": self.path, "lines": self.damaged}})
        return entries, end

    def append(self, entries: Iterable[Any]) -> None:
        """Write the entries and fsync; raises OSError when the disk refuses (nothing is counted then)."""
        assert self._fd is not None, "the journal is not open"
        data = b"".join(encode_line(e) for e in entries)
        if not data:
            return
        written = 0
        while written < len(data):
            written += os.pwrite(self._fd, data[written:], self._end + written)
        os.fdatasync(self._fd)
        self._end += len(data)

    def clear(self) -> None:
        """Forget every entry (zeroing them), keeping the room reserved."""
        assert self._fd is not None, "the journal is not open"
        if self._end == 0:
            return
        if self._end > self.reserve:
            os.ftruncate(self._fd, self.reserve)
        zeros = bytes(min(self._end, _CHUNK))
        offset = 0
        while offset < min(self._end, self.reserve):
            offset += os.pwrite(self._fd, zeros[: min(len(zeros), self._end - offset)], offset)
        os.fdatasync(self._fd)
        self._end = 0

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
