"""Pieces for the control plane's tests: synthetic nodes and models, fake engines,
a fake agent side the reconciler sends to, and a clock moved by hand."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from llmgw.config.server import ControlConfig
from llmgw.config.units import Duration
from llmgw.control.catalog import Catalog, parse_model
from llmgw.control.engine_keys import EngineKeys
from llmgw.control.inventory import Inventory
from llmgw.control.reconciler import NodeUnreachable, Reconciler
from llmgw.plugins.engine_args import ArgPolicy
from llmgw.plugins.types import Engine, LaunchPlan
from llmgw.router.replicas import ReplicaSet
from llmgw.wire import messages as w

GiB = 1 << 30


class FakeEngine(Engine):
    def __init__(self, name: str, devices: tuple[str, ...], denied: Sequence[str] = (), multi_node: bool = False) -> None:
        self.name = name  # type: ignore[misc]
        self.devices = devices  # type: ignore[misc]
        self.multi_node = multi_node  # type: ignore[misc]
        self._denied = tuple(denied)

    def validate(self, args, env):
        policy = ArgPolicy(self.name, flags={"--max-num-seqs": True}, refused=dict.fromkeys(self._denied, "is unsafe"),
                           env=("CUDA_*", "VLLM_*"))
        return policy.problems(args, env)

    def plan(self, spec):  # pragma: no cover - the control plane never launches
        return LaunchPlan(argv=["true"], env={})


ENGINES: dict[str, Engine] = {
    "sim": FakeEngine("sim", ("cpu", "gpu")),
    "vllm": FakeEngine("vllm", ("gpu",), denied=("--trust-remote-code",), multi_node=True),
    "llamacpp": FakeEngine("llamacpp", ("cpu", "gpu")),
}


class Clock:
    """A monotonic clock moved by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def gpus(n: int, gpu_class: str = "h100-80gb", *, failed: Sequence[int] = ()) -> tuple[w.GpuInfo, ...]:
    return tuple(
        w.GpuInfo(index=i, gpu_class=gpu_class, name=f"NVIDIA {gpu_class}", memory_total_bytes=80 * GiB,
                  health="failed" if i in failed else "ok")
        for i in range(n)
    )


def register(
    node_id: str,
    *,
    gpu: tuple[w.GpuInfo, ...] = (),
    cores: int = 32,
    memory: int = 256 * GiB,
    engines: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    weights: Sequence[str] = (),
    shards: Sequence[w.RunningShard] = (),
    address: str | None = None,
) -> w.Register:
    return w.Register(
        node_id=node_id,
        hostname=node_id,
        addresses=(address if address is not None else f"10.0.0.{sum(map(ord, node_id)) % 250 + 1}",),
        inventory=w.Inventory(cpu=w.CpuInfo(cores=cores), memory_total_bytes=memory,
                              memory_available_bytes=memory, gpus=gpu),
        labels=dict(labels or {}),
        engines=dict(engines if engines is not None else {"sim": "1", "vllm": "0.9", "llamacpp": "b1"}),
        weights=tuple(w.WeightsPresent(model=m) for m in weights),
        shards=tuple(shards),
    )


def model(name: str = "qwen", **spec: Any):
    """A model as server.yaml would declare it; `profiles` defaults to one sim profile on CPUs."""
    spec.setdefault("engine", "sim")
    spec.setdefault("profiles", [{"name": "default"}])
    return parse_model({"name": name, **spec})


def control(**changes: Any) -> ControlConfig:
    base = {"heartbeat_window": Duration(seconds=15), "reconcile_interval": Duration(seconds=5),
            "lease_ttl": Duration(seconds=15), "park_after": 3}
    backoff = changes.pop("backoff", None)
    base.update(changes)
    config = ControlConfig(**base)
    if backoff is not None:
        import attrs

        from llmgw.config.server import BackoffConfig

        config = attrs.evolve(config, backoff=BackoffConfig(initial=Duration(seconds=backoff[0]),
                                                            max=Duration(seconds=backoff[1])))
    return config


class FakeAgents:
    """The agents' side: records what is sent to each node; nodes not connected are unreachable."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.connected: set[str] = set()

    async def send(self, node_id: str, message: Any) -> None:
        if node_id not in self.connected:
            raise NodeUnreachable(f"{node_id} is not connected")
        self.sent.append((node_id, message))

    def take(self, kind: type | None = None) -> list[tuple[str, Any]]:
        """What was sent since the last take (of one message type, or all)."""
        taken = [(n, m) for n, m in self.sent if kind is None or isinstance(m, kind)]
        self.sent = [(n, m) for n, m in self.sent if (n, m) not in taken]
        return taken

    def starts(self) -> list[tuple[str, w.StartShard]]:
        return self.take(w.StartShard)

    def stops(self) -> list[tuple[str, w.StopShard]]:
        return self.take(w.StopShard)


class Harness:
    """A reconciler over fake agents, a fake clock and a real replica set."""

    def __init__(self, models: Sequence, *, store=None, config: ControlConfig | None = None) -> None:
        self.clock = Clock()
        self._ports: dict[str, int] = {}
        self.agents = FakeAgents()
        self.replicas = ReplicaSet()
        self.keys = EngineKeys(b"k" * 32)
        self.inventory = Inventory(clock=self.clock)
        self.catalog = Catalog(list(models), store, ENGINES)
        self.rec = Reconciler(
            config or control(), self.catalog, self.inventory, self.agents, self.replicas, self.keys,
            engines=ENGINES, clock=self.clock, wall_clock=lambda: dt.datetime(2025, 3, 10, tzinfo=dt.UTC).timestamp(),
        )

    def connect(self, reg: w.Register) -> None:
        self.agents.connected.add(reg.node_id)
        self.rec.node_registered(reg, peer_host="127.0.0.1")

    def disconnect(self, node_id: str) -> None:
        self.agents.connected.discard(node_id)
        self.rec.node_disconnected(node_id, "gone")

    def status(self, node_id: str, shard_id: str, state: str, **fields: Any) -> None:
        self.rec.handle(node_id, w.ShardStatus(shard_id=shard_id, state=state, **fields))

    def heartbeat(self, *node_ids: str) -> None:
        for node_id in node_ids:
            self.rec.handle(node_id, w.Heartbeat(seq=1))

    async def tick(self, seconds: float = 0.0) -> None:
        """Time passes (connected agents send heartbeats meanwhile), then one pass."""
        self.clock.advance(seconds)
        self.heartbeat(*sorted(self.agents.connected))
        await self.rec.reconcile_once()

    async def start_ready(self) -> list[tuple[str, w.StartShard]]:
        """One pass; every StartShard it sends is answered ready."""
        await self.tick()
        started = self.agents.starts()
        for node_id, msg in started:
            self.status(node_id, msg.shard_id, "ready", port=self.port_for(msg))
        return started

    def port_for(self, msg: w.StartShard) -> int:
        """The port a fake agent gives a shard (the control plane leaves the choice to it)."""
        return self._ports.setdefault(msg.shard_id, 20000 + len(self._ports))


@pytest.fixture
def harness_factory():
    return Harness


@pytest.fixture(params=["sqlite", "postgres"])
def store_dsn(request: pytest.FixtureRequest, tmp_path):
    """A fresh store's address on each backend (PostgreSQL from the session's server)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/store.db"
        return
    server = request.getfixturevalue("postgres_server")
    name = server.create_database()
    try:
        yield server.dsn(name)
    finally:
        server.drop_database(name)


@pytest.fixture
async def sqlite_store(tmp_path):
    from llmgw.store import open_store

    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    try:
        yield store
    finally:
        await store.close()
