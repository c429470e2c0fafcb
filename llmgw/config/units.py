"""Durations and sizes as an operator writes them: `5s`, `1h30m`, `128MiB`.

Both types are the plain Python value underneath (a `timedelta`, an `int`),
so code that uses them needs nothing special: `timeout.total_seconds()`,
`int(size)`. Their `str()` is the canonical form written back to a file.
"""

from __future__ import annotations

import datetime
import re
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["Duration", "ByteSize", "describe"]


def describe(value: Any) -> str:
    """How a wrong value is named in an error: the text itself, or what it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nothing (null)"
    if isinstance(value, str):
        return repr(str(value))
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict) or hasattr(value, "items"):
        return "a mapping"
    return f"a {type(value).__name__}"


# ---------------------------------------------------------------- durations

_MICROS = {
    "us": 1,
    "µs": 1,
    "ms": 1_000,
    "s": 1_000_000,
    "m": 60_000_000,
    "h": 3_600_000_000,
    "d": 86_400_000_000,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(us|µs|ms|s|m|h|d)")
_BARE_NUMBER = re.compile(r"[+-]?(\d+(?:\.\d*)?|\.\d+)")


class Duration(datetime.timedelta):
    """A span of time: `5s`, `250ms`, `30m`, `2160h`, `1h30m`; a bare number is seconds.

    It is a `datetime.timedelta`, so `total_seconds()` and comparisons work;
    `str()` gives the canonical form (`1h30m`), which parses back to the same.
    """

    __slots__ = ()

    @classmethod
    def parse(cls, value: Any) -> Duration:
        """Read a duration from YAML: text like `1h30m`, or a number of seconds."""
        if isinstance(value, datetime.timedelta):
            return cls(microseconds=_timedelta_micros(value))
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"expected a duration like 5s, got {describe(value)}")
        if isinstance(value, (int, float)):
            return cls.from_seconds(value)
        text = value.strip()
        if _BARE_NUMBER.fullmatch(text):
            return cls.from_seconds(Decimal(text))
        sign = 1
        body = text
        if body and body[0] in "+-":
            sign = -1 if body[0] == "-" else 1
            body = body[1:]
        micros = Decimal(0)
        pos = 0
        for match in _DURATION_PART.finditer(body):
            if match.start() != pos:
                break
            micros += Decimal(match.group(1)) * _MICROS[match.group(2)]
            pos = match.end()
        if not body or pos != len(body):
            raise ValueError(f"expected a duration like 5s, got {describe(value)}")
        return cls._of_micros(sign * int(micros.to_integral_value()), value)

    @classmethod
    def from_seconds(cls, seconds: float | int | Decimal) -> Duration:
        try:
            micros = Decimal(str(seconds)) * 1_000_000
        except InvalidOperation:  # pragma: no cover - callers pass numbers
            raise ValueError(f"expected a duration like 5s, got {describe(seconds)}") from None
        return cls._of_micros(int(micros.to_integral_value()), seconds)

    @classmethod
    def _of_micros(cls, micros: int, given: Any) -> Duration:
        try:
            return cls(microseconds=micros)
        except OverflowError:  # past timedelta's 999999999 days
            raise ValueError(f"expected a duration like 5s, got {describe(given)}: longer than any span "
                             "this can hold") from None

    @property
    def micros(self) -> int:
        """The whole span in microseconds (exact, unlike total_seconds())."""
        return _timedelta_micros(self)

    def __str__(self) -> str:
        micros = self.micros
        if micros == 0:
            return "0s"
        sign = "-" if micros < 0 else ""
        micros = abs(micros)
        parts = []
        for unit in ("h", "m", "s", "ms", "us"):
            size = _MICROS[unit]
            count, micros = divmod(micros, size)
            if count:
                parts.append(f"{count}{unit}")
        return sign + "".join(parts)

    def __repr__(self) -> str:
        return f"Duration('{self}')"

    def __reduce__(self):
        return (Duration, (0, 0, self.micros))


def _timedelta_micros(value: datetime.timedelta) -> int:
    return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds


# ---------------------------------------------------------------- sizes

_BYTES = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([A-Za-z]*)")
_CANONICAL_UNITS = (
    (1024**4, "TiB"),
    (1024**3, "GiB"),
    (1024**2, "MiB"),
    (1024, "KiB"),
    (1000**4, "TB"),
    (1000**3, "GB"),
    (1000**2, "MB"),
    (1000, "KB"),
)


class ByteSize(int):
    """A number of bytes: `128MiB`, `1GiB`, `500MB`, `64KiB` or a bare `1048576`.

    Binary units (KiB, MiB, GiB, TiB, also Ki, Mi, Gi, Ti) are powers of 1024;
    decimal ones (KB, MB, GB, TB, also K, M, G, T) powers of 1000. It is an
    `int`; `str()` gives the canonical form (`128MiB`).
    """

    __slots__ = ()

    @classmethod
    def parse(cls, value: Any) -> ByteSize:
        """Read a size from YAML: text with a unit, or a number of bytes."""
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"expected a size like 128MiB, got {describe(value)}")
        if isinstance(value, int):
            if value < 0:
                raise ValueError(f"expected a size like 128MiB, got {value}: a size cannot be negative")
            return cls(value)
        match = _SIZE.fullmatch(value.strip())
        unit = _BYTES.get(match.group(2).lower()) if match else None
        if match is None or unit is None:
            raise ValueError(f"expected a size like 128MiB, got {describe(value)}")
        return cls(int(Decimal(match.group(1)) * unit))

    def __str__(self) -> str:
        number = int(self)
        if number == 0:
            return "0"
        for size, unit in _CANONICAL_UNITS:
            if number % size == 0:
                return f"{number // size}{unit}"
        return str(number)

    def __repr__(self) -> str:
        return f"ByteSize('{self}')"

    def __reduce__(self):
        return (ByteSize, (int(self),))
