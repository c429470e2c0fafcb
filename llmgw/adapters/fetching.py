"""The agent's side: a replica's adapters fetched like its weights, before the engine starts.

Each adapter's source goes through the agent's weights fetcher (the mirror
when there is one, checked against its sha256), so an adapter the node cannot
get fails the start in words naming it, rather than starting a replica that
would answer for the base model under the adapter's name. What was fetched
is kept with the shard (its meta, which survives the agent's restart) and
reported in every ShardStatus.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llmgw.plugins.types import AdapterFile
from llmgw.wire import messages as wire


class AdapterFetchError(Exception):
    """An adapter could not be fetched; the message names it."""


async def fetch_adapters(weights: Any, msg: wire.StartShard,
                         progress: Callable[[Any], None]) -> tuple[AdapterFile, ...]:
    """Every adapter of the start, on this node, in order."""
    from llmgw.agent.weights import WeightsError

    out = []
    for adapter in msg.adapters:
        try:
            path = await weights.ensure(adapter.source, sha256=adapter.sha256, model=msg.model, progress=progress)
        except WeightsError as exc:
            raise AdapterFetchError(f"adapter {adapter.name}: {exc}") from None
        out.append(AdapterFile(name=adapter.name, path=str(path), scale=adapter.scale))
    return tuple(out)


def held_meta(adapters: Sequence[AdapterFile], max_adapters: int, loading: str) -> list[dict[str, Any]]:
    """What the shard's meta keeps: each adapter, where it lies, and whether the engine loads it at start."""
    at_start = loading == "start" or max_adapters <= 0
    return [{"name": a.name, "path": a.path, "loaded": at_start} for a in adapters]


def held_of(meta: dict[str, Any]) -> tuple[wire.AdapterHeld, ...]:
    """The shard's adapters for its ShardStatus."""
    return tuple(wire.AdapterHeld(name=str(a.get("name", "")), path=str(a.get("path", "")),
                                  loaded=bool(a.get("loaded")))
                 for a in meta.get("adapters") or () if isinstance(a, dict))


__all__ = ["AdapterFetchError", "fetch_adapters", "held_meta", "held_of"]
