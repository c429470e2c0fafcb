"""The control plane's metrics: leadership, nodes and replicas, placement, preemption, parking, jobs.

`ControlMetrics` follows the reconciler as one more observer (llmgw/control/jobs.py ReconcilerObserver)
for what happens (placements, failures, preemptions, parks, pass times), and reads the rest from the
control plane at scrape time (leadership, the inventory, the records, the jobs). It also serves the
agents' readings relayed through the leader (llmgw/obs/node_metrics.py), labelled by node.

`PlaneCollector(slot)` puts them on `llmgw server`'s registry: nothing while no control plane runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from llmgw.control.jobs import ReconcilerObserver
from llmgw.obs.metric_defs import defn
from llmgw.obs.node_metrics import NodeReading, node_families

if TYPE_CHECKING:
    from llmgw.control.placement import Decision
    from llmgw.control.state import ModelState, ReplicaRecord

PASS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
NODE_STATES = ("ready", "cordoned", "draining", "disconnected", "lost")


def placement_failure_reason(decision: Decision) -> str:
    """A word for why placement found no room: no_nodes, quota, fabric or no_fit."""
    if decision.nodes_considered == 0 and not decision.rejections:
        return "quota" if decision.quota else "no_nodes"
    if decision.quota and not decision.rejections:
        return "quota"
    if decision.fabric:
        return "fabric"
    return "no_fit"


def _gauge(name: str) -> GaugeMetricFamily:
    d = defn(name)
    return GaugeMetricFamily(d.family, d.help, labels=list(d.labels))


def _counter(name: str) -> CounterMetricFamily:
    d = defn(name)
    return CounterMetricFamily(d.family, d.help, labels=list(d.labels))


class ControlMetrics(ReconcilerObserver):
    """One control plane's metrics. `plane` is the llmgw.control.service.ControlPlane they are read from."""

    def __init__(self, plane: Any = None) -> None:
        self.plane = plane
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry

        def counter(name: str) -> Counter:
            d = defn(name)
            return Counter(d.family, d.help, list(d.labels), registry=reg)

        self.placements = counter("llmgw_placements_total")
        self.placement_failures = counter("llmgw_placement_failures_total")
        self.preemptions = counter("llmgw_preemptions_total")
        self.start_failures = counter("llmgw_replica_start_failures_total")
        self.parks = counter("llmgw_model_parks_total")
        d = defn("llmgw_reconcile_duration_seconds")
        self.pass_duration = Histogram(d.family, d.help, buckets=PASS_BUCKETS, registry=reg)
        d = defn("llmgw_placement_pass_seconds")
        self.placement_duration = Histogram(d.family, d.help, buckets=PASS_BUCKETS, registry=reg)
        self._pass_started: float | None = None
        self._parked: set[str] = set()

    # ------------------------------------------------------------ the reconciler's news

    def pass_begun(self) -> None:
        self._pass_started = time.perf_counter()

    def pass_ended(self, rec: Any) -> None:
        if self._pass_started is not None:
            self.pass_duration.observe(time.perf_counter() - self._pass_started)
            self._pass_started = None
        self._parked = {name for name, st in rec.models.items() if st.parked}

    def placement_timed(self, seconds: float) -> None:
        self.placement_duration.observe(seconds)

    def placed(self, rec: ReplicaRecord, why: str) -> None:
        self.placements.labels(rec.model).inc()

    def unplaced(self, model: str, decision: Decision) -> None:
        self.placement_failures.labels(model, placement_failure_reason(decision)).inc()

    def preempted(self, model: str, victims: Iterable[str]) -> None:
        self.preemptions.labels(model).inc(len(list(victims)))

    def failed_start(self, rec: ReplicaRecord, st: ModelState, retry_in: float) -> None:
        self.start_failures.labels(rec.model).inc()
        if st.parked and rec.model not in self._parked:
            self._parked.add(rec.model)
            self.parks.labels(rec.model).inc()

    # ------------------------------------------------------------ read at scrape time

    def collect(self):
        yield from self.registry.collect()
        plane = self.plane
        if plane is None:
            return
        leadership = plane.leadership
        leader = _gauge("llmgw_leader")
        leader.add_metric([], 1.0 if leadership.leading else 0.0)
        yield leader
        renewals = _counter("llmgw_lease_renewals_total")
        renewals.add_metric([], leadership.renewals)
        yield renewals
        failures = _counter("llmgw_lease_renewal_failures_total")
        failures.add_metric([], leadership.renewal_failures)
        yield failures
        nodes = plane.inventory.nodes()
        by_state = dict.fromkeys(NODE_STATES, 0)
        for node in nodes:
            by_state[node.state()] = by_state.get(node.state(), 0) + 1
        family = _gauge("llmgw_nodes")
        for state, count in by_state.items():
            family.add_metric([state], count)
        yield family
        rec = plane.reconciler
        records = list(rec.records.values()) if rec is not None else []
        replicas: dict[tuple[str, str], int] = {}
        assigned = _gauge("llmgw_gpu_assigned")
        for r in records:
            replicas[(r.model, r.state)] = replicas.get((r.model, r.state), 0) + 1
            for node, gpus in ((r.node, r.gpus), *((w.node, w.gpus) for w in r.workers)):
                for gpu in gpus:
                    assigned.add_metric([node, str(gpu), r.model, r.id], 1)
        family = _gauge("llmgw_replicas")
        for (model, state), count in sorted(replicas.items()):
            family.add_metric([model, state], count)
        yield family
        yield assigned
        parked = _gauge("llmgw_model_parked")
        if rec is not None:
            for name, st in sorted(rec.models.items()):
                parked.add_metric([name], 1.0 if st.parked else 0.0)
        yield parked
        jobs: dict[tuple[str, str], int] = {}
        for job in plane.jobs.select():
            jobs[(job.kind, job.state)] = jobs.get((job.kind, job.state), 0) + 1
        family = _gauge("llmgw_jobs")
        for (kind, state), count in sorted(jobs.items()):
            family.add_metric([kind, state], count)
        yield family
        yield from node_families(
            NodeReading(node=n.id, gpus=n.gpus, cores=n.cores, memory_total_bytes=n.memory_total,
                        heartbeat=n.heartbeat) for n in nodes)


class ObserverFanOut(ReconcilerObserver):
    """Tells each observer in turn; engine_install's job id is the first one given."""

    def __init__(self, *observers: ReconcilerObserver) -> None:
        self.observers = observers

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("_") or name == "observers":
            return object.__getattribute__(self, name)
        hooks = [getattr(o, name) for o in object.__getattribute__(self, "observers") if hasattr(o, name)]

        def call(*args: Any, **kwargs: Any) -> Any:
            first = None
            for hook in hooks:
                result = hook(*args, **kwargs)
                if first is None and result:
                    first = result
            return first if first is not None else ""

        return call


class PlaneCollector:
    """The running control plane's metrics on another registry (the server's), read at each scrape."""

    def __init__(self, slot: Any) -> None:
        self.slot = slot

    def describe(self):
        return []

    def collect(self):
        plane = getattr(self.slot, "plane", None)
        metrics = getattr(plane, "metrics", None)
        if metrics is not None:
            yield from metrics.collect()
