"""The router serves the control plane's catalog: server.yaml's models and those added at run time.

`follow(gateway, catalog)` puts the control plane's catalog (llmgw.control.catalog)
into the gateway at once and each time it changes: the names clients may ask
for, their aliases and fallbacks, the key allowlists' aliases, the canaries'
shares of their models' sessions (llmgw.router.canary), and the
concurrency of the replicas already serving a model. `watch(catalog)` re-reads
the store every few seconds, so a model added, changed or removed on another
control plane is served here too within that time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import SimpleNamespace

from llmgw.auth.keys import model_aliases
from llmgw.obs import logs

log = logs.get("llmgw.router.catalog")

#: How often every control plane re-reads the run-time models from the store (as the cluster settings).
WATCH_S = 3.0


def served_models(catalog) -> list:
    """The ModelConfigs the router serves: every server.yaml model, and each run-time one that can run."""
    return [m.config for m in catalog.models() if m.origin == "file" or m.valid]


def follow(gateway, catalog) -> Callable[[], None]:
    """Keep `gateway`'s catalog as the control plane's `catalog`; returns what stops following."""

    def take_up() -> None:
        models = served_models(catalog)
        gateway.catalog.set_models(models, declared_only=True)
        resolver = gateway.resolver
        if resolver is not None and hasattr(resolver, "aliases"):
            aliases = model_aliases(SimpleNamespace(models=models))
            if aliases != (resolver.aliases or {}):
                resolver.aliases = aliases
                invalidate = getattr(resolver, "invalidate", None)
                if invalidate is not None:
                    invalidate()  # allowlists are worked out again with the new aliases
        rollouts = getattr(catalog, "rollouts", None)
        if rollouts is not None and getattr(gateway, "canary", None) is not None:
            gateway.canary.set(rollouts.split())  # every control plane splits a model's sessions alike
        concurrency = {m.name: gateway.catalog.get(m.name).concurrency for m in models}
        for replica in gateway.replicas:
            wanted = concurrency.get(replica.model)
            if wanted is not None and replica.max_concurrency != wanted:
                gateway.replicas.update(replica.id, max_concurrency=wanted)

    take_up()
    catalog.listeners.append(take_up)
    return lambda: catalog.listeners.remove(take_up) if take_up in catalog.listeners else None


async def watch(catalog, *, every: float | None = None) -> None:
    """Re-read the catalog's store rows every `every` (WATCH_S) seconds; runs until cancelled."""
    failing = False
    while True:
        await asyncio.sleep(WATCH_S if every is None else every)
        try:
            await catalog.load()
        except Exception as exc:  # noqa: BLE001 - the store may be away a while: the next read tries again
            if not failing:
                logs.event(log, "run-time models not read; the router serves what it had", logging.WARNING,
                           error=str(exc))
            failing = True
        else:
            failing = False


__all__ = ["WATCH_S", "follow", "served_models", "watch"]
