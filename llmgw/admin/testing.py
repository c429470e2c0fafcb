"""For tests of the admin API and its clients: a fake cluster and a live server.

`FakeCluster` implements the `Cluster` protocol in memory: nodes given, a
catalog checked the way server.yaml checks models, and one replica per
wanted copy on the first node not cordoned. It is what the console's and
ctl's tests steer when no control plane runs.

`LiveAdmin` runs the admin API in a thread of its own (its own event loop)
on 127.0.0.1 and a free port, on a SQLite store in a folder, so a
synchronous client (`llmgw ctl`, schemathesis) can call it from the test.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import socket
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import attrs

from llmgw.admin.facility_types import FacilityDomain, FacilityHold, FacilityReport, HoldCreate
from llmgw.admin.cluster_api import ClusterConflict, ClusterInvalid, ClusterNotFound
from llmgw.admin.engine_types import EngineInstallStarted, EngineRow
from llmgw.admin.cluster_types import (
    ClusterStatus,
    GpuInfo,
    JobInfo,
    JobStep,
    Leadership,
    ModelDetail,
    ModelInfo,
    ModelUpdateList,
    NodeInfo,
    PlacementDecision,
    PlacementExplanation,
    ReplicaInfo,
    RestartResult,
    ScaleChange,
    ScalingInfo,
)
from llmgw.admin.fields import UNSET
from llmgw.config.errors import ConfigError
from llmgw.config.load import make_converter, parse_server_config
from llmgw.config.server import ModelConfig, ServerConfig

__all__ = ["FakeCluster", "LiveAdmin", "free_port", "gpu_node"]


def gpu_node(node_id: str, gpus: int = 2, gpu_class: str = "h100-80g") -> NodeInfo:
    return NodeInfo(id=node_id, state="ready", hostname=node_id, address="10.0.0.1", cores=32,
                    memory_total_bytes=256 << 30, memory_available_bytes=200 << 30,
                    engines={"sim": "1.0"},
                    gpus=[GpuInfo(index=i, gpu_class=gpu_class, name="NVIDIA H100", memory_total_bytes=80 << 30)
                          for i in range(gpus)])


class FakeCluster:
    """The Cluster protocol in memory (see the module's doc). `calls` records (method, args) of changes."""

    def __init__(self, nodes: list[NodeInfo] | None = None, models: list[Mapping[str, Any]] | None = None) -> None:
        self._nodes: dict[str, NodeInfo] = {n.id: n for n in (nodes or [gpu_node("gpu-a-01")])}
        self._models: dict[str, tuple[ModelConfig, str]] = {}
        self._replicas: dict[str, ReplicaInfo] = {}
        self._ids = itertools.count(1)
        self._conv = make_converter()
        self.calls: list[tuple[str, tuple]] = []
        #: every job, oldest first: one, already done, per add, scale and restart; a test may add its own
        self.job_list: list[JobInfo] = []
        #: what `model_updates` answers; a test sets rows (and checks count the calls with check=True)
        self.updates = ModelUpdateList(models=[], interval_s=21600.0, via="mirror API")
        #: what `node_logs` answers, by (node, replica id or "" for the agent's own log); a test sets lines
        self.logs: dict[tuple[str, str], list[str]] = {}
        for spec in models or []:
            config = self._parse(spec)
            self._models[config.name] = (config, "file")
            self._reconcile(config.name)

    # ---- helpers
    def _parse(self, spec: Mapping[str, Any]) -> ModelConfig:
        try:
            return parse_server_config({"models": [dict(spec)]}, "model").models[0]
        except ConfigError as exc:
            problems = [p.removeprefix("models[0].") for p in exc.problems]
            raise ClusterInvalid("the model cannot be added: " + "; ".join(problems), problems) from None

    def _find(self, name: str) -> ModelConfig:
        for config, _ in self._models.values():
            if config.name == name or name in config.aliases:
                return config
        raise ClusterNotFound(f"no model called {name!r} is in the catalog")

    def _node(self, node_id: str) -> NodeInfo:
        node = self._nodes.get(node_id)
        if node is None:
            raise ClusterNotFound(f"no node called {node_id!r} is known")
        return node

    def _reconcile(self, name: str) -> None:
        config, _ = self._models[name]
        mine = [r for r in self._replicas.values() if r.model == name]
        wanted = 0 if config.scaling.on_demand else min(config.scaling.min, config.scaling.max)
        for extra in mine[wanted:]:
            del self._replicas[extra.id]
        ready = [n for n in self._nodes.values() if n.state == "ready"]
        for _ in range(wanted - len(mine)):
            if not ready:
                break
            rid = f"{name}-{next(self._ids):04d}"
            self._replicas[rid] = ReplicaInfo(id=rid, model=name, node=ready[0].id, profile="default",
                                              engine=config.engine or "sim", state="ready", gpus=[0])
        self._refresh_nodes()

    def _refresh_nodes(self) -> None:
        for node_id, node in self._nodes.items():
            self._nodes[node_id] = attrs.evolve(
                node, replicas=sorted(r.id for r in self._replicas.values() if r.node == node_id))

    def _info(self, config: ModelConfig, origin: str) -> ModelInfo:
        ready = sum(1 for r in self._replicas.values() if r.model == config.name)
        wanted = 0 if config.scaling.on_demand else min(config.scaling.min, config.scaling.max)
        status = "stopped" if wanted == 0 and ready == 0 else ("ready" if ready >= wanted else "unplaced")
        s = config.scaling
        return ModelInfo(name=config.name, origin=origin, model_class=config.class_, owner=config.owner,
                         status=status, reason=f"{ready} of {wanted} ready", ready=ready, wanted=wanted,
                         scaling=ScalingInfo(min=s.min, max=s.max, on_demand=s.on_demand,
                                             idle_timeout=str(s.idle_timeout)))

    def _detail(self, name: str) -> ModelDetail:
        config, origin = self._models[name]
        latest = next((j.id for j in reversed(self.job_list) if j.model == name), None)
        return ModelDetail(model=self._info(config, origin), spec=self._conv.unstructure(config),
                           replicas=[r for r in self._replicas.values() if r.model == name], job=latest)

    def _job(self, model: str, kind: str, actor: str) -> JobInfo:
        """A job for a change, done at once (the fake reconciles as it changes)."""
        now = dt.datetime.now(dt.UTC)
        ready = sum(1 for r in self._replicas.values() if r.model == model)
        steps = [JobStep(at=now, text=f"{actor} asked to {kind} {model}"),
                 JobStep(at=now, text=f"done: {ready} ready")]
        job = JobInfo(id=f"job-{len(self.job_list) + 1}", model=model, kind=kind, by=actor, state="done",
                      now=steps[-1].text, started=now, ended=now, steps=steps)
        self.job_list.append(job)
        return job

    # ---- the protocol
    async def status(self) -> ClusterStatus:
        return ClusterStatus(leadership=Leadership(leading=True, self_name="fake", holder="fake", epoch=1))

    async def nodes(self) -> list[NodeInfo]:
        return [self._nodes[n] for n in sorted(self._nodes)]

    async def cordon(self, node_id: str, *, reason: str, actor: str) -> NodeInfo:
        node = self._node(node_id)
        self.calls.append(("cordon", (node_id, reason, actor)))
        self._nodes[node_id] = attrs.evolve(node, state="cordoned", cordoned=True,
                                            cordon_reason=reason or "cordoned by an operator")
        return self._nodes[node_id]

    async def uncordon(self, node_id: str, *, actor: str) -> NodeInfo:
        node = self._node(node_id)
        self.calls.append(("uncordon", (node_id, actor)))
        self._nodes[node_id] = attrs.evolve(node, state="ready", cordoned=False, cordon_reason="", draining=False)
        return self._nodes[node_id]

    async def drain(self, node_id: str, *, reason: str, actor: str) -> NodeInfo:
        node = self._node(node_id)
        self.calls.append(("drain", (node_id, reason, actor)))
        self._nodes[node_id] = attrs.evolve(node, state="draining", cordoned=True, draining=True,
                                            cordon_reason=reason or "draining")
        return self._nodes[node_id]

    async def remove_node(self, node_id: str, *, actor: str) -> NodeInfo:
        node = self._node(node_id)
        if node.replicas:
            raise ClusterConflict(f"{node_id} still runs {len(node.replicas)} replica(s); drain it first")
        self.calls.append(("remove_node", (node_id, actor)))
        return self._nodes.pop(node_id)

    async def set_labels(self, node_id: str, labels: Mapping[str, str | None], *, actor: str) -> NodeInfo:
        node = self._node(node_id)
        merged = {**node.labels, **{k: v for k, v in labels.items() if v is not None}}
        for k, v in labels.items():
            if v is None:
                merged.pop(k, None)
        self._nodes[node_id] = attrs.evolve(node, labels=merged)
        return self._nodes[node_id]

    async def facility(self) -> FacilityReport:
        from llmgw.control.facility import domains_of

        members: dict[str, list[str]] = {}
        for node in self._nodes.values():
            for domain in domains_of(node.id, node.labels)[:-1]:
                members.setdefault(domain, []).append(node.id)
        holds = getattr(self, "_holds", {})
        return FacilityReport(
            domains=[FacilityDomain(domain=d, nodes=sorted(n), held=holds[d].reason if d in holds else "")
                     for d, n in sorted(members.items())],
            holds=list(holds.values()))

    async def hold(self, body: HoldCreate, *, actor: str) -> FacilityHold:
        import datetime as _dt
        import time as _time

        from llmgw.control.facility import future_time, parse_domain

        try:
            parse_domain(body.domain)
            until = future_time(body.until, _time.time()) if body.until is not None else None
        except ValueError as exc:
            raise ClusterInvalid(str(exc), [str(exc)]) from None
        iso = _dt.datetime.fromtimestamp(until, _dt.timezone.utc).isoformat() if until is not None else None
        self.calls.append(("hold", (body.domain, body.reason, actor)))
        self._holds = {**getattr(self, "_holds", {}), body.domain: FacilityHold(
            domain=body.domain, reason=body.reason, until=iso, drain=body.drain, actor=actor)}
        return self._holds[body.domain]

    async def release(self, domain: str, *, actor: str) -> FacilityHold:
        holds = getattr(self, "_holds", {})
        if domain not in holds:
            raise ClusterNotFound(f"{domain} is not held (GET /api/v1/facility lists the holds)")
        self.calls.append(("release", (domain, actor)))
        return attrs.evolve(holds.pop(domain), active=False)

    async def node_logs(self, node_id: str, *, replica: str, lines: int) -> list[str]:
        node = self._node(node_id)
        if node.state in ("disconnected", "lost"):
            raise ClusterConflict(f"{node_id}'s agent is not connected to the leader now ({node.state}); its log "
                                  "can be read once it connects again")
        if replica and (node_id, replica) not in self.logs and replica not in node.replicas:
            return [f"no shard {replica} on this node, and no log of one"]
        default = [f'ts=2025-03-10T12:00:0{i}.000Z level=info logger=llmgw.agent msg="{text}"'
                   for i, text in enumerate(("agent started", f"registered with the control plane as {node_id}"))]
        return list(self.logs.get((node_id, replica), [] if replica else default))[-lines:]

    async def models(self) -> list[ModelInfo]:
        return [self._info(c, o) for c, o in (self._models[n] for n in sorted(self._models))]

    async def model(self, name: str) -> ModelDetail:
        return self._detail(self._find(name).name)

    async def add_model(self, spec: Mapping[str, Any], *, replace: bool, actor: str) -> ModelDetail:
        config = self._parse(spec)
        if not config.profiles:
            raise ClusterInvalid("the model cannot be added: profiles: give at least one",
                                 ["profiles: give at least one"])
        current = self._models.get(config.name)
        if current is not None and (current[1] == "file" or not replace):
            where = "server.yaml; change it there" if current[1] == "file" else "the catalog; pass replace"
            raise ClusterConflict(f"a model called {config.name!r} is already in {where}")
        self.calls.append(("add_model", (config.name, actor)))
        self._models[config.name] = (config, "store")
        self._reconcile(config.name)
        self._job(config.name, "change" if current is not None else "add", actor)
        return self._detail(config.name)

    async def remove_model(self, name: str, *, actor: str) -> ModelDetail:
        config = self._find(name)
        if self._models[config.name][1] == "file":
            raise ClusterConflict(f"{config.name} is declared in server.yaml; remove it there")
        detail = self._detail(config.name)
        del self._models[config.name]
        for rid in [r.id for r in self._replicas.values() if r.model == config.name]:
            del self._replicas[rid]
        self._refresh_nodes()
        self.calls.append(("remove_model", (config.name, actor)))
        return detail

    async def scale_model(self, name: str, change: ScaleChange, *, actor: str) -> ModelDetail:
        config = self._find(name)
        s = config.scaling
        new = {"min": s.min, "max": s.max, "on_demand": s.on_demand, "idle_timeout": str(s.idle_timeout)}
        new.update({k: getattr(change, k) for k in new if getattr(change, k) is not UNSET})
        problems = []
        if new["min"] < 0 or new["max"] < 0:
            problems.append("min and max: 0 or more")
        elif new["max"] and new["min"] > new["max"]:
            problems.append(f"min: {new['min']} is more than max ({new['max']})")
        if new["on_demand"] and new["min"]:
            problems.append("on_demand: min must be 0 for a model loaded on demand")
        if problems:
            raise ClusterInvalid(f"scaling of {config.name}: " + "; ".join(problems), problems)
        spec = self._conv.unstructure(config)
        spec["scaling"] = {**new, "max": new["max"] or 1}
        scaled = self._parse(spec)
        scaled = attrs.evolve(scaled, scaling=attrs.evolve(scaled.scaling, max=new["max"]))
        self._models[config.name] = (scaled, self._models[config.name][1])
        self.calls.append(("scale_model", (config.name, new, actor)))
        self._reconcile(config.name)
        self._job(config.name, "scale", actor)
        return self._detail(config.name)

    async def restart_model(self, name: str, *, in_place: bool, actor: str) -> RestartResult:
        config = self._find(name)
        self.calls.append(("restart_model", (config.name, in_place, actor)))
        return RestartResult(model=config.name,
                             replicas=sorted(r.id for r in self._replicas.values() if r.model == config.name),
                             job=self._job(config.name, "restart", actor).id)

    async def retry_model(self, name: str, *, actor: str) -> ModelDetail:
        config = self._find(name)
        self.calls.append(("retry_model", (config.name, actor)))
        self._job(config.name, "retry", actor)
        return self._detail(config.name)

    async def explain_placement(self, name: str) -> PlacementExplanation:
        config = self._find(name)
        _, origin = self._models[config.name]
        rejections = [f"{n.id}: {n.state}" for n in self._nodes.values() if n.state != "ready"]
        ready = [n.id for n in self._nodes.values() if n.state == "ready"]
        decision = PlacementDecision(placed_on=ready[0] if ready else None, gpus=[0] if ready else [],
                                     why="the most free GPUs" if ready else "",
                                     summary=f"on {ready[0]}" if ready else "no node can run it",
                                     rejections=rejections)
        return PlacementExplanation(model=self._info(config, origin),
                                    replicas=[r for r in self._replicas.values() if r.model == config.name],
                                    next_placement=decision)

    async def model_updates(self, *, check: bool) -> ModelUpdateList:
        if check:
            self.calls.append(("model_updates", (check,)))
        return self.updates

    async def replicas(self) -> list[ReplicaInfo]:
        return sorted(self._replicas.values(), key=lambda r: (r.model, r.id))

    async def restart_replica(self, replica_id: str, *, in_place: bool, actor: str) -> RestartResult:
        replica = self._replicas.get(replica_id)
        if replica is None:
            raise ClusterNotFound(f"no replica called {replica_id!r} runs on this cluster: "
                                  "`llmgw ctl replicas` lists them")
        self.calls.append(("restart_replica", (replica_id, in_place, actor)))
        return RestartResult(model=replica.model, replicas=[replica_id],
                             job=self._job(replica.model, "restart", actor).id)

    async def jobs(self, *, state: str | None, model: str | None) -> list[JobInfo]:
        return [j for j in reversed(self.job_list) if state in (None, j.state) and model in (None, j.model)]

    async def job(self, job_id: str) -> JobInfo:
        found = next((j for j in self.job_list if j.id == job_id), None)
        if found is None:
            raise ClusterNotFound(f"no job called {job_id!r}: `llmgw ctl jobs` lists them")
        return found

    async def engines(self, *, node: str | None) -> list[EngineRow]:
        if node is not None and node not in self._nodes:
            raise ClusterNotFound(f"no node called {node!r} is known; `llmgw ctl nodes` lists them")
        return [EngineRow(node=n.id, engine=e, version=v, default=True) for n in self._nodes.values()
                for e, v in sorted(n.engines.items()) if node in (None, n.id)]

    async def install_engine(self, node_id: str, engine: str, version: str, *, actor: str) -> EngineInstallStarted:
        """Installed at once: the node's engines gain it and a job, done, says so."""
        if node_id not in self._nodes:
            raise ClusterNotFound(f"no node called {node_id!r} is known; `llmgw ctl nodes` lists them")
        self.calls.append(("install_engine", (node_id, engine, version, actor)))
        n = self._nodes[node_id]
        self._nodes[node_id] = attrs.evolve(n, engines={**n.engines, engine: version or "1.0"})
        job = self._job(f"{engine} on {node_id}", "engine", actor)
        return EngineInstallStarted(node=node_id, engine=engine, version=version, job=job.id)


# ---------------------------------------------------------------- a live server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveAdmin:
    """The admin API on 127.0.0.1:PORT in a thread, with a SQLite store in `folder`.

        with LiveAdmin(tmp_path, cluster=FakeCluster()) as live:
            requests.get(live.url + "/api/v1/summary", headers=live.headers())
            live.run(live.store.append_audit(...))   # a coroutine, on the server's loop
    """

    TOKEN = "test-admin-token-0123456789"

    def __init__(self, folder: Any, *, cluster: Any = None, config: ServerConfig | None = None,
                 clock: Callable[[], Any] | None = None, config_path: Any = None) -> None:
        self.folder = folder
        self.cluster = cluster
        #: a server.yaml the API edits (/server-config); `config` is read from it when not given
        self.config_path = str(config_path) if config_path is not None else None
        if config is None and self.config_path is not None:
            from llmgw.config.load import load_server_config

            config = load_server_config(self.config_path)
        self.config = config or ServerConfig()
        self.clock = clock
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.store: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.TOKEN}", "Content-Type": "application/json", **extra}

    def __enter__(self) -> LiveAdmin:
        self._thread = threading.Thread(target=self._main, name="llmgw-admin-test", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(30)

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine on the server's loop (the store is bound to it) and return its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        from llmgw.admin.app import make_admin_app, serve_admin
        from llmgw.store import open_store

        try:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self.store = await open_store(f"sqlite:///{self.folder}/admin.db")
            app = make_admin_app(self.config, self.store, cluster=self.cluster, token=self.TOKEN, clock=self.clock,
                                 config_path=self.config_path)
            async with serve_admin(app, "127.0.0.1", self.port):
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            self._error = exc
            self._ready.set()
        finally:
            if self.store is not None:
                await self.store.close()
