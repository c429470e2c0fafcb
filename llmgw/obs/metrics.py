"""The gateway's Prometheus metrics, one registry per server instance.

Names follow the reference's dashboards and alerts:

- `llmgw_requests_total{model,outcome}` and `llmgw_tenant_requests_total{tenant,outcome}`:
  outcome is `ok`, `error` (an engine or the gateway failed, or the request
  was wrong), `limited` (a rate, token or budget limit, or a full queue),
  `refused` (any other refusal: key, model, capacity) or `cancelled` (the
  client went away);
- `llmgw_request_duration_seconds{model}`, `llmgw_ttft_seconds{model}`,
  `llmgw_tpot_seconds{model}`, `llmgw_tenant_ttft_seconds{tenant}`;
- `llmgw_tokens_total{model,direction}` and `llmgw_tenant_tokens_total{tenant,direction}`,
  direction `prompt` or `completion`;
- `llmgw_queue_wait_seconds{model,band}`, `llmgw_queue_depth{model,band}`;
- `llmgw_replica_in_flight{model,replica}`, `llmgw_replica_healthy{model,replica}`,
  `llmgw_replica_engine_waiting{model,replica}`;
- `llmgw_upstream_retries_total{model}`, `llmgw_fallbacks_total{model,served,reason}`;
- `llmgw_model_update_available{model}`: 1 when the repository a served model
  came from has new files (the control plane's update checks), else 0;
- `llmgw_output_tokens_per_second{model}`: a streamed answer's output tokens
  after the first over the time they took;
- `llmgw_pool_saturation{model}`: the requests at a model's replicas and
  waiting for them over what they take at once.

`tag_labels` (server.yaml router.tag_labels) adds a label per named request
tag to `llmgw_requests_total`, each holding at most `tag_label_values`
distinct values (the rest count as `other`). Every metric is listed, with
its help, in llmgw/obs/metric_defs.py; `llmgw_build_info` and the process
metrics are in the registry too (llmgw/obs/exposition.py).

The tenant is the project of the key (`none` for a personal key,
`anonymous` when keys are off). `model` is the model that answered, else
the one asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from llmgw.obs.exposition import add_common, render
from llmgw.obs.metric_defs import defn

CONTENT_TYPE = CONTENT_TYPE_LATEST

DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 600, 1800)
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 2, 4, 8, 15, 30, 60, 120)
TPOT_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5)
QUEUE_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
TOKENS_PER_SECOND_BUCKETS = (1, 2.5, 5, 10, 15, 20, 30, 40, 50, 75, 100, 150, 200, 300, 500, 1000)
#: The value a tag label takes once it has had `tag_label_values` others.
OTHER_TAG_VALUE = "other"

OUTCOMES = ("ok", "error", "limited", "refused", "cancelled")


class _LiveCollector:
    """Gauges read at scrape time from the router's own state (no bookkeeping on the hot path)."""

    def __init__(self) -> None:
        self.queue_depths: Callable[[], Iterable[tuple[str, str, int]]] | None = None
        self.replicas: Callable[[], Iterable] | None = None
        self.model_updates: Callable[[], Iterable[tuple[str, float]]] | None = None
        self.slos: Callable[[], Iterable[tuple[str, Any]]] | None = None

    def describe(self):
        return []

    def collect(self):
        depth = GaugeMetricFamily("llmgw_queue_depth", "Requests waiting for room, by model and band.",
                                  labels=["model", "band"])
        if self.queue_depths is not None:
            for model, band, waiting in self.queue_depths():
                depth.add_metric([model, band], waiting)
        yield depth
        in_flight = GaugeMetricFamily("llmgw_replica_in_flight", "Requests this gateway has at a replica.",
                                      labels=["model", "replica"])
        healthy = GaugeMetricFamily("llmgw_replica_healthy",
                                    "1 while a replica takes requests, 0 while it is ejected after failures.",
                                    labels=["model", "replica"])
        waiting = GaugeMetricFamily("llmgw_replica_engine_waiting",
                                    "Requests waiting inside the engine, as last scraped.", labels=["model", "replica"])
        if self.replicas is not None:
            for r in self.replicas():
                in_flight.add_metric([r.model, r.id], r.in_flight)
                healthy.add_metric([r.model, r.id], 1.0 if r.usable() else 0.0)
                waiting.add_metric([r.model, r.id], r.load.waiting)
        yield in_flight
        yield healthy
        yield waiting
        yield self._saturation()
        yield self._slos()
        updates = GaugeMetricFamily("llmgw_model_update_available",
                                    "1 when the repository a served model came from has new files.", labels=["model"])
        if self.model_updates is not None:
            for model, flag in self.model_updates():
                updates.add_metric([model], flag)
        yield updates

    def _slos(self) -> GaugeMetricFamily:
        """Each model's objectives (server.yaml models[].slo), the ones set."""
        d = defn("llmgw_model_slo_seconds")
        family = GaugeMetricFamily(d.family, d.help, labels=list(d.labels))
        if self.slos is not None:
            for model, slo in self.slos():
                for kind in ("ttft_p99", "tpot_p99"):
                    seconds = getattr(slo, kind).total_seconds()
                    if seconds > 0:
                        family.add_metric([model, kind], seconds)
        return family

    def _saturation(self) -> GaugeMetricFamily:
        """Per model: (requests at its usable replicas + their engines' queues + admission's queue) over the
        requests those replicas take at once; +Inf when requests wait and no replica takes them."""
        d = defn("llmgw_pool_saturation")
        family = GaugeMetricFamily(d.family, d.help, labels=list(d.labels))
        load: dict[str, float] = {}
        room: dict[str, float] = {}
        if self.replicas is not None:
            for r in self.replicas():
                load.setdefault(r.model, 0.0)
                room.setdefault(r.model, 0.0)
                if r.usable():
                    load[r.model] += r.in_flight + max(0.0, r.load.waiting)
                    room[r.model] += r.max_concurrency
        if self.queue_depths is not None:
            for model, _band, waiting in self.queue_depths():
                load[model] = load.get(model, 0.0) + waiting
        for model in sorted(load):
            capacity = room.get(model, 0.0)
            if capacity > 0:
                family.add_metric([model], load[model] / capacity)
            elif load[model] > 0:
                family.add_metric([model], float("inf"))
            else:
                family.add_metric([model], 0.0)
        return family


