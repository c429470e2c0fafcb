"""What the serving path reads from the store and keeps a while: one read at a time, made before it is due.

A project's switches and a key's kept-request rules are read from the store
and trusted for a time-to-live. Read on expiry by every request that finds
them expired, a busy key's rules were read by all of its requests in flight
at once: fifty reads queued behind each other in the store's one thread, and
the requests behind them waited up to seconds, one after another (the long
tail of `llmgw bench gateway`). Here:

- requests that find nothing kept share one read (`asyncio.shield`: a
  request that goes away does not cancel the read the others wait for);
- a value past half its time-to-live is still answered at once, and one read
  in the background replaces it: a value in use never expires in front of a
  request;
- `forget` drops what is kept, and a read that started before it cannot put
  its older answer back.

A background read that fails leaves the value as it was, to be read in front
of the next request once its time-to-live is out, which then sees the error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ReadAhead(Generic[K, V]):
    """Values by key, each read by `load(key)` at most once at a time and again before it expires."""

    def __init__(self, load: Callable[[K], Awaitable[V]], ttl: float, *, most: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._load = load
        self.ttl = ttl
        self._most = most
        self._clock = clock
        self._known: dict[K, tuple[V, float]] = {}
        self._reading: dict[K, asyncio.Task[V]] = {}
        self._generation = 0
        self.reads = 0  #: reads made (tests, and what a bench may ask)

    async def get(self, key: K) -> V:
        known = self._known.get(key)
        if known is not None:
            age = self._clock() - known[1]
            if age < self.ttl:
                if age >= self.ttl / 2 and key not in self._reading:
                    self._read(key)  # ahead: in the background, this request is answered at once
                return known[0]
        return await asyncio.shield(self._read(key))

    def forget(self, key: K | None = None) -> None:
        """Read `key` (None: every key) again on next use; a read under way is not trusted."""
        self._generation += 1
        if key is None:
            self._known.clear()
            self._reading.clear()
        else:
            self._known.pop(key, None)
            self._reading.pop(key, None)

    def _read(self, key: K) -> asyncio.Task[V]:
        task = self._reading.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._read_once(key, self._generation))
            task.add_done_callback(_seen)  # a read ahead that failed has nobody to tell
            self._reading[key] = task
        return task

    async def _read_once(self, key: K, generation: int) -> V:
        started = self._clock()
        try:
            self.reads += 1
            value = await self._load(key)
        finally:
            if generation == self._generation and self._reading.get(key) is asyncio.current_task():
                del self._reading[key]
        if generation == self._generation:
            if len(self._known) >= self._most and key not in self._known:
                self._known.clear()
            self._known[key] = (value, started)
        return value


def _seen(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()
