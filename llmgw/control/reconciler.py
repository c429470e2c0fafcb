"""The reconciler: makes what runs on the nodes match what the catalog wants.

Every `reconcile_interval`, and at once after anything worth acting on (an
agent registering, a shard changing state, a node going, a request for a
model that has no replica, an operator's cordon or drain), one pass:

1. re-reads the run-time catalog and the capacity quotas from the store;
2. marks nodes silent past the heartbeat window lost, forgetting their
   replicas (so they are placed again);
3. gives up on starts that never became ready, and on stops never confirmed;
4. stops replicas of models that left the catalog;
5. per model: how many replicas it wants (min, max, on-demand, idle, load,
   the gateway's slo pressure: first tokens over slo.ttft_p99),
   then places the missing ones (placement.py, held to the owner's capacity
   quotas), or stops the extra ones; a replica on a draining node gets a
   replacement (not held to quotas: it takes its original's place), and
   stops once that is ready;
6. sends the StartShard and StopShard messages this decided.

A start that fails backs the model off (backoff.initial, doubling up to
backoff.max); after `park_after` failures in a row the model is parked: left
stopped, with the reason in `explain`, until `retry(model)` or its definition
changes. The parked models are kept in the store (llmgw/control/parked.py):
read back before the first pass of a new leader places anything, written
when they change.

Only ready replicas are in the router's replica set: each is added when its
shard reports ready and removed when it stops, fails, is drained, or its
node is lost. A node whose agent merely disconnected keeps its replicas in the
set for the heartbeat window: its engines keep serving through an agent
restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from llmgw.adapters import loading as adapters_loading
from llmgw.adapters import serving as adapters_serving
from llmgw.config.server import ControlConfig, FacilityConfig
from llmgw.control.agent_events import CRASH_WINDOW, AgentEvents
from llmgw.control.catalog import Catalog, CatalogModel, model_to_spec
from llmgw.control.engine_keys import EngineKeys
from llmgw.control.engine_provisioning import EngineProvisioning, EngineState
from llmgw.control.inventory import Inventory, Node
from llmgw.control.jobs import ReconcilerObserver
from llmgw.control.parked import ParkedRecord, normalized
from llmgw.control.facility import Hold, held_cards
from llmgw.control.placement import CLASS_RANK, Decision, Holding, Placement
from llmgw.control.placement_round import PlacementRound, ReconcileRound, collector_paused, record_holdings
from llmgw.control.preemption import PREEMPT_INTERVAL, PreemptionLedger, taken_words
from llmgw.control.quotas import QuotaReader, Quotas
from llmgw.control.schedules import Bounds, bounds_at, time_zone
from llmgw.control.state import (
    ModelState,
    ModelUnavailable,
    ReplicaRecord,
    WorkerShard,
    new_replica_id,
    worker_shard_id,
)
from llmgw.notify import events
from llmgw.notify.events import Event
from llmgw.obs import logs
from llmgw.plugins.types import Engine
from llmgw.router.replicas import ReplicaSet
from llmgw.tasks import cancel_and_wait
from llmgw.wire.messages import (
    RunningShard,
    StartShard,
    StopShard,
    WeightsSource,
)

log = logs.get("llmgw.control.reconciler")



class NodeUnreachable(Exception):
    """A message could not be sent: the node's agent is not connected."""


class AgentLink(Protocol):
    """How the reconciler reaches agents (the agent endpoint's sessions, or a test's fake)."""

    async def send(self, node_id: str, message: Any) -> None:
        """Send one message; NodeUnreachable when the node has no session."""


