"""Admission: who gets a replica's free room, and who waits for it.

Each replica takes `concurrency` requests at once (the model's setting).
A request that finds room on a healthy replica goes at once. Otherwise it
waits in its model's queue, in its priority band, for at most the band's
`max_wait` (else `admission.max_wait`); the whole queue holds at most
`admission.queue_depth` requests. When room frees, the bands that have
waiters share it by weight (smooth weighted round robin: with gold 4,
silver 2 and bronze 1 all waiting, gold gets four of every seven places),
oldest first within a band, so the lowest band is the one that waits.

A waiter is handed its replica (its in-flight count already taken), so no
request arriving in between can take the room it was woken for.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

import attrs

from llmgw.config.server import AdmissionConfig, Band
from llmgw.router.choose import Chooser, Want, admits
from llmgw.router.errors import REFUSED, GatewayError
from llmgw.router.replicas import Replica, ReplicaChange, ReplicaSet
from llmgw.router.slo import SloWatch


class NoReplica(GatewayError):
    """The model has no replica, or none is healthy: fallbacks may serve it."""

    def __init__(self, model: str, known: int, retry_after: float | None = None, why: str = "") -> None:
        if why and not known:  # a standby whose copy of the leader's replicas is stale (llmgw.control.replica_view)
            message = f"no replica is serving {model!r} here: {why}"
        elif known:
            message = (f"every replica of {model!r} is failing ({known} ejected after errors); "
                       "they are tried again shortly")
        else:
            message = f"no replica is serving {model!r} at the moment"
        super().__init__(503, "model_unavailable", message, outcome=REFUSED, retry_after=retry_after)


class NotInProfile(NoReplica):
    """routing profiles: no replica of the model runs where the key's profile allows; fallbacks may serve it."""

    def __init__(self, model: str, profile: str, labels: dict[str, str]) -> None:
        where = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
        GatewayError.__init__(
            self, 503, "no_replica_in_profile",
            f"no replica of {model!r} runs on nodes labelled {where}, the only ones this key's routing profile "
            f"{profile!r} allows; try again when one has started, or ask for another model",
            outcome=REFUSED, retry_after=5)


class QueueFull(GatewayError):
    def __init__(self, model: str, depth: int) -> None:
        super().__init__(429, "queue_full",
                         f"{model!r} is busy: {depth} requests already wait for it (admission.queue_depth); "
                         "try again shortly", retry_after=1, limited=True)


class NoCapacity(GatewayError):
    def __init__(self, model: str, band: str, waited: float) -> None:
        super().__init__(503, "no_capacity",
                         f"every replica of {model!r} stayed busy for {waited:.1f}s, the longest a request "
                         f"in band {band!r} waits; try again later", retry_after=1)


@attrs.define(eq=False, slots=True)
class Grant:
    """Room on one replica, held until `Admission.release`."""

    replica: Replica
    band: str
    waited: float  # seconds in the queue
    released: bool = False


@attrs.define(eq=False, slots=True)
class _Waiter:
    want: Want
    future: asyncio.Future
    since: float


class _BandQueue:
    __slots__ = ("band", "current", "waiters")

    def __init__(self, band: Band) -> None:
        self.band = band
        self.waiters: deque[_Waiter] = deque()
        self.current = 0  # smooth weighted round robin's running weight


class ModelQueue:
    """The waiters of one model, one queue per band."""

    def __init__(self, bands: list[Band]) -> None:
        self.bands = [_BandQueue(b) for b in bands]
        self._by_name = {q.band.name: q for q in self.bands}
        self.size = 0

    def band(self, name: str) -> _BandQueue:
        return self._by_name[name]

    def next_band(self) -> tuple[_BandQueue, list[tuple[_BandQueue, int]]] | None:
        """The band whose oldest waiter goes next, and the weights to keep if it does."""
        busy = [q for q in self.bands if q.waiters]
        if not busy:
            return None
        total = sum(max(1, q.band.weight) for q in busy)
        updated = [(q, q.current + max(1, q.band.weight)) for q in busy]
        chosen = max(updated, key=lambda item: item[1])[0]  # ties: the higher band (listed first)
        return chosen, [(q, w - total if q is chosen else w) for q, w in updated]

    def depth(self, band: str) -> int:
        q = self._by_name.get(band)
        return len(q.waiters) if q else 0


