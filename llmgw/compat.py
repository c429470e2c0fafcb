"""What Python 3.10 lacks of the 3.11 standard library that llmgw uses.

llmgw is written against 3.11. On 3.10, importing `llmgw` (its __init__
imports this module first, before any other llmgw module or aiohttp) fills
in the three names it relies on, so that the rest of the code reads the same
on every supported Python:

- `datetime.UTC`: the constant 3.11 added for `datetime.timezone.utc`.
- `asyncio.timeout(delay)`: the `async-timeout` package, the backport
  aiohttp itself uses on 3.10, with asyncio's `t.reschedule(when)` (loop
  time, None for never) and `t.when()`.
- `asyncio.TimeoutError` is the builtin `TimeoutError` from 3.11 on, so
  `except TimeoutError:` catches `asyncio.wait_for`'s and aiohttp's
  timeouts; on 3.10 asyncio's own class is made that alias too (asyncio
  looks it up when it raises, aiohttp when it defines its errors).

On 3.11 and later this module changes nothing.
"""

from __future__ import annotations

import sys

OLDEST = (3, 10)


def _backfill() -> None:
    import asyncio
    import asyncio.exceptions
    import datetime

    if not hasattr(datetime, "UTC"):
        datetime.UTC = datetime.timezone.utc
    if asyncio.TimeoutError is not TimeoutError:
        asyncio.exceptions.TimeoutError = TimeoutError
        asyncio.TimeoutError = TimeoutError
    if not hasattr(asyncio, "timeout"):
        asyncio.timeout = _backport_timeout()


def _backport_timeout():
    import asyncio

    import async_timeout

    class Timeout(async_timeout.Timeout):
        """async-timeout's, with asyncio's names for what llmgw calls."""

        __slots__ = ()

        def reschedule(self, when: float | None) -> None:
            self.update(when)  # None: never, as asyncio.Timeout.reschedule(None)

        def when(self) -> float | None:
            return self.deadline

    def timeout(delay: float | None) -> Timeout:
        loop = asyncio.get_running_loop()
        return Timeout(None if delay is None else loop.time() + delay, loop)

    return timeout


if sys.version_info < (3, 11):
    _backfill()


if sys.version_info >= (3, 11):
    from datetime import datetime as _datetime

    fromisoformat = _datetime.fromisoformat
else:
    import re as _re
    from datetime import datetime as _datetime

    _FRACTION = _re.compile(r"(T\d\d:\d\d:\d\d)\.(\d{1,6})\d*")

    def fromisoformat(text: str) -> _datetime:
        """datetime.fromisoformat as 3.11 reads it: a trailing Z for UTC, 1 to 6 digits of a second."""
        if text[-1:] in ("Z", "z"):
            text = text[:-1] + "+00:00"
        text = _FRACTION.sub(lambda m: f"{m.group(1)}.{m.group(2).ljust(6, '0')}", text, count=1)
        return _datetime.fromisoformat(text)
