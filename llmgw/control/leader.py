"""Leadership: one control plane at a time places models and talks to agents.

The leader holds a lease in the store (`control.lease_ttl`) and renews it
every third of that. Each time the lease is taken while nobody held it, its
epoch grows; the leader stamps every Welcome with it, so a former leader's
commands are recognisably stale. A standby tries to take the lease at the
same cadence, and so takes over at most a third of the TTL after the lease
lapses.

A leader that cannot renew (the store is unreachable, or the lease was
taken) steps down no later than the moment its last good renewal runs out,
measured on its own clock from *before* that renewal was sent: the store
cannot have granted anyone else the lease before then.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

from llmgw.obs import logs
from llmgw.store import Lease, Store
from llmgw.tasks import cancel_and_wait

log = logs.get("llmgw.control.leader")

LEASE_NAME = "control-plane"
#: Step down this many seconds before the lease can have run out, for the time a step-down takes.
MARGIN = 0.5

OnChange = Callable[[bool], "Awaitable[None] | None"]


def default_holder(advertise: str = "") -> str:
    """A holder name people can read and no other process shares: `10.0.0.1:7443 (host cp1, pid 123)`."""
    host = socket.gethostname()
    where = advertise or host
    return f"{where} (host {host}, pid {os.getpid()})"


class Leadership:
    """Takes, keeps and gives up the control plane's lease; tells `on_change` when that changes."""

    def __init__(
        self,
        store: Store,
        holder: str,
        ttl: float,
        *,
        name: str = LEASE_NAME,
        on_change: OnChange | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl <= 0:
            raise ValueError("the lease TTL must be more than 0 seconds")
        self.store = store
        self.holder = holder
        self.ttl = ttl
        self.name = name
        self.on_change = on_change
        self.clock = clock
        self.leading = False
        self.epoch = 0  #: the epoch of our lease while leading
        self.lease: Lease | None = None  #: the lease as last seen, whoever holds it
        self.previous_holder: str | None = None  #: who held the lease before we took it (None: nobody ever)
        self.last_error = ""
        self._valid_until = 0.0
        self._waiters: list[asyncio.Future] = []
        self._stopping = False
        self._task: asyncio.Task | None = None

    @property
    def interval(self) -> float:
        return self.ttl / 3

    @property
    def leader(self) -> str | None:
        """Who leads as far as this control plane knows; None when nobody does."""
        if self.leading:
            return self.holder
        lease = self.lease
        if lease is None:
            return None
        return lease.holder if lease.held_at(dt.datetime.now(dt.UTC)) else None

    def describe(self) -> dict[str, Any]:
        """For GET /leader."""
        lease = self.lease
        return {
            "leader": self.leading,
            "self": self.holder,
            "holder": self.leader,
            "epoch": self.epoch if self.leading else (lease.epoch if lease else 0),
            "lease_ttl_s": self.ttl,
            "error": self.last_error or None,
        }

    # -- running ----------------------------------------------------------------

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._stopping = False
            self._task = asyncio.create_task(self.run(), name="llmgw-leadership")

    async def stop(self, *, release: bool = True) -> None:
        """Stop campaigning; with `release`, give the lease up so a standby takes over at once."""
        task, self._task = self._task, None
        self._stopping = True  # ends the loop even if the cancellation is lost on the way
        await cancel_and_wait(task)
        if self.leading:
            if release:
                try:
                    await self.store.release_lease(self.name, self.holder)
                except Exception as exc:  # noqa: BLE001 - the store is gone: the lease lapses by itself
                    log.warning("could not release the lease: %s", exc)
            await self._set(False, "stopping")

    async def run(self) -> None:
        while not self._stopping:
            await self.step()
            delay = self.interval
            if self.leading:
                # Never sleep past the point where we would have to step down.
                delay = max(0.05, min(delay, self._valid_until - MARGIN - self.clock()))
            await asyncio.sleep(delay)

    async def wait_leading(self, timeout: float | None = None) -> bool:
        """True once this control plane leads; False after `timeout` seconds without."""
        if self.leading:
            return True
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            async with asyncio.timeout(timeout):
                await fut
        except TimeoutError:
            pass
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)
        return self.leading

    async def step(self) -> bool:
        """One try: renew while leading, else try to take the lease. Returns whether we lead."""
        sent = self.clock()
        try:
            if self.leading:
                lease = await self.store.renew_lease(self.name, self.holder, self.ttl, epoch=self.epoch)
                if lease is None:
                    self.lease = await self.store.get_lease(self.name)
                    await self._set(False, "the lease was lost (it lapsed, or another control plane took it)")
                    return False
            else:
                before = await self.store.get_lease(self.name)
                lease = await self.store.try_acquire_lease(self.name, self.holder, self.ttl)
                if lease is None:
                    self.lease = await self.store.get_lease(self.name)
                    self.last_error = ""
                    return False
                self.previous_holder = before.holder if before is not None else None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any store failure: keep trying, step down in time
            self.last_error = f"the store did not answer: {exc}"
            log.warning("leadership: %s", self.last_error)
            if self.leading and self.clock() >= self._valid_until - MARGIN:
                await self._set(False, "the lease could not be renewed before it ran out")
            return self.leading
        self.lease = lease
        self.last_error = ""
        self._valid_until = sent + self.ttl
        if not self.leading:
            self.epoch = lease.epoch
            await self._set(True, "took the lease")
        return True

    async def _set(self, leading: bool, why: str) -> None:
        if leading == self.leading:
            return
        self.leading = leading
        if leading:
            for fut in self._waiters:
                if not fut.done():
                    fut.set_result(True)
        logs.event(log, "leading" if leading else "no longer leading", logging.WARNING if not leading else logging.INFO,
                   holder=self.holder, epoch=self.epoch, reason=why)
        if self.on_change is not None:
            result = self.on_change(leading)
            if inspect.isawaitable(result):
                await result
