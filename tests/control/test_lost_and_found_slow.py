"""A real agent, in process, whose heartbeats come late past the heartbeat window while its connection stays
open: the control plane marks the node lost, and when the heartbeats resume the node is ready again with its
running sim engine adopted, no second StartShard sent to it."""

from __future__ import annotations

import asyncio
import signal

import pytest

from llmgw.agent import discovery, procs
from llmgw.agent.agent import Agent
from llmgw.agent.discovery.fabric import Fabric
from llmgw.config.agent import AgentConfig
from llmgw.config.load import parse_server_config
from llmgw.config.units import Duration
from llmgw.control.service import ControlPlane
from llmgw.router.replicas import ReplicaSet
from llmgw.store import open_store
from llmgw.wire import messages as w

from .conftest import ENGINES
from .test_service import free_port, until

pytestmark = pytest.mark.slow


def real_agent(tmp_path, agent_port: int, late: asyncio.Event) -> Agent:
    first = free_port()
    cfg = AgentConfig(
        node_id="node-a", control_planes=[f"127.0.0.1:{agent_port}"], insecure=True,
        state_dir=str(tmp_path / "state"), weights_dir=str(tmp_path / "weights"),
        engines_dir=str(tmp_path / "engines"), engine_host="127.0.0.1", engine_user="",
        engine_ports=f"{first}-{min(first + 40, 65535)}", engine_start_timeout=Duration(seconds=30),
    )

    async def discover(**_):
        return discovery.Inventory(hostname="node-a", addresses=(), cpu=None, memory=None, disks=(), gpus=(),
                                   gpu_source="none", gpu_source_detail="a test's", driver_version=None,
                                   fabric=Fabric())

    async def sensors(**_):
        while late.is_set():  # the heartbeat waits: the connection stays open, nothing is said on it
            await asyncio.sleep(0.05)
        return discovery.Sensors(gpus=(), gpu_source="none", memory_available_bytes=8 << 30,
                                 load_average=(0.1, 0.1, 0.1))

    return Agent(cfg, discover_fn=discover, sensors_fn=sensors)


async def test_a_node_lost_on_late_heartbeats_comes_back_with_its_engine_adopted(tmp_path):
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    config = parse_server_config({
        "agent_listen": f"127.0.0.1:{free_port()}", "agent_insecure": True,
        "control": {"lease_ttl": "1200ms", "reconcile_interval": "200ms", "heartbeat_window": "1500ms"},
        "models": [{"name": "tiny", "engine": "sim", "profiles": [{"name": "cpu"}], "scaling": {"min": 1, "max": 1}}],
    })
    replicas = ReplicaSet()
    plane = ControlPlane(config, store, replicas, engines=ENGINES, holder="cp-1", heartbeat_interval=0.2)
    late = asyncio.Event()
    agent = real_agent(tmp_path, int(config.agent_listen.rpartition(":")[2]), late)
    sent: list[tuple[str, object]] = []
    task = None
    try:
        await plane.start()
        assert await plane.leadership.wait_leading(3)
        rec = plane.reconciler
        original = rec.link.send

        async def keep(node_id, message):
            sent.append((node_id, message))
            await original(node_id, message)

        rec.link.send = keep
        task = asyncio.create_task(agent.run())
        await until(lambda: replicas.replicas_for("tiny"), timeout=30, what="tiny ready on node-a")
        [first] = replicas.replicas_for("tiny")
        starts = [m for _, m in sent if isinstance(m, w.StartShard)]
        assert [m.shard_id for m in starts] == [first.id]

        late.set()  # heartbeats stop past the window; the connection stays open
        await until(lambda: plane.inventory.get("node-a").state() == "lost", timeout=10, what="node-a lost")
        assert "node-a" in plane.endpoint.sessions and replicas.replicas_for("tiny") == []

        late.clear()  # they resume on the same connection
        await until(lambda: plane.inventory.get("node-a").state() == "ready", timeout=10, what="node-a back")
        await until(lambda: [r.id for r in replicas.replicas_for("tiny")] == [first.id], timeout=10,
                    what="its engine adopted and serving again")
        await asyncio.sleep(0.6)  # passes go by: nothing is started, the engine stays
        assert [m for _, m in sent if isinstance(m, w.StartShard)] == starts
        assert [s.shard_id for s in agent.supervisor.shards()] == [first.id]
    finally:
        if task is not None and not task.done():
            await agent.stop()
            await asyncio.wait_for(task, 10)
        for shard in agent.supervisor.shards():
            if shard.ident is not None:
                procs.signal_group(shard.ident, signal.SIGKILL)
                procs.reap(shard.ident.pid)
        await plane.stop()
        await store.close()
