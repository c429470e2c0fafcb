"""The router's side: an adapter a replica holds is served as a replica of its own model, BASE:NAME.

For every adapter a ready replica of BASE holds, the router's replica set
gets one more replica, of the model BASE:NAME, at the same engine: so a
request for `qwen:sql` (or `small:sql`, or `sql`) is routed only to replicas
that hold `sql`, and its usage rows and metrics name `qwen:sql`, apart from
the base's. The base's replica and its adapters' replicas share one room
(llmgw.router.replicas.SharedRoom): the engine is sent at most the model's
concurrency from all of them together, and a request for one waits (in its
own model's queue) while the others fill it.
It goes when its base replica goes, or when the adapter is unloaded.

How the engine is asked for the adapter depends on the engine:

- vLLM and the sim engine serve each adapter under its own name: the
  request's `model` becomes the adapter's name;
- llama.cpp's llama-server loads every adapter at start at scale 0 and
  applies one per request: the request keeps the base's name and carries
  `"lora": [{"id": INDEX, "scale": SCALE}]`, INDEX its place in the model's
  `adapters:` list; its requests and the base's go without prompt caching
  (LLAMACPP_NO_PROMPT_CACHE).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llmgw.adapters.names import full_name
from llmgw.router.replicas import Replica, ReplicaChange, ReplicaSet

#: Between a base replica's id and an adapter's name in the id of the adapter's replica.
ID_SEPARATOR = "+"
#: llama-server (the version llmgw builds) reuses a slot's cached prompt state whichever adapter computed it,
#: so a base request after an adapter's would continue from the adapter's state: every request to a llama.cpp
#: replica with adapters is sent without prompt caching.
LLAMACPP_NO_PROMPT_CACHE = {"cache_prompt": False}


def adapter_replica_id(base_id: str, adapter: str) -> str:
    return f"{base_id}{ID_SEPARATOR}{adapter}"


def base_id_of(replica_id: str) -> str:
    return replica_id.split(ID_SEPARATOR, 1)[0]


def adapter_replica(base: Replica, model: Any, adapter: str, engine: str) -> Replica:
    """The replica serving `adapter` of `model` (a ModelConfig) at `base`'s engine."""
    index, declared = next((i, a) for i, a in enumerate(model.adapters) if a.name == adapter)
    if engine == "llamacpp":
        engine_model = base.name_at_engine
        fields = {"lora": [{"id": index, "scale": declared.scale}], **LLAMACPP_NO_PROMPT_CACHE}
    else:
        engine_model, fields = adapter, {}
    return Replica(
        id=adapter_replica_id(base.id, adapter), model=full_name(base.model, adapter), base_url=base.base_url,
        engine_model=engine_model, api_key=base.api_key, api=base.api, max_concurrency=base.max_concurrency,
        labels=dict(base.labels), metrics_url=None, source=base.source, extra_headers=dict(base.extra_headers),
        body_fields=fields, shares_with=base.id,  # shared room: the engine's concurrency, with its base's
    )


def publish(replicas: ReplicaSet, base: Replica, model: Any, held: Iterable[str], engine: str) -> list[Replica]:
    """Put a replica for each adapter `base` holds in the set (again, as its base is now)."""
    follow(replicas)
    if engine == "llamacpp" and model.adapters:
        base.body_fields = {**base.body_fields, **LLAMACPP_NO_PROMPT_CACHE}
    declared = {a.name for a in model.adapters}
    out = []
    for name in held:
        if name in declared:
            out.append(replicas.add(adapter_replica(base, model, name, engine)))
    return out


def withdraw(replicas: ReplicaSet, base_id: str, adapter: str) -> None:
    """The adapter is no longer at that replica (unloaded)."""
    replicas.remove(adapter_replica_id(base_id, adapter))


def held_by(replicas: ReplicaSet, base_id: str) -> list[str]:
    """The adapters the router serves at a base replica now."""
    if not getattr(replicas, "_adapters_followed", False):
        return []  # no adapter was ever served from this set
    prefix = base_id + ID_SEPARATOR
    return [r.id[len(prefix):] for r in replicas if r.id.startswith(prefix)]


def last_used(replicas: ReplicaSet, base_id: str, now: float) -> float:
    """When the adapters' replicas at a base replica were last chosen (`now` while one serves a request), 0: never;
    what the scheduler's idle reckoning adds to the base's own use."""
    used = 0.0
    for name in held_by(replicas, base_id):
        replica = replicas.get(adapter_replica_id(base_id, name))
        if replica is None:
            continue
        if replica.in_flight > 0:
            return now
        used = max(used, replica.last_chosen)
    return used


def follow(replicas: ReplicaSet) -> None:
    """Once per set: a base replica removed takes its adapters' replicas with it."""
    if getattr(replicas, "_adapters_followed", False):
        return
    replicas._adapters_followed = True  # type: ignore[attr-defined]

    def on_change(change: ReplicaChange) -> None:
        if change.kind != "removed" or ID_SEPARATOR in change.replica.id:
            return
        for name in held_by(replicas, change.replica.id):
            replicas.remove(adapter_replica_id(change.replica.id, name))

    replicas.subscribe(on_change)


def with_body_fields(replica: Replica, body: bytes, content_type: str) -> bytes:
    """The body an adapter's replica is sent: its fields (llama.cpp's `lora`) laid over the request's."""
    fields = getattr(replica, "body_fields", None)
    if not fields or not content_type.startswith("application/json"):
        return body
    from llmgw.router.errors import dumps, loads

    data = loads(body)
    if not isinstance(data, dict):
        return body
    return dumps({**data, **fields})


__all__ = ["ID_SEPARATOR", "adapter_replica", "adapter_replica_id", "base_id_of", "follow", "held_by", "last_used",
           "publish", "with_body_fields", "withdraw"]
