"""What the leader keeps about each replica and each model between reconciler passes.

In memory only: after a take-over it is rebuilt from the agents'
registrations (each lists the shards it runs). A replica is one engine
process on one node (one shard); its id is the shard id on the wire. A
replica over several nodes is one record too: its rank 0 is the record's own
shard (the one the router sends to), its other ranks are `workers`, each a
shard of its own (`<replica id>-r1`, ...), started, stopped and lost together.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from typing import Any

import attrs

from llmgw.control.placement import Decision

#: A replica's life as the leader sees it. Records of replicas that are gone are dropped.
REPLICA_STATES = ("starting", "ready", "stopping")

_SLUG = re.compile(r"[^a-z0-9]+")


def new_replica_id(model: str) -> str:
    """`qwen-small-3f9a1c2e`: the model's name made safe for file names, and 32 random bits."""
    slug = _SLUG.sub("-", model.lower()).strip("-")[:40] or "model"
    return f"{slug}-{secrets.token_hex(4)}"


class ModelUnavailable(Exception):
    """A model cannot be started now; the message says why, for the client and the operator."""


def worker_shard_id(replica_id: str, rank: int) -> str:
    """The shard id of rank `rank` (1 and up) of a replica over several nodes: `qwen-3f9a1c2e-r1`."""
    return f"{replica_id}-r{rank}"


_WORKER_ID = re.compile(r"^(?P<replica>.+-[0-9a-f]{8})-r(?P<rank>[1-9][0-9]*)$")


def parse_worker_shard_id(shard_id: str) -> tuple[str, int] | None:
    """(replica id, rank) for a worker rank's shard id; None for any other id."""
    m = _WORKER_ID.match(shard_id)
    return (m["replica"], int(m["rank"])) if m else None


@attrs.define(eq=False)
class WorkerShard:
    """Rank 1 and up of a replica over several nodes: an engine process that serves no API of its own."""

    id: str
    rank: int
    node: str
    gpus: tuple[int, ...] = ()
    state: str = "starting"  #: starting, ready (running), or gone
    start_sent: bool = False
    stop_sent: bool = False
    message: str = ""

    def describe(self) -> dict[str, Any]:
        return {"rank": self.rank, "shard_id": self.id, "node": self.node, "gpus": list(self.gpus),
                "state": self.state, "message": self.message}


@attrs.define(eq=False)
class ReplicaRecord:
    id: str
    model: str
    node: str
    profile: str
    engine: str
    gpus: tuple[int, ...] = ()
    memory: int = 0
    cores: int = 0
    port: int = 0
    state: str = "starting"  #: one of REPLICA_STATES
    created: float = 0.0  #: monotonic
    since: float = 0.0  #: when it entered its state, or last showed progress
    ready_at: float | None = None
    #: the replica it takes over from (a drain): that one stops once this one is ready
    replaces: str | None = None
    #: why it is being stopped; empty while it is wanted
    retiring: str = ""
    message: str = ""
    adopted: bool = False  #: found running at registration rather than started here
    start_sent: bool = False
    #: the engine its node is installing for it: its StartShard waits until the node has it
    awaiting_engine: str = ""
    stop_sent_at: float | None = None
    #: a replica over several nodes: its ranks 1 and up (rank 0 is this record's own shard, on `node`)
    workers: list[WorkerShard] = attrs.Factory(list)
    #: where rank 0 meets the other ranks, as its agent chose: their starts wait for it
    dist_port: int = 0
    head_gone: bool = False  #: rank 0 has stopped while other ranks were still being stopped
    #: adapters: what its node fetched for it (wire AdapterHeld: name, path, loaded at start)
    adapters: tuple[Any, ...] = ()

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node the replica runs on, rank 0 first."""
        return (self.node, *(w.node for w in self.workers))

    def shards(self) -> list[dict[str, Any]]:
        """Each shard by rank: rank 0 (this record) first."""
        head = {"rank": 0, "shard_id": self.id, "node": self.node, "gpus": list(self.gpus),
                "state": "gone" if self.head_gone else self.state, "message": ""}
        return [head, *(w.describe() for w in self.workers)]

    @property
    def live(self) -> bool:
        """Counted towards its model: starting or ready, and not being stopped."""
        return not self.retiring and self.state in ("starting", "ready")

    def describe(self, now: float) -> dict[str, Any]:
        return {
            "id": self.id, "model": self.model, "node": self.node, "profile": self.profile,
            "engine": self.engine, "state": "stopping" if self.retiring else self.state,
            "gpus": list(self.gpus), "memory_bytes": self.memory, "cores": self.cores, "port": self.port,
            "for_s": round(max(0.0, now - self.since), 1), "replaces": self.replaces,
            "stopping_because": self.retiring or None, "message": self.message, "adopted": self.adopted,
            "nodes": list(self.nodes), "shards": self.shards(),
        }


@attrs.define(eq=False)
class ModelState:
    """The reconciler's memory of one model: failures, back-off, parking, demand, the last placement."""

    name: str
    failures: int = 0  #: failed starts in a row
    next_try: float = 0.0  #: monotonic; no start before it
    parked: bool = False
    park_reason: str = ""
    parked_for: Any = None  #: the model's definition when it was parked: a change unparks it
    parked_at: float = 0.0  #: wall-clock time it was parked
    last_error: str = ""
    last_log_tail: tuple[str, ...] = ()
    decision: Decision | None = None  #: the last placement asked for a new replica
    decision_at: float = 0.0  #: wall-clock time of it
    drain_blocked: Decision | None = None  #: why a replacement for a draining node cannot be placed
    last_request: float = 0.0  #: monotonic; a request was seen for it (on-demand start, touch)
    preempting: set[str] = attrs.Factory(set)  #: replicas being stopped to make room for it
    restarting: list[str] = attrs.Factory(list)  #: replicas still to restart, one at a time
    restart_in_place: bool = False
    wanted: int = 0  #: replicas wanted at the last pass
    logged: str = ""  #: the last "not placed" reason logged, so it is not logged every pass
    waiters: list[asyncio.Future] = attrs.Factory(list)

    def reset_failures(self) -> None:
        self.failures, self.next_try = 0, 0.0

    def wake_waiters(self, error: BaseException | None = None) -> None:
        for fut in self.waiters:
            if not fut.done():
                if error is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(error)
        self.waiters = [f for f in self.waiters if not f.done()]
