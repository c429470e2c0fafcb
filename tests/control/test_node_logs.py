"""A node's log through the control plane: a real agent connected over the agent protocol answers
RequestLogs with LogChunks; unknown nodes, agents gone, agents silent and standbys are refused by name."""

from __future__ import annotations

import asyncio
import logging

import pytest

from llmgw.admin.cluster_api import ClusterConflict, ClusterNotFound, ClusterTimeout, ClusterUnavailable
from llmgw.agent import discovery
from llmgw.agent.agent import Agent
from llmgw.agent.discovery.fabric import Fabric
from llmgw.config.agent import AgentConfig
from llmgw.config.load import parse_server_config
from llmgw.config.units import Duration
from llmgw.control.admin_cluster import AdminCluster
from llmgw.control.node_logs import LogRequests, NodeNotAnswering, NodeNotConnected, UnknownNode
from llmgw.control.service import ControlPlane, ControlPlaneSlot
from llmgw.router.replicas import ReplicaSet
from llmgw.store import open_store
from llmgw.wire import messages as w

from .conftest import ENGINES
from .test_service import FakeAgent, free_port, server_config, until

HF_TOKEN = "hf_" + "a1b2c3d4e5" * 3


def no_models_config():
    return parse_server_config({"agent_listen": f"127.0.0.1:{free_port()}", "agent_insecure": True,
                                "control": {"lease_ttl": "1200ms", "reconcile_interval": "200ms"}})


def real_agent(tmp_path, port: int) -> Agent:
    """llmgw's own agent, on loopback without TLS, with a machine of no GPUs."""
    first = free_port()
    config = AgentConfig(
        node_id="node-1", control_planes=[f"127.0.0.1:{port}"], insecure=True, state_dir=str(tmp_path / "state"),
        weights_dir=str(tmp_path / "weights"), engines_dir=str(tmp_path / "engines"), engine_host="127.0.0.1", engine_user="",
        engine_ports=f"{first}-{first + 10}", heartbeat_interval=Duration(seconds=0.2),
    )

    async def discover(**_):
        return discovery.Inventory(hostname="node-1", addresses=(), cpu=None, memory=None, disks=(), gpus=(),
                                   gpu_source="none", gpu_source_detail="a test's", driver_version=None,
                                   fabric=Fabric())

    async def sensors(**_):
        return discovery.Sensors(gpus=(), gpu_source="none", memory_available_bytes=1 << 30,
                                 load_average=(0.1, 0.1, 0.1))

    return Agent(config, discover_fn=discover, sensors_fn=sensors)


@pytest.fixture
async def plane(tmp_path):
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    cp = ControlPlane(no_models_config(), store, ReplicaSet(), engines=ENGINES, holder="cp-1")
    await cp.start()
    assert await cp.leadership.wait_leading(3)
    try:
        yield cp
    finally:
        await cp.stop()
        await store.close()


async def test_the_leader_reads_a_real_agents_own_log_and_a_replicas_engine_log(plane, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="llmgw")  # what `llmgw agent` logs by default
    agent = real_agent(tmp_path, plane.agent_port)
    task = asyncio.create_task(agent.run())
    try:
        await until(lambda: "node-1" in plane.endpoint.sessions, what="the agent's session")
        logging.getLogger("llmgw.agent").warning("fetching with %s", HF_TOKEN)

        lines = await plane.node_logs("node-1", lines=50)
        assert any('msg="connected to a control plane"' in line for line in lines), lines
        [warned] = [line for line in lines if "fetching with" in line]
        assert "level=warning" in warned and HF_TOKEN not in warned and "hf_[redacted]" in warned
        assert len(await plane.node_logs("node-1", lines=1)) == 1
        assert len(plane.log_requests) == 0

        # A replica's engine log, as the agent keeps it on disk (here one that exited before).
        logs_dir = tmp_path / "state" / "logs"
        logs_dir.mkdir(parents=True, exist_ok=True)
        (logs_dir / "qwen-1a2b.log").write_text(
            "\x1b[32mINFO\x1b[0m 03-10 12:00:00 [api_server.py:1] args: --api-key llmgw-engine-0123456789abcdef0123\n"
            "ERROR 03-10 12:00:05 [core.py:1] CUDA out of memory\n")
        engine = await plane.node_logs("node-1", replica="qwen-1a2b")
        assert engine == ["INFO 03-10 12:00:00 [api_server.py:1] args: --api-key llmgw-[redacted]",
                          "ERROR 03-10 12:00:05 [core.py:1] CUDA out of memory"]
        assert await plane.node_logs("node-1", replica="gone-0000") == [
            "no shard gone-0000 on this node, and no log of one"]

        # Through the admin API's adapter: the same lines; refusals as its exceptions.
        cluster = AdminCluster(_slot(plane))
        assert (await cluster.node_logs("node-1", replica="qwen-1a2b", lines=1))[-1].endswith("out of memory")
        with pytest.raises(ClusterNotFound, match="no node called 'ghost'"):
            await cluster.node_logs("ghost", replica="", lines=10)
        with pytest.raises(UnknownNode, match="no node called 'ghost'"):
            await plane.node_logs("ghost")
        with pytest.raises(ValueError, match="replica: '../x' is not a replica id"):
            await plane.node_logs("node-1", replica="../x")
    finally:
        await agent.stop()
        await asyncio.wait_for(task, 10)

    await until(lambda: "node-1" not in plane.endpoint.sessions, what="the agent's session to end")
    with pytest.raises(NodeNotConnected, match="node-1's agent is not connected to the leader now"):
        await plane.node_logs("node-1")
    with pytest.raises(ClusterConflict, match="node-1's agent is not connected"):
        await AdminCluster(_slot(plane)).node_logs("node-1", replica="", lines=10)


