"""The control plane's side: adapters started with their base, and loaded on demand where room allows.

A replica's start names every adapter of its model (`StartShard.adapters`):
its agent fetches each as it fetches weights, and the engine loads them all
at start when the model's `max_adapters` is 0 (llama.cpp always). With
`max_adapters` N, a vLLM or sim replica starts holding none; the first
request for an adapter has the leader load it into a ready replica of the
base (`POST /v1/load_lora_adapter`, the path its agent reported), the one
holding fewest, when one holds fewer than N; else the adapter held longest
unused (no request in flight) is unloaded there first; else the request is
refused with a 503 that says so. A base with no replica running is started
first, as an on-demand model is.

An engine that restarted (or was told to unload) forgets the adapters
loaded on demand while the router still lists them: its 404 for one
(`reload_forgotten`, the router's Upstream.adapter_missing) marks the
adapter not held there and loads it into that replica again, and the
request is sent once more; a load that fails, or a second 404, takes the
adapter off that replica and answers the 503.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
import attrs

from llmgw.adapters import serving
from llmgw.adapters.names import adapter_names, full_name
from llmgw.obs import logs
from llmgw.router.errors import GatewayError
from llmgw.router.replicas import ReplicaSet
from llmgw.wire.messages import AdapterSource

log = logs.get("llmgw.adapters")

#: How long the engine may take to load one adapter.
LOAD_TIMEOUT = 120.0


class AdapterUnavailable(GatewayError):
    """No replica of the base can take the adapter now; the message says why."""

    def __init__(self, message: str) -> None:
        super().__init__(503, "adapter_unavailable", message)


def start_fields(model: Any) -> dict[str, Any]:
    """The StartShard fields of a model's adapters (none when it has none)."""
    if not model.adapters:
        return {}
    return {"adapters": tuple(AdapterSource(name=a.name, source=a.source, sha256=a.sha256, scale=a.scale)
                              for a in model.adapters),
            "max_adapters": model.max_adapters}


def publish_held(replicas: ReplicaSet, rec: Any, model: Any) -> None:
    """A ready replica is (again) in the router's set: so is each adapter it holds."""
    base = replicas.get(rec.id)
    if base is None or not model.adapters:
        return
    held = [a.name for a in rec.adapters if a.loaded]
    held += [n for n in serving.held_by(replicas, rec.id) if n not in held]
    serving.publish(replicas, base, model, held, rec.engine)


def split(catalog: Any, asked: str) -> tuple[str, str] | None:
    """(base model, adapter) when `asked` names an adapter of the catalog's valid models."""
    if asked in catalog:
        return None
    return adapter_names(m.config for m in catalog.models() if m.valid).get(asked)


def _pick(held: dict[str, list[str]], limit: int) -> str | None:
    """The replica with room, the one holding fewest first."""
    room = [rid for rid, names in held.items() if len(names) < limit]
    return min(room, key=lambda rid: (len(held[rid]), rid)) if room else None


