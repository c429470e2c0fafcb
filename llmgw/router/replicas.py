"""The replicas the router may send a model's requests to.

`ReplicaSet` is what the router reads and what the control plane writes:
`replicas_for(model)` on the serving path; `add`, `update` and `remove` as
replicas start, move and stop; `subscribe` to hear of each change. Until the
control plane feeds it, `static_replicas(config)` fills one from the fixed
`endpoints:` of server.yaml's models.

A `Replica` carries what the router keeps about it while serving: requests
in flight, health (ejected after failures in a row, let back after a
back-off that doubles), and the engine's load as last scraped from its
/metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal
from urllib.parse import urlsplit

import attrs

from llmgw.config.secrets import Secret
from llmgw.config.server import ServerConfig
from llmgw.obs import logs

log = logs.get("llmgw.router.replicas")

#: Requests one replica is sent at once when its model names no concurrency.
DEFAULT_CONCURRENCY = 64
#: Failures in a row that eject a replica; a success resets the count.
EJECT_AFTER = 3
#: First wait before an ejected replica is tried again; it doubles up to EJECT_BACKOFF_MAX.
EJECT_BACKOFF = 5.0
EJECT_BACKOFF_MAX = 120.0
#: Scraped load older than this many scrape intervals is ignored.
STALE_AFTER_SCRAPES = 3

ChangeKind = Literal["added", "updated", "removed"]
#: Sources of the cluster's own replicas: placed by this control plane's reconciler ("control"), or copied
#: by a standby from the leader's set ("view", llmgw.control.replica_view).
CLUSTER_SOURCES = ("control", "view")


@attrs.define(slots=True)
class EngineLoad:
    """What the engine said about itself at its last scrape."""

    running: float = 0.0
    waiting: float = 0.0
    kv_cache_usage: float | None = None
    at: float = 0.0  # monotonic time of the scrape; 0: never


@attrs.define(slots=True)
class Health:
    """Passive health: failures in a row eject a replica for a back-off."""

    failures: int = 0  # consecutive
    ejected_until: float = 0.0  # monotonic; 0: not ejected
    backoff: float = 0.0  # the last back-off given, doubled on the next ejection
    last_error: str = ""

    def usable(self, now: float) -> bool:
        """Not ejected, or its back-off is over (it gets requests again, and
        one more failure ejects it for twice as long)."""
        return now >= self.ejected_until


#: workers (llmgw.server.workers): the part of a replica's concurrency this process may send it, so that all
#: workers together send it no more than its concurrency; None (one process): all of it
concurrency_share: Callable[[int], int] | None = None


@attrs.define(eq=False, slots=True)
class SharedRoom:
    """Replicas at one engine that take its concurrency together (a base and its adapters' replicas,
    llmgw.adapters.serving): the engine gets no more than its concurrency from all of them at once."""

    members: list[Replica] = attrs.Factory(list)

    def in_flight(self) -> int:
        return sum(m.in_flight for m in self.members)


@attrs.define(eq=False, slots=True)
class Replica:
    """One engine serving one model, as the router sees it."""

    id: str
    model: str  # the catalog name it serves
    base_url: str  # the OpenAI API base, ending in /v1
    engine_model: str = ""  # the name the engine knows it by; empty: the catalog name
    api_key: Secret | None = attrs.field(default=None, repr=False)
    api: str = "openai"
    max_concurrency: int = DEFAULT_CONCURRENCY
    #: routing profiles: its node's labels (the cluster's own replicas; pinned:POOL reads `pool`)
    labels: dict[str, str] = attrs.Factory(dict)
    #: where its /metrics are read; None: not scraped
    metrics_url: str | None = None
    source: str = "static"  # who added it: static (server.yaml) or control (the scheduler)
    #: headers sent with every request to it (federation: x-llmgw-hop, llmgw.router.federation)
    extra_headers: dict[str, str] = attrs.Factory(dict)
    #: adapters: fields laid over every request's JSON body (llama.cpp's `lora`; llmgw.adapters.serving)
    body_fields: dict[str, Any] = attrs.Factory(dict)
    #: shared room: the id of the replica at the same engine whose concurrency this one takes its part of
    #: (an adapter's replica: its base's); empty: its own
    shares_with: str = ""
    # -- live state, kept by the router
    #: shared room: the replicas at its engine counted together (ReplicaSet links them); None: alone
    room: SharedRoom | None = attrs.field(default=None, repr=False)
    in_flight: int = 0
    health: Health = attrs.Factory(Health)
    load: EngineLoad = attrs.Factory(EngineLoad)
    last_chosen: float = 0.0
    served: int = 0

    @property
    def in_cluster(self) -> bool:
        """Run by the cluster's agents: placed by this control plane, or copied from the leader's set."""
        return self.source in CLUSTER_SOURCES

    @property
    def name_at_engine(self) -> str:
        return self.engine_model or self.model

    def usable(self, now: float | None = None) -> bool:
        return self.health.usable(time.monotonic() if now is None else now)

    def engine_in_flight(self) -> int:
        """Requests this gateway has at the replica's engine: its own, and those of the replicas sharing it."""
        return self.in_flight if self.room is None else self.room.in_flight()  # shared room

    def sharing_models(self) -> list[str]:
        """The models whose requests take this replica's room: its own, and those sharing its engine."""
        return [self.model] if self.room is None else list(dict.fromkeys(m.model for m in self.room.members))

    def has_room(self) -> bool:
        share = concurrency_share  # workers: this process's part of the replica's concurrency
        limit = self.max_concurrency if share is None else share(self.max_concurrency)
        return self.engine_in_flight() < limit  # shared room: a base and its adapters' replicas together

    def outstanding(self, now: float, stale_after: float) -> float:
        """Requests ahead of a new one here: ours in flight at its engine plus the engine's own queue."""
        waiting = self.load.waiting if self.load.at and now - self.load.at <= stale_after else 0.0
        return self.engine_in_flight() + waiting  # shared room

    # -- health ---------------------------------------------------------

    def succeeded(self) -> None:
        h = self.health
        if h.failures or h.backoff:
            if h.ejected_until:
                logs.event(log, "replica back in service", replica_id=self.id, model=self.model)
            h.failures, h.ejected_until, h.backoff, h.last_error = 0, 0.0, 0.0, ""

    def failed(self, reason: str, now: float | None = None) -> bool:
        """Count a failure; True when it ejects the replica."""
        now = time.monotonic() if now is None else now
        h = self.health
        h.failures += 1
        h.last_error = reason
        # Once ejected and let back, one more failure sends it out again.
        if h.failures >= EJECT_AFTER or h.backoff:
            h.backoff = min(EJECT_BACKOFF_MAX, h.backoff * 2 if h.backoff else EJECT_BACKOFF)
            h.ejected_until = now + h.backoff
            logs.event(log, "replica ejected", logging.WARNING, replica_id=self.id, model=self.model,
                       failures=h.failures, backoff_s=h.backoff, reason=reason)
            return True
        return False

    def describe(self, now: float | None = None) -> dict:
        """The replica for /ready, the admin API and tests; no key."""
        now = time.monotonic() if now is None else now
        return {
            "id": self.id, "model": self.model, "url": self.base_url, "source": self.source,
            "healthy": self.usable(now), "in_flight": self.in_flight,
            "max_concurrency": self.max_concurrency, "failures": self.health.failures,
            "running": self.load.running, "waiting": self.load.waiting,
            "kv_cache_usage": self.load.kv_cache_usage,
        }


