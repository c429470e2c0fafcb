"""What the leader keeps about each replica and each model between reconciler passes.

In memory only: after a take-over it is rebuilt from the agents'
registrations (each lists the shards it runs). A replica is one engine
process on one node (one shard); its id is the shard id on the wire.
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