#: Series kept by GatewayMetrics._child before it starts again (models × tenants × outcomes stay far below).
_MAX_CHILDREN = 50_000


class GatewayMetrics:
    """Every gateway series, in a registry of its own (several gateways may share a process in tests)."""

    def __init__(self, *, tag_labels: Sequence[str] = (), tag_label_values: int = 20) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        add_common(reg, "server")
        self.tag_labels = tuple(tag_labels)
        self.tag_label_values = tag_label_values
        self._tag_values: dict[str, set[str]] = {name: set() for name in self.tag_labels}
        self._children: dict[tuple, Any] = {}  # (metric, label values) -> its series, see _child
        self.requests = Counter("llmgw_requests", defn("llmgw_requests_total").help,
                                ["model", "outcome", *self.tag_labels], registry=reg)
        self.tenant_requests = Counter("llmgw_tenant_requests", "Requests answered, by tenant and outcome.",
                                       ["tenant", "outcome"], registry=reg)
        self.duration = Histogram("llmgw_request_duration_seconds", "Time from a request's arrival to its answer's end.",
                                  ["model"], buckets=DURATION_BUCKETS, registry=reg)
        self.ttft = Histogram("llmgw_ttft_seconds", "Time from arrival to a streamed answer's first event.",
                              ["model"], buckets=TTFT_BUCKETS, registry=reg)
        self.tenant_ttft = Histogram("llmgw_tenant_ttft_seconds", "Time to first event, by tenant.",
                                     ["tenant"], buckets=TTFT_BUCKETS, registry=reg)
        self.tpot = Histogram("llmgw_tpot_seconds", "Mean time per output token after the first, one sample a request.",
                              ["model"], buckets=TPOT_BUCKETS, registry=reg)
        self.tokens = Counter("llmgw_tokens", "Tokens read and written, by model and direction.",
                              ["model", "direction"], registry=reg)
        self.tenant_tokens = Counter("llmgw_tenant_tokens", "Tokens by tenant and direction.",
                                     ["tenant", "direction"], registry=reg)
        self.queue_wait = Histogram("llmgw_queue_wait_seconds", "Time a request waited for room on a replica.",
                                    ["model", "band"], buckets=QUEUE_BUCKETS, registry=reg)
        self.retries = Counter("llmgw_upstream_retries", "Requests sent again to another replica after a failure.",
                               ["model"], registry=reg)
        self.fallbacks = Counter("llmgw_fallbacks", "Requests answered by a fallback model, and why.",
                                 ["model", "served", "reason"], registry=reg)
        self.output_rate = Histogram("llmgw_output_tokens_per_second", defn("llmgw_output_tokens_per_second").help,
                                     ["model"], buckets=TOKENS_PER_SECOND_BUCKETS, registry=reg)
        self.slo_shed = Counter("llmgw_slo_shed", defn("llmgw_slo_shed_total").help,  # slo: llmgw.router.slo
                                ["model", "band"], registry=reg)
        self.http_errors = Counter("llmgw_http_errors", "Requests the gateway failed on itself (status 500), by route.",
                                   ["route"], registry=reg)
        self._live = _LiveCollector()
        reg.register(self._live)
        #: coroutines awaited before each scrape, for what can only be read asynchronously (the store's replication)
        self.before_scrape: list[Callable[[], Awaitable[None]]] = []

    def bind(self, *, queue_depths: Callable[[], Iterable[tuple[str, str, int]]] | None = None,
             replicas: Callable[[], Iterable] | None = None,
             model_updates: Callable[[], Iterable[tuple[str, float]]] | None = None,
             slos: Callable[[], Iterable[tuple[str, Any]]] | None = None) -> None:
        """Where the live gauges read from: admission's queues, the replica set, the update checks, the
        models' objectives."""
        if queue_depths is not None:
            self._live.queue_depths = queue_depths
        if replicas is not None:
            self._live.replicas = replicas
        if model_updates is not None:
            self._live.model_updates = model_updates
        if slos is not None:
            self._live.slos = slos

    def request_done(self, *, model: str, tenant: str, outcome: str, duration: float,
                     prompt_tokens: int, completion_tokens: int, ttft: float | None,
                     tpot: float | None, tags: Sequence[str] = ()) -> None:
        child = self._child
        child(self.requests, model, outcome, *self._tag_label_values(tags)).inc()
        child(self.tenant_requests, tenant, outcome).inc()
        child(self.duration, model).observe(duration)
        if prompt_tokens:
            child(self.tokens, model, "prompt").inc(prompt_tokens)
            child(self.tenant_tokens, tenant, "prompt").inc(prompt_tokens)
        if completion_tokens:
            child(self.tokens, model, "completion").inc(completion_tokens)
            child(self.tenant_tokens, tenant, "completion").inc(completion_tokens)
        if ttft is not None:
            child(self.ttft, model).observe(ttft)
            child(self.tenant_ttft, tenant).observe(ttft)
        if tpot is not None:
            child(self.tpot, model).observe(tpot)
            if tpot > 0:
                child(self.output_rate, model).observe(1.0 / tpot)

    def _child(self, metric: Any, *values: str) -> Any:
        """`metric.labels(*values)`, found once per series and kept (labels() checks and converts every value,
        under a lock, each time: a dozen times a request). No series here is ever removed."""
        key = (metric, values)
        found = self._children.get(key)
        if found is None:
            if len(self._children) >= _MAX_CHILDREN:
                self._children.clear()
            found = self._children[key] = metric.labels(*values)
        return found

    def _tag_label_values(self, tags: Sequence[str]) -> list[str]:
        """The value of each tag label for a request's tags (`name=value`): "" when it has none, `other`
        past the cap on distinct values."""
        if not self.tag_labels:
            return []
        given: dict[str, str] = {}
        for tag in tags:
            name, sep, value = tag.partition("=")
            if sep and name in self._tag_values and name not in given:
                given[name] = value
        out = []
        for name in self.tag_labels:
            value = given.get(name, "")
            seen = self._tag_values[name]
            if value and value not in seen:
                if len(seen) >= self.tag_label_values:
                    value = OTHER_TAG_VALUE
                else:
                    seen.add(value)
            out.append(value)
        return out

    def queued(self, model: str, band: str, seconds: float) -> None:
        self.queue_wait.labels(model, band).observe(seconds)

    async def refresh(self, timeout: float = 2.0) -> None:
        """Await each before_scrape reader, none longer than `timeout`; a failing one leaves its last values."""
        for read in self.before_scrape:
            try:
                await asyncio.wait_for(read(), timeout)
            except Exception:  # noqa: BLE001 - a scrape answers with what the others have
                pass

    def exposition(self, accept: str | None = None) -> bytes:
        return render(self.registry, accept)[0]

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition in the format a scrape's Accept header asks for, and its content type."""
        return render(self.registry, accept)