class AdapterLoader:
    """Loads adapters into a control plane's running replicas; one load at a time per adapter."""

    def __init__(self, reconciler: Any) -> None:
        self.reconciler = reconciler
        self._locks: dict[str, asyncio.Lock] = {}

    async def ensure(self, base: str, adapter: str, timeout: float | None = None) -> None:
        full = full_name(base, adapter)
        lock = self._locks.setdefault(full, asyncio.Lock())
        async with asyncio.timeout(timeout), lock:
            if self.reconciler.replicas.replicas_for(full):
                return
            await self.reconciler.ensure_started(base, None)
            await self._load(base, adapter)

    async def _load(self, base: str, adapter: str) -> None:
        rec_ = self.reconciler
        cm = rec_.catalog.get(base)
        model = cm.config
        ready = [r for r in rec_.records.values() if r.model == cm.name and r.live and r.state == "ready"
                 and rec_.replicas.get(r.id) is not None]
        if not ready:
            raise AdapterUnavailable(f"no replica of {cm.name} is ready to load adapter {adapter!r}")
        fetched = [r for r in ready if any(a.name == adapter for a in r.adapters)]
        if not fetched:
            raise AdapterUnavailable(f"the replicas of {cm.name} were started before adapter {adapter!r} was "
                                     f"declared; restart them (llmgw ctl model restart {cm.name})")
        engine = rec_.engines.get(fetched[0].engine) if rec_.engines else None
        if model.max_adapters <= 0 or getattr(engine, "adapter_loading", "runtime") != "runtime":
            raise AdapterUnavailable(f"no replica of {cm.name} holds adapter {adapter!r}, and its engine loads "
                                     f"adapters only at start; restart them (llmgw ctl model restart {cm.name})")
        held = {r.id: serving.held_by(rec_.replicas, r.id) for r in fetched}
        target = _pick(held, model.max_adapters)
        if target is None:
            target = await self._make_room(held, cm.name, model.max_adapters)
        rec = rec_.records[target]
        path = next(a.path for a in rec.adapters if a.name == adapter)
        await self._call(rec.id, "load_lora_adapter", {"lora_name": adapter, "lora_path": path})
        rec.adapters = tuple(attrs.evolve(a, loaded=True) if a.name == adapter else a for a in rec.adapters)
        serving.publish(rec_.replicas, rec_.replicas.get(rec.id), model, [adapter], rec.engine)
        logs.event(log, "adapter loaded", model=cm.name, adapter=adapter, replica_id=rec.id, node_id=rec.node)

    async def reload(self, replica_id: str, adapter: str) -> None:
        """The engine of `replica_id` answered 404 for `adapter`: marked not held there, then loaded there again.
        AdapterUnavailable (the adapter taken off that replica) when that cannot be done."""
        rec_ = self.reconciler
        rec = rec_.records.get(replica_id)
        path = next((a.path for a in rec.adapters if a.name == adapter), None) if rec is not None else None
        if rec is None or path is None:
            self.forget(replica_id, adapter)
            raise AdapterUnavailable(f"replica {replica_id} does not hold adapter {adapter!r} any more, and it "
                                     f"cannot be loaded there again; try again shortly")
        lock = self._locks.setdefault(full_name(rec.model, adapter), asyncio.Lock())
        async with asyncio.timeout(LOAD_TIMEOUT), lock:
            self._mark(rec, adapter, loaded=False)
            logs.event(log, "adapter forgotten by its engine", logging.WARNING, model=rec.model, adapter=adapter,
                       replica_id=replica_id)
            try:
                await self._call(replica_id, "load_lora_adapter", {"lora_name": adapter, "lora_path": path})
            except AdapterUnavailable:
                self.forget(replica_id, adapter)
                raise
            self._mark(rec, adapter, loaded=True)
        logs.event(log, "adapter loaded again", model=rec.model, adapter=adapter, replica_id=replica_id)

    def forget(self, replica_id: str, adapter: str) -> None:
        """The adapter is no longer at that replica: the router stops sending it requests for it."""
        serving.withdraw(self.reconciler.replicas, replica_id, adapter)
        rec = self.reconciler.records.get(replica_id)
        if rec is not None:
            self._mark(rec, adapter, loaded=False)

    @staticmethod
    def _mark(rec: Any, adapter: str, *, loaded: bool) -> None:
        rec.adapters = tuple(attrs.evolve(a, loaded=loaded) if a.name == adapter else a for a in rec.adapters)

    async def _make_room(self, held: dict[str, list[str]], base: str, limit: int) -> str:
        """Unload the adapter unused longest with nothing in flight; AdapterUnavailable when every one is busy."""
        replicas = self.reconciler.replicas
        idle = [(r.last_chosen, rid, name) for rid, names in held.items() for name in names
                if (r := replicas.get(serving.adapter_replica_id(rid, name))) is not None and r.in_flight == 0]
        if not idle:
            raise AdapterUnavailable(f"every replica of {base} holds its max_adapters ({limit}) adapters, each "
                                     f"serving a request now; try again shortly, or raise max_adapters")
        _, rid, name = min(idle)
        serving.withdraw(replicas, rid, name)  # no new request goes to it while it is unloaded
        await self._call(rid, "unload_lora_adapter", {"lora_name": name})
        rec = self.reconciler.records[rid]
        rec.adapters = tuple(attrs.evolve(a, loaded=False) if a.name == name else a for a in rec.adapters)
        logs.event(log, "adapter unloaded to make room", model=base, adapter=name, replica_id=rid)
        return rid

    async def _call(self, replica_id: str, what: str, body: dict[str, str]) -> None:
        replica = self.reconciler.replicas.get(replica_id)
        if replica is None:
            raise AdapterUnavailable(f"replica {replica_id} went away while adapter {body['lora_name']!r} was "
                                     f"being loaded")
        headers = {"Authorization": f"Bearer {replica.api_key.reveal()}"} if replica.api_key is not None else {}
        started = time.monotonic()
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=LOAD_TIMEOUT)) as http:
                async with http.post(f"{replica.base_url}/{what}", json=body, headers=headers) as resp:
                    text = (await resp.text())[:500]
                    ok = resp.status == 200 or (what == "load_lora_adapter" and "already been loaded" in text)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise AdapterUnavailable(f"replica {replica_id} did not answer {what}: {type(exc).__name__}: "
                                     f"{exc}") from None
        if not ok:
            raise AdapterUnavailable(f"replica {replica_id} refused {what} of {body['lora_name']!r} "
                                     f"({resp.status}): {text}")
        log.info("%s %s at %s in %.2f s", what, body["lora_name"], replica_id, time.monotonic() - started)


def reload_forgotten(slot: Any):
    """The router's Upstream.adapter_missing for the control plane in `slot` (llmgw.control.wiring)."""

    async def missing(replica: Any, retried: bool) -> bool:
        plane = slot.plane
        base_id, _, adapter = replica.id.partition(serving.ID_SEPARATOR)
        if plane is None or plane.reconciler is None or not plane.leading or replica.body_fields.get("lora"):
            return False  # no control plane leads here (a standby: the leader's own router reloads it), llama.cpp
        loader = plane._adapter_loader()
        if retried:
            loader.forget(base_id, adapter)
            raise AdapterUnavailable(f"replica {base_id} answered 404 for adapter {adapter!r} even after loading "
                                     f"it again; it is not sent requests for it any more; try again shortly")
        try:
            await loader.reload(base_id, adapter)
        except TimeoutError:
            raise AdapterUnavailable(f"adapter {adapter!r} was not loaded into replica {base_id} again within "
                                     f"{LOAD_TIMEOUT:g}s; try again shortly") from None
        return True

    return missing


__all__ = ["AdapterLoader", "AdapterUnavailable", "publish_held", "reload_forgotten", "split", "start_fields"]