class Reconciler(AgentEvents, EngineProvisioning):
    def __init__(
        self,
        control: ControlConfig,
        catalog: Catalog,
        inventory: Inventory,
        link: AgentLink,
        replicas: ReplicaSet,
        keys: EngineKeys,
        *,
        engines: Mapping[str, Engine] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        start_timeout: float = 900.0,
        stop_grace: float = 30.0,
        observer: ReconcilerObserver | None = None,
        notify: Callable[[Event], object] | None = None,
        preempt_interval: float = PREEMPT_INTERVAL,
        facility: FacilityConfig | None = None,
    ) -> None:
        self.control = control
        self.catalog = catalog
        self.inventory = inventory
        self.link = link
        self.replicas = replicas
        self.keys = keys
        #: slo: model name -> whether it answers slower than its slo.ttft_p99 (the gateway's
        #: llmgw.router.slo.SloWatch.over, set by llmgw.control.wiring); a reason to add a replica
        self.slo_pressure: Callable[[str], bool] | None = None
        #: replica id -> when (our clock) a standby's gateway last sent it a request (llmgw.control.replica_view),
        #: so a replica served through the standbys only is not stopped as idle
        self.used_elsewhere: dict[str, float] = {}
        self.engines = engines
        self.clock = clock
        self.wall_clock = wall_clock
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        #: told what happens to replicas and placements (the jobs, llmgw/control/jobs.py)
        self.observer = observer or ReconcilerObserver()
        #: told of what a person should hear of (llmgw.notify: model_parked, node_lost); this only runs on the leader
        self.notify: Callable[[Event], object] = notify or (lambda event: None)
        self.records: dict[str, ReplicaRecord] = {}
        self.models: dict[str, ModelState] = {}
        self.active = True  #: false on a control plane that does not lead: nothing is started
        self.inactive_reason = ""
        #: no new replica is placed before this (monotonic): after a take-over, agents register first
        self.hold_starts_until = 0.0
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task | None = None
        self._pass_lock = asyncio.Lock()
        #: the capacity quotas placement holds models to, read at each pass
        self.quotas = Quotas()
        self._quota_reader = QuotaReader(clock)
        #: models that had replicas stopped to make room: placed first at the next pass, so the room is theirs
        self._reclaiming: set[str] = set()
        #: the cards preemption took, kept from their victims while the model they went to waits (preemption.py)
        self.preemption = PreemptionLedger(preempt_interval)
        #: the parked models as the store keeps them (read back when leading begins, written when they change)
        self.parked_record = ParkedRecord()
        #: node -> engine -> its installation's state (engine_provisioning.py)
        self.engine_states: dict[str, dict[str, EngineState]] = {}
        #: racks, PDUs and their power budgets (server.yaml facility:), and the holds (facility.py)
        self.facility = facility or FacilityConfig()
        self.holds: dict[str, Hold] = {}
        self._provision_due: set[tuple[str, str]] = set()  #: (node, engine) whose Provision is to be sent
        #: the placement round of the pass under way: every decision of the pass goes through it (placement_round.py)
        self._round: ReconcileRound | None = None

    # ---------------------------------------------------------------- running

    def kick(self) -> None:
        """Run a pass soon rather than at the next interval."""
        self._wake.set()

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._stopping = False
            self._task = asyncio.create_task(self.run(), name="llmgw-reconciler")

    async def stop(self) -> None:
        task, self._task = self._task, None
        # The flag and the wake-up end the loop even if a cancellation is lost on the way.
        self._stopping = True
        self._wake.set()
        await cancel_and_wait(task)

    async def run(self) -> None:
        interval = self.control.reconcile_interval.total_seconds()
        while not self._stopping:
            try:
                await self.reconcile_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reconciler pass failed")
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that
            # arrives as the event is set, and stop() would then wait for ever.
            try:
                async with asyncio.timeout(interval):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            await asyncio.sleep(0)  # let a burst of events settle into one pass

    async def reconcile_once(self) -> None:
        async with self._pass_lock:
            self.observer.pass_begun()
            if self.catalog.store is not None:
                try:
                    await self.catalog.load()
                except Exception as exc:  # noqa: BLE001 - the store is down: carry on with what is known
                    log.warning("catalog not re-read: %s", exc)
            await self._read_quotas()
            await self.load_parked()
            self._expire_nodes()
            self._expire_stuck()
            known = {m.name for m in self.catalog.cluster_models()}
            for rec in list(self.records.values()):
                if rec.model not in known and not rec.retiring:
                    self._retire(rec, "its model is not in the catalog any more")
            self._settle_preemptions()
            # Models that had replicas stopped for them first, then critical ones: what a preemption
            # frees goes to the model it was made for.
            placing = time.perf_counter()  # llmgw_placement_pass_seconds
            with collector_paused():
                self._round = self._new_round()
                try:
                    for model in sorted(self.catalog.cluster_models(),
                                        key=lambda m: (m.name not in self._reclaiming,
                                                       -CLASS_RANK.get(m.model_class, 1), m.name)):
                        self._plan(model)
                finally:
                    self._round = None
            self.observer.placement_timed(time.perf_counter() - placing)  # llmgw_placement_pass_seconds
            await self._send()
            self._settle_waiters()
            await self.save_parked()
            self.observer.pass_ended(self)

    # ---------------------------------------------------------------- operators' and the router's asks

    def touch(self, model: str) -> None:
        """A request for `model` arrived (keeps an on-demand model from idling out)."""
        cm = self.catalog.get(model)
        if cm is not None:
            self._state(cm.name).last_request = self.clock()

    async def ensure_started(self, model: str, timeout: float | None = None) -> None:
        """Return once `model` has a ready replica, starting one if none runs (an on-demand model's
        first request). ModelUnavailable says why when it cannot be; TimeoutError after `timeout`."""
        cm = self.catalog.get(model)
        if cm is None or not cm.runs_on_cluster:
            raise ModelUnavailable(f"no model called {model!r} runs on this cluster")
        if cm.problems:
            raise ModelUnavailable(f"{cm.name} cannot run: {'; '.join(cm.problems)}")
        if self.replicas.replicas_for(cm.name) and any(
            r.live and r.state == "ready" for r in self.records.values() if r.model == cm.name
        ):
            return
        if not self.active:
            raise ModelUnavailable(self.inactive_reason or "this control plane does not start models")
        st = self._state(cm.name)
        st.last_request = self.clock()
        if st.parked:
            raise ModelUnavailable(st.park_reason)
        if cm.scaling.max == 0:
            raise ModelUnavailable(f"{cm.name} is scaled to a maximum of 0 replicas")
        fut = asyncio.get_running_loop().create_future()
        st.waiters.append(fut)
        self.kick()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(fut)
        finally:
            if fut in st.waiters and not fut.done():
                fut.cancel()
                st.waiters.remove(fut)

    def retry(self, model: str) -> None:
        """Unpark a model and forget its failures: it is started again at the next pass."""
        cm = self.catalog.get(model)
        if cm is None:
            raise ModelUnavailable(f"no model called {model!r} is in the catalog")
        st = self._state(cm.name)
        st.parked, st.park_reason = False, ""
        st.reset_failures()
        logs.event(log, "model retried", model=cm.name)
        self.kick()

    def cordon(self, node_id: str, reason: str = "") -> None:
        self.inventory.cordon(node_id, reason)
        self.kick()

    def uncordon(self, node_id: str) -> None:
        self.inventory.uncordon(node_id)
        self.kick()

    def drain(self, node_id: str, reason: str = "") -> None:
        """Move every replica off the node, each replacement ready before its original stops."""
        self.inventory.drain(node_id, reason)
        logs.event(log, "node draining", node_id=node_id)
        self.kick()

    def restart(self, model: str, *, in_place: bool = False) -> list[str]:
        """Restart every replica of `model`, one at a time: a replacement first (or, `in_place`, a stop
        and a new start). Returns the ids being restarted; KeyError for a model not in the catalog."""
        cm = self.catalog.get(model)
        if cm is None:
            raise KeyError(model)
        st = self._state(cm.name)
        live = sorted((r for r in self.records.values() if r.model == cm.name and r.live), key=lambda r: r.created)
        st.restarting, st.restart_in_place = [r.id for r in live], in_place
        logs.event(log, "model restarting", model=cm.name, replicas=len(live), in_place=in_place)
        self.kick()
        return list(st.restarting)

    def restart_replica(self, replica_id: str, *, in_place: bool = False) -> str:
        """Restart one replica the way `restart` does each of a model's: a replacement first (or, `in_place`,
        a stop and a new start). Returns its model's name; KeyError for a replica that is not running here;
        ValueError while its model's replicas are being restarted the other way."""
        rec = self.records.get(replica_id)
        if rec is None or not rec.live:
            raise KeyError(replica_id)
        cm = self.catalog.get(rec.model)
        if cm is None:
            raise ValueError(f"{replica_id} is being stopped: its model {rec.model} is no longer in the catalog")
        st = self._state(cm.name)
        st.restarting = [rid for rid in st.restarting if self._serving(rid)]
        if st.restarting and st.restart_in_place != in_place:
            under_way = "in place" if st.restart_in_place else "each with a replacement first"
            raise ValueError(f"{cm.name}'s replicas are already being restarted {under_way} "
                             f"({', '.join(st.restarting)} still to go): restart {replica_id} the same way, "
                             "or once that restart has ended")
        if not st.restarting:
            st.restart_in_place = in_place
        if replica_id not in st.restarting:
            st.restarting.append(replica_id)
        logs.event(log, "replica restarting", model=cm.name, replica_id=replica_id, in_place=in_place)
        self.kick()
        return cm.name

    def remove_node(self, node_id: str) -> Node:
        """Forget a node with nothing on it. KeyError when unknown; ValueError while replicas run there."""
        node = self.inventory.get(node_id)
        if node is None:
            raise KeyError(node_id)
        on_it = sorted(r.id for r in self.records.values() if r.node == node_id)
        if on_it:
            raise ValueError(f"{node_id} still runs {len(on_it)} replica{'s' if len(on_it) != 1 else ''}"
                             f" ({', '.join(on_it)}); drain it first")
        self.inventory.forget(node_id)
        self.inventory.uncordon(node_id)
        return node

    def reset(self, reason: str) -> None:
        """Forget every node and replica (leadership lost): nothing here is known to be true any more."""
        for rec in list(self.records.values()):
            self.replicas.remove(rec.id)
        self.records.clear()
        self._reclaiming.clear()
        self.preemption.clear()
        for st in self.models.values():
            st.wake_waiters(ModelUnavailable(reason))
        self.models.clear()
        self.parked_record.forget()
        self.inventory.clear()
        self.observer.reset(reason)

    # ---------------------------------------------------------------- parked models in the store

    async def load_parked(self) -> None:
        """Park again the models the store says were parked (by this leader before a restart, or another),
        once per leadership and before anything is placed; a model whose definition changed since, or that
        left the catalog, stays unparked. A store that cannot be read is read again at the next pass."""
        store = self.catalog.store
        if store is None or self.parked_record.loaded:
            return
        entries = await self.parked_record.read(store)
        for name, entry in (entries or {}).items():
            cm = self.catalog.get(name)
            if cm is None or not cm.runs_on_cluster:
                continue
            spec = model_to_spec(cm.config)
            if normalized(spec) != entry.get("spec"):
                logs.event(log, "model not parked again: its definition changed since", model=cm.name)
                continue
            st = self._state(cm.name)
            if not st.parked:
                self.parked_record.entry_state(st, entry, spec)
                logs.event(log, "model parked, as the store keeps it", model=cm.name, reason=st.park_reason)

    async def save_parked(self) -> None:
        """Write the parked models to the store when they changed (on the leader only); a store error is logged
        and the next pass writes again."""
        store = self.catalog.store
        if store is not None and self.active:
            await self.parked_record.write(store, {n: st for n, st in self.models.items()
                                                   if self.catalog.get(n) is not None})

    # ---------------------------------------------------------------- one pass

    def _expire_nodes(self) -> None:
        window = self.control.heartbeat_window.total_seconds()
        for node in self.inventory.expire(window):
            logs.event(log, "node lost", logging.WARNING, node_id=node.id, silent_s=round(window, 1))
            lost = [r for r in self.records.values() if r.node == node.id]
            # Remembered, so a heartbeat on a connection it kept open can adopt them (it names only the ids).
            node.lost_shards = {r.id: RunningShard(shard_id=r.id, model=r.model, engine=r.engine, state=r.state,
                                                   port=r.port, gpus=tuple(r.gpus),
                                                   adapters=tuple(r.adapters))  # adapters: kept for adoption
                                for r in lost if not r.retiring and not getattr(r, "workers", ())}
            for rec in lost:
                if rec.workers:  # its other ranks are stopped first
                    if not rec.head_gone:
                        self._head_gone(rec, "lost", f"its node {node.id} was lost")
                    continue
                self._drop(rec, f"its node {node.id} was lost")
                if not rec.retiring:
                    self._state(rec.model).last_error = f"{node.id} lost: replica {rec.id} will be placed again"
            for rec in [r for r in self.records.values() if any(w.node == node.id for w in r.workers)]:
                for worker in rec.workers:
                    if worker.node == node.id and worker.state != "gone":
                        self._rank_gone(rec, worker, "lost", f"its node {node.id} was lost")
            self.notify(events.node_lost(node.id, silent_s=round(window, 1),
                                         replicas=[(r.id, r.model) for r in lost if not r.retiring]))

    def _expire_stuck(self) -> None:
        now = self.clock()
        for rec in list(self.records.values()):
            if rec.retiring and rec.stop_sent_at is not None and now - rec.stop_sent_at > self.stop_grace + 30:
                self._drop(rec, "stop never confirmed")
            elif not rec.retiring and rec.state == "starting" and now - rec.since > self.start_timeout \
                    and not rec.awaiting_engine:  # an install may take longer; a failed one drops it
                self._retire(rec, "did not become ready in time")
                self._failed_start(self._state(rec.model), rec,
                                   f"not ready after {self.start_timeout:g} s ({rec.message or 'no progress'})")

    def _plan(self, model: CatalogModel) -> None:
        st = self._state(model.name)
        now = self.clock()
        if st.parked and model_to_spec(model.config) != st.parked_for:
            logs.event(log, "model unparked: its definition changed", model=model.name)
            st.parked, st.park_reason = False, ""
            st.reset_failures()
        mine = [r for r in self.records.values() if r.model == model.name and r.live]
        pending = [r for r in mine if r.replaces and self._serving(r.replaces)]
        counted = [r for r in mine if r not in pending]
        want = st.wanted = self._want(model, st, counted, now)

        if len(counted) > want:
            self._shrink(model, counted, len(counted) - want, now)
            return
        missing = want - len(counted)
        if missing and not st.parked and now >= max(st.next_try, self.hold_starts_until) and not st.preempting:
            for _ in range(missing):
                decision = self._decide(model, preempt=self.preemption.may_preempt(model.name, now))
                awaiting = None
                if decision.placement is None and (found := self._place_with_install(model)) is not None:
                    decision, *awaiting = found
                st.decision, st.decision_at = decision, self.wall_clock()
                self._reclaiming.discard(model.name)
                if decision.placement is None:
                    if decision.summary() != st.logged:  # said once, not every pass
                        logs.event(log, "model not placed", logging.WARNING, model=model.name,
                                   why=decision.summary())
                    st.logged = decision.summary()
                    self.observer.unplaced(model.name, decision)
                    break
                st.logged = ""
                if decision.placement.preempts:
                    guarantee = decision.placement.guarantee
                    why = (f"preempted for {model.name}, within the guarantee of {guarantee}" if guarantee
                           else f"preempted for the critical model {model.name}")
                    victims = [v for v in map(self.records.get, decision.placement.preempts) if v is not None]
                    for victim in victims:
                        self._retire(victim, why)
                        st.preempting.add(victim.id)
                    self._reclaiming.add(model.name)
                    self.observer.preempted(model.name, [v.id for v in victims])
                    self.preemption.preempted(model.name, taken_words(model.name, model.model_class, guarantee),
                                              [(v.model, v.nodes) for v in victims], now)
                    break
                launched = self._launch(model, decision.placement)
                if awaiting:
                    self._await_engine(launched, *awaiting)
        self._drain_step(model, st, mine, pending)
        if st.drain_blocked is not None:
            self.observer.unplaced(model.name, st.drain_blocked)

    def _drain_step(self, model: CatalogModel, st: ModelState, mine: list, pending: list) -> None:
        """Moves, one at a time: a replacement for each replica on a draining node (the original stops
        once it is ready), then the restarts asked for."""
        st.drain_blocked = None
        if st.parked or self.clock() < st.next_try:
            return
        busy_nodes = {self.records[r.replaces].node for r in pending if r.replaces in self.records}
        for rec in mine:
            # A replica over several nodes moves when any of its nodes drains.
            draining = [n for n in map(self.inventory.get, rec.nodes) if n is not None and n.draining]
            if not draining or rec in pending or rec.node in busy_nodes:
                continue
            if any(r.replaces == rec.id for r in pending):
                continue
            decision = self._decide(model, avoid={n.id for n in draining}, preempt=False, quotas=False)
            if decision.placement is None:
                st.drain_blocked = decision
                continue
            pending.append(self._launch(model, decision.placement, replaces=rec.id))
            busy_nodes.add(rec.node)
        st.restarting = [rid for rid in st.restarting if self._serving(rid)]
        if not st.restarting or pending or any(r.state == "starting" for r in mine):
            return
        old = self.records[st.restarting[0]]
        if st.restart_in_place:
            st.restarting.pop(0)
            self._retire(old, "restarted in place")  # the next pass starts its successor
            return
        decision = self._decide(model, preempt=False, quotas=False)
        if decision.placement is None:
            st.drain_blocked = decision
            return
        st.restarting.pop(0)
        self._launch(model, decision.placement, replaces=old.id)

    def _serving(self, replica_id: str) -> bool:
        rec = self.records.get(replica_id)
        return rec is not None and rec.live

    def wanted_now(self, model: CatalogModel) -> int:
        """How many replicas `model` wants at this moment (what the next pass aims for)."""
        st = self.models.get(model.name) or ModelState(model.name)
        live = [r for r in self.records.values() if r.model == model.name and r.live]
        pending = [r for r in live if r.replaces and self._serving(r.replaces)]
        return self._want(model, st, [r for r in live if r not in pending], self.clock())

    def bounds(self, model: CatalogModel) -> Bounds:
        """The min and max the model's scaling asks for now, its schedule (control.timezone) applied."""
        if not model.scaling.schedule:
            return Bounds(model.scaling.min, model.scaling.max)
        when = dt.datetime.fromtimestamp(self.wall_clock(), dt.timezone.utc)
        return bounds_at(model.scaling, when, time_zone(self.control.timezone))

    def _want(self, model: CatalogModel, st: ModelState, live: list[ReplicaRecord], now: float) -> int:
        scaling = model.scaling
        if scaling.max <= 0:
            return 0
        bounds = self.bounds(model)
        idle = scaling.idle_timeout.total_seconds()
        base = bounds.min
        if st.waiters:  # a request waits for its first replica
            base = max(base, 1)
        elif scaling.on_demand:
            recent = st.last_request and now - st.last_request <= idle
            used = any(now - self._last_used(r, now) <= idle for r in live)
            if recent or used:
                base = max(base, 1)
        busy = sum(1 for r in live if now - self._last_used(r, now) <= idle)
        want = max(base, busy)
        if (self._saturated(live) or self._slo_pressed(model.name, live)) and len(live) < bounds.max:
            want = max(want, len(live) + 1)
        return min(want, bounds.max)

    def _last_used(self, rec: ReplicaRecord, now: float) -> float:
        if rec.state != "ready":
            return now  # a replica still starting was wanted a moment ago
        used = max(rec.ready_at or rec.created, self.used_elsewhere.get(rec.id, 0.0))
        replica = self.replicas.get(rec.id)
        if replica is not None:
            if replica.in_flight > 0:
                return now
            used = max(used, replica.last_chosen)
        return max(used, adapters_serving.last_used(self.replicas, rec.id, now))  # adapters: their requests too

    def _slo_pressed(self, model: str, live: list[ReplicaRecord]) -> bool:
        """slo: the model is over its ttft_p99 while every replica it has is ready (one more at a time)."""
        if self.slo_pressure is None or not live or any(r.state != "ready" for r in live):
            return False
        return self.slo_pressure(model)

    def _saturated(self, live: list[ReplicaRecord]) -> bool:
        """Every replica is ready and full (its concurrency used up, or the engine queueing)."""
        if not live or any(r.state != "ready" for r in live):
            return False
        for rec in live:
            replica = self.replicas.get(rec.id)
            if replica is None or (replica.has_room() and replica.load.waiting <= 0):
                return False
        return True

    def _shrink(self, model: CatalogModel, live: list[ReplicaRecord], extra: int, now: float) -> None:
        def order(rec: ReplicaRecord) -> tuple:
            node = self.inventory.get(rec.node)
            return (0 if node is not None and node.draining else 1, 0 if rec.state == "starting" else 1,
                    self._last_used(rec, now))

        idle = model.scaling.idle_timeout.total_seconds()
        for rec in sorted(live, key=order)[:extra]:
            quiet = now - self._last_used(rec, now)
            why = (f"idle for {quiet:.0f} s" if quiet > idle and rec.state == "ready"
                   else f"more replicas than wanted ({len(live)} of {len(live) - extra})")
            self._retire(rec, why)

    def dry_run(self, model: CatalogModel) -> Decision:
        """Where the model's next replica would go now; nothing changes."""
        return self._decide(model)

    @contextlib.contextmanager
    def one_view(self) -> Iterator[None]:
        """Dry runs inside the block (explaining every model, as a status listing does) share one placement round,
        made once: the block must not await, so nothing changes while they run."""
        if self._round is not None:  # within a pass: its round already
            yield
            return
        self._round = self._new_round()
        try:
            yield
        finally:
            self._round = None

    def _decide(self, model: CatalogModel, *, avoid: set[str] = frozenset(), preempt: bool = True,
                quotas: bool = True) -> Decision:
        """Placement's answer, through the pass's round (one made for this answer alone outside a pass); `quotas`
        false for a replacement, which takes its original's place. The nodes whose cards were taken from the
        model for one that still waits for them are left out, and so are what the facility keeps free."""
        if self._round is not None and self._round.stale:
            self._round = self._new_round()
        round_ = self._round or self._new_round()
        return round_.decide(model.config, avoid=avoid, preempt=preempt, quotas=self.quotas if quotas else None,
                             held_for=self.preemption.held_for(model.name))

    def _new_round(self) -> ReconcileRound:
        """A placement round from the nodes and the replicas as they are now."""
        holdings, live = self._holdings_and_live()
        return ReconcileRound(self.inventory.nodes(), holdings, live, self._minimum, engines=self.engines,
                              facility=self.facility, holds=self.holds, now=self.wall_clock())

    def _minimum(self, model: str) -> int:
        cm = self.catalog.get(model)
        return self.bounds(cm).min if cm is not None else 0

    def _place(self, model: CatalogModel, nodes: list[Node], holdings: list[Holding], *,
               held_for: Mapping[str, str] | None = None, **options: Any) -> Decision:
        """One decision on these nodes and holdings (nodes that are not the inventory's: engine_provisioning.py),
        with the facility's word: held nodes and domains kept out, and no placement that would take a rack's or
        PDU's draw past its budget (placement_round.py)."""
        round_ = PlacementRound(nodes, holdings, engines=self.engines, facility=self.facility, holds=self.holds,
                                now=self.wall_clock())
        return round_.decide(model.config, held_for=held_for, **options)

    def _launch_held(self, rec: ReplicaRecord, model: CatalogModel) -> None:
        """What the pass just started is held in its round, so the pass's next decisions see it."""
        if self._round is not None:
            self._round.launched(rec, model.model_class, model.config.owner)

    def _retire(self, rec: ReplicaRecord, why: str) -> None:
        was_live = rec.live
        super()._retire(rec, why)
        if self._round is not None:  # still on its node until it stops, counted by no quota
            self._round.retired(rec, was_live)

    def _drop(self, rec: ReplicaRecord, why: str) -> None:
        super()._drop(rec, why)
        if self._round is not None:  # what it held is free: the pass's next decision makes its round again
            self._round.stale = True

    def _set_problems(self, node: Node, problems: dict[str, str]) -> None:
        super()._set_problems(node, problems)
        if self._round is not None:  # a node changed: the pass's next decision makes its round again
            self._round.stale = True

    def _settle_preemptions(self) -> None:
        """Let a preempted model back onto its node once the model its cards went to no longer needs them."""
        ledger = self.preemption
        involved = ledger.preemptors() | ledger.victims()
        if not involved:
            return
        now = self.clock()
        preemptors = ledger.preemptors()
        short, waiting, running_on = set(), set(), set()
        for name in involved:
            cm = self.catalog.get(name)
            st = self.models.get(name)
            if cm is None or st is None or st.parked:
                continue
            live = [r for r in self.records.values() if r.model == name and r.live]
            counted = [r for r in live if not (r.replaces and self._serving(r.replaces))]
            if len(counted) < self._want(cm, st, counted, now):
                short.add(name)
                if name in preemptors:
                    waiting.add(name)
            running_on.update((name, node) for r in live for node in r.nodes)
        ledger.settle(waiting, running_on, short)

    async def _read_quotas(self) -> None:
        """The capacity quotas, from the store; kept as they were when it cannot be read."""
        if self.catalog.store is None:
            return
        try:
            self.quotas = await self._quota_reader.read(self.catalog.store)
        except Exception as exc:  # noqa: BLE001 - the store is down: carry on with what is known
            log.warning("capacity quotas not re-read: %s", exc)

    def _holdings(self) -> list[Holding]:
        return self._holdings_and_live()[0]

    def _holdings_and_live(self) -> tuple[list[Holding], dict[str, int]]:
        """What every replica (and every held card) holds, and each model's count of live replicas."""
        counts: dict[str, int] = {}
        for rec in self.records.values():
            if rec.live:
                counts[rec.model] = counts.get(rec.model, 0) + 1
        out = []
        minimums: dict[str, int] = {}
        for rec in self.records.values():
            cm = self.catalog.get(rec.model)
            minimum = minimums.get(rec.model)
            if minimum is None:
                minimum = minimums[rec.model] = self.bounds(cm).min if cm is not None else 0
            out.extend(record_holdings(rec, cm.model_class if cm is not None else "opportunistic",
                                       cm.config.owner if cm is not None else "",
                                       counts.get(rec.model, 0) > minimum))
        # A held card is held as a replica would hold it, by something no class may stop.
        for node_id, cards in held_cards(self.holds, self.wall_clock()).items():
            for index, hold in cards.items():
                out.append(Holding(replica_id=f"hold:{hold.domain}", model="", node=node_id, gpus=(index,),
                                   model_class="critical", spare=False, leaving=False))
        return out, counts

    def _launch(self, model: CatalogModel, placement: Placement, *, replaces: str | None = None) -> ReplicaRecord:
        now = self.clock()
        rec = ReplicaRecord(
            id=new_replica_id(model.name), model=model.name, node=placement.node, profile=placement.profile.name,
            engine=placement.engine, gpus=placement.gpus, memory=placement.memory, cores=placement.cores,
            created=now, since=now, replaces=replaces,
        )
        rec.workers = [WorkerShard(id=worker_shard_id(rec.id, rank), rank=rank, node=node, gpus=gpus)
                       for rank, (node, gpus) in enumerate(placement.workers, start=1)]
        self.records[rec.id] = rec
        self._launch_held(rec, model)
        self.observer.placed(rec, placement.why)
        logs.event(log, "placing replica", replica_id=rec.id, model=model.name, node_id=rec.node,
                   gpus=list(rec.gpus), why=placement.why, replaces=replaces,
                   **({"ranks": [{"node_id": w.node, "gpus": list(w.gpus)} for w in rec.workers]}
                      if rec.workers else {}))
        return rec

    async def _send(self) -> None:
        for rec in list(self.records.values()):
            if rec.workers:
                await self._send_ranks(rec)
            if rec.retiring and rec.head_gone:
                continue
            if rec.retiring and rec.stop_sent_at is None:
                node = self.inventory.get(rec.node)
                if node is None or not node.connected:
                    continue  # sent when it registers again, or dropped when it is lost
                try:
                    await self.link.send(rec.node, StopShard(shard_id=rec.id, grace_seconds=self.stop_grace,
                                                             command_id=f"stop:{rec.id}"))
                except NodeUnreachable:
                    continue
                rec.stop_sent_at, rec.state = self.clock(), "stopping"
            elif not rec.retiring and rec.state == "starting" and not rec.start_sent:
                if not self._engine_arrived(rec):
                    continue
                try:
                    await self.link.send(rec.node, self._start_message(rec))
                except NodeUnreachable as exc:
                    self._drop(rec, f"could not reach {rec.node}: {exc}")
                    self._state(rec.model).last_error = f"{rec.node}: unreachable when starting {rec.id}"
                    continue
                rec.start_sent = True
        await self._send_provisions()

    async def _send_ranks(self, rec: ReplicaRecord) -> None:
        """The other ranks of a replica over several nodes: each started once rank 0 has said where it meets
        them (its dist_port), each stopped with the replica. A rank that cannot be reached takes it down."""
        for worker in rec.workers:
            if worker.state == "gone":
                continue
            node = self.inventory.get(worker.node)
            if rec.retiring:
                if not worker.start_sent:
                    worker.state = "gone"  # never started: nothing to stop
                    continue
                if worker.stop_sent or node is None or not node.connected:
                    continue
                try:
                    await self.link.send(worker.node, StopShard(shard_id=worker.id, grace_seconds=self.stop_grace,
                                                                command_id=f"stop:{worker.id}"))
                except NodeUnreachable:
                    continue
                worker.stop_sent = True
            elif not worker.start_sent and rec.dist_port and rec.start_sent:
                try:
                    await self.link.send(worker.node, self._start_message(rec, worker))
                except NodeUnreachable as exc:
                    self._rank_gone(rec, worker, "failed", f"could not reach {worker.node}: {exc}")
                    continue
                worker.start_sent = True
        if rec.retiring and rec.head_gone and all(w.state == "gone" for w in rec.workers):
            self._drop(rec, rec.retiring)

    def _start_message(self, rec: ReplicaRecord, worker: WorkerShard | None = None) -> StartShard:
        """The StartShard of the replica's rank 0, or of one of its other ranks."""
        cm = self.catalog.get(rec.model)
        assert cm is not None
        profile = next((p for p in cm.config.profiles if p.name == rec.profile), cm.config.profiles[0])
        shard_id = worker.id if worker is not None else rec.id
        node = self.inventory.get(worker.node if worker is not None else rec.node)
        ranks: dict[str, Any] = {}
        if rec.workers:
            head = self.inventory.get(rec.node)
            # Rank 0's dist_port is 0 in its own start: its agent picks one and reports it.
            ranks = dict(nnodes=1 + len(rec.workers), node_rank=worker.rank if worker is not None else 0,
                         head_address=head.address if head is not None else rec.node,
                         dist_port=rec.dist_port if worker is not None else 0,
                         tensor_parallel=profile.tensor_parallel, pipeline_parallel=profile.pipeline_parallel)
        return StartShard(
            shard_id=shard_id, model=cm.name, engine=rec.engine,
            engine_version=cm.config.engine_version or (node.engines.get(rec.engine, "") if node is not None else ""),
            weights=WeightsSource(source=cm.config.source) if cm.config.source else None,
            args=tuple(profile.args), env=dict(profile.env), gpus=worker.gpus if worker is not None else rec.gpus,
            # Port 0: the agent picks one from its engine_ports and says which in ShardStatus.
            cores=profile.cores or None, memory_bytes=int(profile.memory) or None, port=0,
            api_key=self.keys.key_for(shard_id), command_id=f"start:{shard_id}", **ranks,
            **adapters_loading.start_fields(cm.config),  # adapters: fetched and loaded with the model
        )

    def _settle_waiters(self) -> None:
        """Tell a waiting first request at once when its model cannot be started now."""
        for name, st in self.models.items():
            if not st.waiters:
                continue
            starting = any(r.model == name and r.live for r in self.records.values())
            if st.parked:
                st.wake_waiters(ModelUnavailable(st.park_reason))
            elif not starting and not st.preempting and st.decision is not None and not st.decision.placed \
                    and self.clock() >= st.next_try:
                st.wake_waiters(ModelUnavailable(f"{name}: {st.decision.summary()}"))

    # ---------------------------------------------------------------- helpers

    def _state(self, model: str) -> ModelState:
        st = self.models.get(model)
        if st is None:
            st = self.models[model] = ModelState(model)
        return st


__all__ = ["CRASH_WINDOW", "AgentLink", "ModelUnavailable", "NodeUnreachable", "Reconciler"]
