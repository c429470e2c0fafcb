"""A fake control plane on the real wire channel, and agents configured to dial it, for the agent's tests."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any, Callable

from agent_helpers import fake_plan, free_port

from llmgw.agent import discovery, procs
from llmgw.agent.agent import Agent
from llmgw.agent.discovery.fabric import Fabric
from llmgw.agent.discovery.gpus import Gpu
from llmgw.config.agent import AgentConfig
from llmgw.config.units import Duration
from llmgw.plugins import hookimpl
from llmgw.plugins.manager import load_plugins
from llmgw.plugins.types import Engine, LaunchPlan, LaunchSpec
from llmgw.wire import messages as wire
from llmgw.wire.channel import AgentEndpoint


class FakeControlPlane:
    """Takes agents on loopback without TLS, keeps every message, sends what a test tells it to."""

    def __init__(self, heartbeat_interval: float = 0.2, welcome: dict[str, Any] | None = None) -> None:
        self.welcome = dict(welcome or {})  #: more fields of the Welcome (mirror, control_planes)
        self.endpoint = AgentEndpoint(self._on_session, insecure=True, heartbeat_interval=heartbeat_interval,
                                      welcome_extra=lambda reg: self.welcome)
        self.registers: list[wire.Register] = []
        self.received: list[Any] = []
        self._changed = asyncio.Condition()
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> FakeControlPlane:
        self.port = await self.endpoint.start("127.0.0.1", 0)
        return self

    async def stop(self) -> None:
        await self.endpoint.stop()

    async def _on_session(self, session) -> None:
        async with self._changed:
            self.registers.append(session.register)
            self._changed.notify_all()
        async for msg in session:
            async with self._changed:
                self.received.append(msg)
                self._changed.notify_all()

    async def send(self, msg: Any, node: str = "node-1") -> None:
        await self.endpoint.sessions[node].send(msg)

    async def wait_for(self, predicate: Callable[[Any], bool], timeout: float = 20.0, *, start: int = 0) -> Any:
        """The first message received (from index `start`) that `predicate` accepts."""
        async def find() -> Any:
            async with self._changed:
                while True:
                    for msg in self.received[start:]:
                        if predicate(msg):
                            return msg
                    await self._changed.wait()
        return await asyncio.wait_for(find(), timeout)

    async def wait_registers(self, n: int, timeout: float = 20.0) -> wire.Register:
        async def wait() -> wire.Register:
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.registers) >= n)
                return self.registers[n - 1]
        return await asyncio.wait_for(wait(), timeout)

    async def status(self, shard_id: str, state: str, timeout: float = 30.0, start: int = 0) -> wire.ShardStatus:
        return await self.wait_for(
            lambda m: isinstance(m, wire.ShardStatus) and m.shard_id == shard_id and m.state == state, timeout,
            start=start)


def inventory(gpus: int = 0) -> discovery.Inventory:
    cards = tuple(Gpu(index=i, uuid=f"GPU-{i}", name="NVIDIA Test", pci_bus_id=f"0000:0{i}:00.0",
                      memory_total_mib=1024, gpu_class="test-1gb") for i in range(gpus))
    return discovery.Inventory(hostname="node-1", addresses=(), cpu=None, memory=None, disks=(), gpus=cards,
                               gpu_source="none" if not gpus else "nvml", gpu_source_detail="a test's",
                               driver_version=None, fabric=Fabric())


def make_agent(tmp: Path, cp: FakeControlPlane, *, gpus: int = 0, plugins: Any = None, **config: Any) -> Agent:
    first = free_port()
    # The test's Python may live where no other user can read it (pyenv under /root): engines run as the
    # agent here; tests/agent/test_agent_engine_user_slow.py starts them as llmgw-engine.
    config.setdefault("engine_user", "")
    cfg = AgentConfig(
        node_id="node-1", control_planes=[cp.address], insecure=True, state_dir=str(tmp / "state"),
        weights_dir=str(tmp / "weights"), engines_dir=str(tmp / "engines"), engine_host="127.0.0.1",
        engine_ports=f"{first}-{min(first + 40, 65535)}", heartbeat_interval=Duration(seconds=0.2),
        engine_start_timeout=Duration(seconds=30), labels={"llmgw.io/rack": "r1"}, **config,
    )

    async def discover(**_: Any) -> discovery.Inventory:
        return inventory(gpus)

    async def sensors(**_: Any) -> discovery.Sensors:
        return discovery.Sensors(gpus=(), gpu_source="none", memory_available_bytes=123, load_average=(0.5, 0.4, 0.3))

    return Agent(cfg, plugins=plugins or with_fake_engine(), discover_fn=discover, sensors_fn=sensors)


class FakeEngine(Engine):
    """The stand-in engine as a plugin: drains by its `fake:running` gauge."""

    name = "fake"
    devices = ("cpu",)
    metrics = {"fake:running": "running"}

    def __init__(self, running_file: str = "/nonexistent") -> None:
        self.running_file = running_file

    def plan(self, spec: LaunchSpec) -> LaunchPlan:
        plan = fake_plan(spec.port, *spec.args, key=spec.api_key, env={"FAKE_RUNNING": self.running_file})
        return LaunchPlan(argv=plan.argv, env={**spec.env, **plan.env}, metrics_path="/metrics")

    def version(self, binary: str | None = None) -> str:
        return "1.0"


class _FakePlugin:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    @hookimpl
    def llmgw_engines(self) -> list[Engine]:
        return [self.engine]


def with_fake_engine(running_file: str = "/nonexistent"):
    return load_plugins(extra=[("test-fake-engine", _FakePlugin(FakeEngine(running_file)))])


def kill_shards(*agents: Agent) -> None:
    """What a test leaves running dies with it."""
    for agent in agents:
        for shard in agent.supervisor.shards():
            if shard.ident is not None:
                procs.signal_group(shard.ident, signal.SIGKILL)
                procs.reap(shard.ident.pid)