@attrs.frozen
class ReplicaChange:
    kind: ChangeKind
    replica: Replica


Listener = Callable[[ReplicaChange], None]


class ReplicaSet:
    """Every replica the router knows, by model. Used from the event loop only.

    The control plane calls `add` when a replica is ready, `update` when
    something about it changes (its address, its key, its concurrency) and
    `remove` when it stops or drains; listeners hear each change at once.
    The router's live state (in flight, health, load) survives `update`.
    """

    def __init__(self, replicas: Iterable[Replica] = ()) -> None:
        self._by_id: dict[str, Replica] = {}
        self._by_model: dict[str, list[Replica]] = {}
        self._listeners: list[Listener] = []
        #: why a model with no replica here cannot be served (a standby's stale copy of the leader's replicas,
        #: llmgw.control.replica_view); empty: nothing to add to "no replica is serving"
        self.unavailable_reason = ""
        for replica in replicas:
            self.add(replica)

    # -- reading --------------------------------------------------------

    def replicas_for(self, model: str) -> list[Replica]:
        """The replicas of a catalog model (healthy or not); empty when none."""
        return self._by_model.get(model, [])

    def get(self, replica_id: str) -> Replica | None:
        return self._by_id.get(replica_id)

    def models(self) -> list[str]:
        return [m for m, rs in self._by_model.items() if rs]

    def __iter__(self):
        return iter(list(self._by_id.values()))

    def __len__(self) -> int:
        return len(self._by_id)

    # -- writing --------------------------------------------------------

    def add(self, replica: Replica) -> Replica:
        """Add a replica; one with the same id is replaced by `update`."""
        if replica.id in self._by_id:
            return self.update(replica.id, base_url=replica.base_url, engine_model=replica.engine_model,
                               api_key=replica.api_key, max_concurrency=replica.max_concurrency,
                               metrics_url=replica.metrics_url, labels=replica.labels, api=replica.api,
                               source=replica.source)  # a copied replica adopted: the reconciler's now
        self._by_id[replica.id] = replica
        self._by_model.setdefault(replica.model, []).append(replica)
        self._share_room(replica)
        self._notify(ReplicaChange("added", replica))
        return replica

    def update(self, replica_id: str, **changes) -> Replica:
        """Change what is known of a replica (not its id or model). KeyError when unknown."""
        replica = self._by_id[replica_id]
        for name in ("id", "model"):
            if name in changes and changes[name] != getattr(replica, name):
                raise ValueError(f"a replica's {name} does not change; remove it and add another")
        for name, value in changes.items():
            if name not in ("id", "model"):
                setattr(replica, name, value)
        self._notify(ReplicaChange("updated", replica))
        return replica

    def remove(self, replica_id: str) -> Replica | None:
        """Forget a replica; requests in flight to it finish. None when unknown."""
        replica = self._by_id.pop(replica_id, None)
        if replica is None:
            return None
        peers = self._by_model.get(replica.model, [])
        if replica in peers:
            peers.remove(replica)
        if not peers:
            self._by_model.pop(replica.model, None)
        if replica.room is not None and replica.shares_with:  # shared room: its part leaves with it
            replica.room.members.remove(replica)
            replica.room = None
        self._notify(ReplicaChange("removed", replica))
        return replica

    def _share_room(self, replica: Replica) -> None:
        """shared room: a replica sharing another's engine (an adapter's, its base's) counts with it."""
        sharing = [replica] if replica.shares_with else []
        if not replica.shares_with:  # a base added after those sharing it (not the usual order)
            sharing = [r for r in self._by_id.values() if r.shares_with == replica.id and r.room is None]
        for member in sharing:
            owner = self._by_id.get(member.shares_with)
            if owner is None:
                continue
            if owner.room is None:
                owner.room = SharedRoom([owner])
            if member not in owner.room.members:
                owner.room.members.append(member)
            member.room = owner.room

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener` after every change; returns what unsubscribes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _notify(self, change: ReplicaChange) -> None:
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:  # a listener's bug must not stop the others
                log.exception("replica change listener failed", extra={"fields": {"replica_id": change.replica.id}})


# ---------------------------------------------------------------- static replicas


def api_base(url: str) -> str:
    """An endpoint's address as the OpenAI API base: `http://h:8000` and `http://h:8000/v1` both give the latter."""
    base = url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


def metrics_url_for(base_url: str) -> str:
    """Where an engine at this API base publishes Prometheus metrics: /metrics beside /v1."""
    parts = urlsplit(base_url)
    path = parts.path.removesuffix("/v1")
    return f"{parts.scheme}://{parts.netloc}{path.rstrip('/')}/metrics"


def static_replicas(config: ServerConfig) -> ReplicaSet:
    """A replica set holding every `models[].endpoints[]` of server.yaml, one replica each.

    Anthropic-shaped providers (`api: anthropic`) are served through
    llmgw.router.anthropic_upstream, and not scraped for metrics.
    """
    replicas = ReplicaSet()
    for model in config.models:
        for index, endpoint in enumerate(model.endpoints):
            base = api_base(endpoint.url)
            replicas.add(Replica(
                id=f"{model.name}/endpoint-{index}",
                model=model.name,
                base_url=base,
                engine_model=endpoint.model,
                api_key=endpoint.api_key,
                api=endpoint.api,
                max_concurrency=max(1, getattr(model, "concurrency", DEFAULT_CONCURRENCY)),
                metrics_url=metrics_url_for(base) if endpoint.api == "openai" else None,
                source="static",
            ))
    return replicas
