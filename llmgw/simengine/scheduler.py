"""Batch slots: at most `max_num_seqs` requests run, the rest wait in order."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class BatchScheduler:
    """Counts running and waiting requests and hands freed slots on first come, first served.

    A request that gives up while waiting (its client went away) leaves the
    queue; one whose slot was handed over just as it gave up passes the slot on.
    """

    def __init__(self, max_num_seqs: int) -> None:
        self.max_num_seqs = max_num_seqs
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> None:
        if self.running < self.max_num_seqs and not self._waiters:
            self.running += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot reached us as we were cancelled
            elif waiter in self._waiters:  # release() may have dropped it already
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        # A freed slot goes straight to the next waiter: `running` stays the same.
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.running -= 1

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            self.release()