def _slot(plane: ControlPlane) -> ControlPlaneSlot:
    slot = ControlPlaneSlot()
    slot.plane = plane
    return slot


class SilentAgent(FakeAgent):
    """Takes RequestLogs and answers none; or, with `hang_up`, sends one chunk and disconnects."""

    def __init__(self, urls: list[str], *, hang_up: bool = False) -> None:
        super().__init__(urls)
        self.hang_up = hang_up
        self.asked: list[w.RequestLogs] = []

    async def on_session(self, session) -> None:
        async for message in session:
            if isinstance(message, w.RequestLogs):
                self.asked.append(message)
                if self.hang_up:
                    await session.send(w.LogChunk(request_id=message.request_id, lines=("first",), last=False))
                    await asyncio.sleep(0.1)
                    await session.close("going away")
                    return


async def test_an_agent_that_does_not_answer_or_goes_away_is_said_so(tmp_path):
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    plane = ControlPlane(server_config(), store, ReplicaSet(), engines=ENGINES, holder="cp-1")
    silent = None
    try:
        await plane.start()
        assert await plane.leadership.wait_leading(3)
        silent = SilentAgent([f"127.0.0.1:{plane.agent_port}"])
        silent.start()
        await until(lambda: "node-a" in plane.endpoint.sessions, what="the agent's session")
        with pytest.raises(NodeNotAnswering, match=r"node-a did not send its agent's log within 0.3s"):
            await plane.node_logs("node-a", timeout=0.3)
        assert silent.asked and silent.asked[0].shard_id == "" and len(plane.log_requests) == 0
        # A late answer is dropped, not mistaken for another request's.
        assert not plane.log_requests.take("node-a", w.LogChunk(request_id=silent.asked[0].request_id))

        cluster = AdminCluster(_slot(plane))
        with pytest.raises(ClusterTimeout, match="did not send replica r-1's log within"):
            await cluster_logs_quickly(cluster, plane, "r-1")
        await silent.stop()

        silent = SilentAgent([f"127.0.0.1:{plane.agent_port}"], hang_up=True)
        silent.start()
        await until(lambda: "node-a" in plane.endpoint.sessions, what="the agent's session again")
        started = asyncio.get_running_loop().time()
        with pytest.raises(NodeNotConnected, match="node-a's agent disconnected before it sent its log"):
            await plane.node_logs("node-a", timeout=5)
        assert asyncio.get_running_loop().time() - started < 3  # at once, not after the timeout
    finally:
        if silent is not None:
            await silent.stop()
        await plane.stop()
        await store.close()


async def cluster_logs_quickly(cluster: AdminCluster, plane: ControlPlane, replica: str):
    """AdminCluster.node_logs with the control plane's timeout made short."""
    real = plane.node_logs

    async def short(node_id, **kw):
        return await real(node_id, **kw, timeout=0.3)

    plane.node_logs = short  # type: ignore[method-assign]
    try:
        return await cluster.node_logs("node-a", replica=replica, lines=10)
    finally:
        del plane.node_logs


async def test_a_standby_names_the_leader_the_agents_are_connected_to(tmp_path):
    dsn = f"sqlite:///{tmp_path}/store.db"
    store1, store2 = await open_store(dsn), await open_store(dsn)
    cp1 = ControlPlane(no_models_config(), store1, ReplicaSet(), engines=ENGINES, holder="cp-1")
    cp2 = ControlPlane(no_models_config(), store2, ReplicaSet(), engines=ENGINES, holder="cp-2", standby_hold=0.3)
    try:
        await cp1.start()
        assert await cp1.leadership.wait_leading(3)
        await cp2.start()
        await until(lambda: cp2.leadership.leader == "cp-1", what="the standby to know the leader")
        with pytest.raises(ClusterUnavailable, match="this control plane is a standby: node-1's agent is connected "
                                                     "to the leader, cp-1; ask the leader's admin API"):
            await AdminCluster(_slot(cp2)).node_logs("node-1", replica="", lines=10)
        with pytest.raises(NodeNotConnected, match="standby: agents connect to the leader, cp-1"):
            await cp2.node_logs("node-1")
    finally:
        await cp2.stop()
        await cp1.stop()
        await store1.close()
        await store2.close()


async def test_chunks_are_gathered_in_order_until_the_last_and_only_from_the_node_asked():
    requests = LogRequests()

    class Session:
        node_id = "node-1"

        async def send(self, message):
            self.sent = message

    session = Session()
    asking = asyncio.create_task(requests.ask(session, shard_id="s1", lines=3, timeout=5))
    await asyncio.sleep(0)
    request_id = session.sent.request_id
    assert session.sent == w.RequestLogs(request_id=request_id, shard_id="s1", lines=3)
    assert not requests.take("node-2", w.LogChunk(request_id=request_id, lines=("from elsewhere",), last=True))
    assert requests.take("node-1", w.LogChunk(request_id=request_id, lines=("one", "two"), last=False))
    assert not asking.done()
    assert requests.take("node-1", w.LogChunk(request_id=request_id, lines=("three",), last=True))
    assert await asking == ["one", "two", "three"]
    assert len(requests) == 0