class Admission:
    """Bounded, banded queues per model in front of the replicas' room."""

    def __init__(self, config: AdmissionConfig, replicas: ReplicaSet, chooser: Chooser,
                 *, clock: Callable[[], float] = time.monotonic, slo: SloWatch | None = None) -> None:
        self.config = config
        self.slo = slo  # slo: a model over its ttft_p99 refuses its lowest bands (llmgw.router.slo)
        self.replicas = replicas
        self.chooser = chooser
        self.clock = clock
        self.bands = list(config.bands) or [Band(config.default_band or "default", 1)]
        names = [b.name for b in self.bands]
        if config.default_band in names:
            self.default_band = config.default_band
        else:  # an unknown default band: the middle of those there are
            self.default_band = names[len(names) // 2]
        self._band_by_name = {b.name: b for b in self.bands}
        self._queues: dict[str, ModelQueue] = {}
        replicas.subscribe(self._on_change)

    # -- bands ------------------------------------------------------------

    def band_name(self, asked: str | None) -> str:
        """The band a request waits in: `asked` when it is one, else the default."""
        return asked if asked in self._band_by_name else self.default_band

    def max_wait(self, band: str) -> float:
        own = self._band_by_name[band].max_wait
        return (own if own is not None else self.config.max_wait).total_seconds()

    # -- taking and giving back room --------------------------------------

    def _candidates(self, model: str, now: float) -> tuple[list[Replica], int]:
        """Healthy replicas with room, and how many replicas the model has at all."""
        all_replicas = self.replicas.replicas_for(model)
        return [r for r in all_replicas if r.has_room() and r.usable(now)], len(all_replicas)

    def healthy(self, model: str) -> bool:
        now = self.clock()
        return any(r.usable(now) for r in self.replicas.replicas_for(model))

    def try_now(self, model: str, want: Want, band: str | None = None) -> Grant | None:
        """Room at once, skipping the queue (a retry of an admitted request), or None."""
        now = self.clock()
        candidates, _ = self._candidates(model, now)
        replica = self.chooser.choose(model, candidates, want)
        if replica is None:
            return None
        replica.in_flight += 1
        return Grant(replica, band or self.default_band, 0.0)

    async def acquire(self, model: str, band: str, want: Want) -> Grant:
        """Room on a replica of `model`, waiting in `band` if need be.

        Raises NoReplica (nothing healthy serves it: fallbacks may), QueueFull
        (too many wait: fallbacks may), NoCapacity (waited as long as the band may) or
        SloExceeded (the model is over its ttft_p99 and the band is one it sheds).
        """
        band = self.band_name(band)
        if self.slo is not None:  # slo: shed before the request can join the queue
            self.slo.check(model, band, [b.name for b in self.bands])
        now = self.clock()
        replicas = self.replicas.replicas_for(model)
        if want.cluster_only:  # residency: the cluster's own replicas alone
            replicas = [r for r in replicas if r.in_cluster]
        if want.routing is not None and want.routing.labels:  # routing profiles: its nodes' replicas alone
            replicas = [r for r in replicas if admits(want.routing, r)]
            if not replicas:
                raise NotInProfile(model, want.routing.name, want.routing.labels)
        if not any(r.usable(now) for r in replicas):
            soonest = min((r.health.ejected_until - now for r in replicas), default=None)
            raise NoReplica(model, len(replicas), retry_after=soonest, why=self.replicas.unavailable_reason)
        queue = self._queues.get(model)
        if queue is None or queue.size == 0:
            candidates = [r for r in replicas if r.has_room() and r.usable(now)]
            replica = self.chooser.choose(model, candidates, want)
            if replica is not None:
                replica.in_flight += 1
                return Grant(replica, band, 0.0)
        if queue is None:
            queue = self._queues[model] = ModelQueue(self.bands)
        if queue.size >= self.config.queue_depth:
            raise QueueFull(model, self.config.queue_depth)
        waiter = _Waiter(want, asyncio.get_running_loop().create_future(), now)
        band_queue = queue.band(band)
        band_queue.waiters.append(waiter)
        queue.size += 1
        try:
            self.pump(model)
            async with asyncio.timeout(self.max_wait(band)):
                replica = await asyncio.shield(waiter.future)
        except TimeoutError:
            if waiter.future.done():  # handed room just as the wait ran out: take it
                return Grant(waiter.future.result(), band, self.clock() - waiter.since)
            raise NoCapacity(model, band, self.clock() - waiter.since) from None
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(Grant(waiter.future.result(), band, 0.0))
            raise
        finally:
            if not waiter.future.done():
                waiter.future.cancel()
                try:
                    band_queue.waiters.remove(waiter)
                    queue.size -= 1
                except ValueError:
                    pass
        return Grant(replica, band, self.clock() - waiter.since)

    def release(self, grant: Grant) -> None:
        """Give a grant's room back, and hand it to the next waiter."""
        if grant.released:
            return
        grant.released = True
        grant.replica.in_flight = max(0, grant.replica.in_flight - 1)
        for model in grant.replica.sharing_models():  # shared room: a base's waiters may take its adapters' room
            self.pump(model)

    def pump(self, model: str) -> None:
        """Hand free room to waiters, by band weight, while there is some."""
        queue = self._queues.get(model)
        if queue is None or queue.size == 0:
            return
        now = self.clock()
        while queue.size:
            candidates, _ = self._candidates(model, now)
            if not candidates:
                return
            chosen = queue.next_band()
            if chosen is None:
                return
            band_queue, weights = chosen
            found = self._placeable(model, candidates, band_queue)
            if found is None:  # routing profiles: no waiter of the band may use the room free; another's may
                for other in queue.bands:
                    if other is not band_queue and other.waiters:
                        found = self._placeable(model, candidates, other)
                        if found is not None:
                            band_queue, weights = other, []
                            break
            if found is None:  # every waiter excludes every replica with room: they wait for other room
                return
            waiter, replica = found
            band_queue.waiters.remove(waiter)
            queue.size -= 1
            for q, w in weights:
                q.current = w
            for q in queue.bands:
                if not q.waiters:
                    q.current = 0
            replica.in_flight += 1
            waiter.future.set_result(replica)

    def _placeable(self, model: str, candidates: list[Replica], band_queue: _BandQueue):
        """The band's oldest waiter that may use one of `candidates` (a retry's exclusions, a routing
        profile's pool leave some out), and the replica it gets; None when none may."""
        for waiter in band_queue.waiters:
            replica = self.chooser.choose(model, candidates, waiter.want)
            if replica is not None:
                return waiter, replica
        return None

    def pump_all(self) -> None:
        for model in list(self._queues):
            self.pump(model)

    def _on_change(self, change: ReplicaChange) -> None:
        if change.kind == "removed":
            self.chooser.forget_replica(change.replica.id)
        self.pump(change.replica.model)

    # -- reading ----------------------------------------------------------

    def depths(self) -> list[tuple[str, str, int]]:
        """(model, band, waiting) for every model that has had a queue."""
        return [(model, q.band.name, len(q.waiters)) for model, mq in self._queues.items() for q in mq.bands]

    def waiting(self, model: str) -> int:
        queue = self._queues.get(model)
        return queue.size if queue else 0
