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

A store that answers but refuses writes (a full disk, a read-only file:
``WritesRefused``) is not a lost lease: while a read shows the lease row
still naming us in our epoch, nobody else can take it either (taking it is
a write the store refuses too), so the leader keeps leading and says so
once. When the store takes writes again the lease is renewed even if it ran
out meanwhile, as long as its holder and epoch are still ours: the leader
tries every ``REFUSED_RETRY`` seconds meanwhile, a standby only every two
thirds of the TTL, so the leader renews first. (Should a standby still take
the lapsed lease first, the leader's renewal fails and it steps down: one
leader at a time, as ever.) A failed
usage row or admin change never touches leadership.

A control plane's holder name carries an instance id kept in its state
folder (``control-plane.id``, llmgw.store.state_dir), so the same control
plane restarted (after a crash, kill -9) takes its own unexpired lease back
at once instead of waiting for it to lapse. The file is locked while the
process runs: a second control plane on the same folder gets an id of its
own.
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
from llmgw.store import Lease, Store, WritesRefused
from llmgw.tasks import cancel_and_wait

log = logs.get("llmgw.control.leader")

LEASE_NAME = "control-plane"
#: Step down this many seconds before the lease can have run out, for the time a step-down takes.
MARGIN = 0.5

#: While the store refuses writes, the leader tries to renew this often (seconds).
REFUSED_RETRY = 0.1

OnChange = Callable[[bool], "Awaitable[None] | None"]


def default_holder(advertise: str = "", instance: str | None = None) -> str:
    """A holder name people can read and no other process shares: `10.0.0.1:7443 (host cp1, id 3f2a…)` with
    an instance id (see :func:`instance_id`), else `10.0.0.1:7443 (host cp1, pid 123)`."""
    host = socket.gethostname()
    where = advertise or host
    return f"{where} (host {host}, id {instance})" if instance else f"{where} (host {host}, pid {os.getpid()})"


INSTANCE_FILE = "control-plane.id"
_held_ids: dict[str, int] = {}  # folder -> the open, locked file descriptor of its id


def instance_id(folder: str | None) -> str | None:
    """This control plane's id, kept in ``folder`` across restarts (made the first time); None without a
    folder, or when another running process holds that folder's id (it keeps it locked)."""
    import fcntl
    import secrets

    if not folder:
        return None
    path = os.path.join(folder, INSTANCE_FILE)
    try:
        if folder in _held_ids:
            return None  # another control plane in this process holds it
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            log.info("another control plane runs on this state folder; this one leads under its pid",
                     extra={"fields": {"folder": folder}})
            return None
        _held_ids[folder] = fd
        text = os.pread(fd, 200, 0).decode("ascii", "replace").strip()
        if not text.isalnum() or len(text) != 16:
            text = secrets.token_hex(8)
            os.ftruncate(fd, 0)
            os.pwrite(fd, (text + "\n").encode(), 0)
            os.fsync(fd)
        return text
    except OSError as exc:
        log.warning("the control plane's instance id cannot be kept: %s", exc, extra={"fields": {"path": path}})
        return None


def release_instance_id(folder: str | None) -> None:
    """Unlock a folder's id (the control plane holding it has stopped)."""
    fd = _held_ids.pop(folder, None) if folder else None
    if fd is not None:
        os.close(fd)


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
        #: renewals of our lease made, and tried but failed (llmgw_lease_renewals_total, ..._failures_total)
        self.renewals = 0
        self.renewal_failures = 0
        self._valid_until = 0.0
        self._refused = False  # the store refuses writes while our lease row still names us
        self._waiters: list[asyncio.Future] = []
        self._stopping = False
        self._task: asyncio.Task | None = None
        #: more for GET /leader: the role and the replica view's age (llmgw.control.replica_view)
        self.describe_more: Callable[[], dict[str, Any]] | None = None

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
            **(self.describe_more() if self.describe_more is not None else {}),
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
                if self._refused:
                    delay = min(delay, REFUSED_RETRY)  # renew the moment the store takes writes again
            elif self.last_error.startswith("the store refuses writes"):
                delay = self.interval * 2  # let the leader, trying more often, renew first when writes are back
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
        renewing = self.leading
        try:
            if self.leading:
                extra = {"even_lapsed": True} if self._refused else {}
                lease = await self.store.renew_lease(self.name, self.holder, self.ttl, epoch=self.epoch, **extra)
                if lease is None:
                    self.renewal_failures += 1
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
        except WritesRefused as exc:
            self.renewal_failures += renewing
            if self.leading and await self._still_ours():
                self.last_error = f"the store refuses writes; the lease is kept, nobody can take it meanwhile: {exc}"
                if not self._refused:
                    self._refused = True
                    log.error("leadership: %s", self.last_error)
                self._valid_until = sent + self.ttl
                return True
            repeated = self.last_error.startswith("the store refuses writes")
            self.last_error = f"the store refuses writes: {exc}"
            if not repeated:  # once per episode, not at every try
                log.warning("leadership: %s", self.last_error)
            if self.leading and self.clock() >= self._valid_until - MARGIN:
                await self._set(False, "the lease could not be renewed before it ran out")
            return self.leading
        except Exception as exc:  # noqa: BLE001 - any store failure: keep trying, step down in time
            self.renewal_failures += renewing
            self.last_error = f"the store did not answer: {exc}"
            log.warning("leadership: %s", self.last_error)
            if self.leading and self.clock() >= self._valid_until - MARGIN:
                await self._set(False, "the lease could not be renewed before it ran out")
            return self.leading
        if self._refused:
            self._refused = False
            log.warning("leadership: the store takes writes again; the lease is renewed")
        self.lease = lease
        self.last_error = ""
        self._valid_until = sent + self.ttl
        self.renewals += renewing
        if not self.leading:
            self.epoch = lease.epoch
            await self._set(True, "took the lease")
        return True

    async def _still_ours(self) -> bool:
        """Whether a read of the lease row shows it naming us in our epoch (False when it cannot be read)."""
        try:
            lease = await self.store.get_lease(self.name)
        except Exception:  # noqa: BLE001 - unreadable: treated as any failure to renew
            return False
        return lease is not None and lease.holder == self.holder and lease.epoch == self.epoch

    async def _set(self, leading: bool, why: str) -> None:
        if leading == self.leading:
            return
        self.leading = leading
        self._refused = False
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
