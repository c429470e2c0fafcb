"""The control plane end to end over the real agent protocol: a leader and a standby on one store,
a fake agent that answers StartShard, /leader, and the agent moving to the standby when the leader dies."""

from __future__ import annotations

import asyncio
import datetime as dt
import socket

import pytest

from llmgw.config.load import parse_server_config
from llmgw.control.service import ControlPlane, install_control_plane, make_control_app
from llmgw.control.state import ModelUnavailable
from llmgw.router.replicas import ReplicaSet
from llmgw.store import open_store
from llmgw.wire import messages as w
from llmgw.wire.channel import AgentConnection

from .conftest import ENGINES


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_config(**control):
    return parse_server_config({
        "agent_listen": f"127.0.0.1:{free_port()}",
        "agent_insecure": True,
        "control": {"lease_ttl": "1200ms", "reconcile_interval": "200ms", **control},
        "models": [{"name": "tiny", "engine": "sim", "profiles": [{"name": "cpu"}], "scaling": {"min": 1, "max": 1}}],
    })


class FakeAgent:
    """Registers as node-a, says every StartShard is ready at once, remembers what it runs."""

    def __init__(self, urls: list[str]) -> None:
        self.shards: dict[str, w.StartShard] = {}
        self.ports: dict[str, int] = {}
        self.control_planes: list[tuple[str, ...]] = []
        self.welcomes: list[str] = []
        self.conn = AgentConnection(urls, self.register, backoff_initial=0.1, backoff_max=0.3,
                                    on_control_planes=self.control_planes.append)
        self.task: asyncio.Task | None = None

    def register(self) -> w.Register:
        return w.Register(
            node_id="node-a", engines={"sim": "1"},
            inventory=w.Inventory(cpu=w.CpuInfo(cores=8), memory_total_bytes=16 << 30),
            shards=tuple(w.RunningShard(shard_id=s.shard_id, model=s.model, engine=s.engine, state="ready",
                                        port=self.ports[s.shard_id]) for s in self.shards.values()),
        )

    async def on_session(self, session) -> None:
        self.welcomes.append(session.url)
        async for message in session:
            if isinstance(message, w.StartShard):
                self.shards[message.shard_id] = message
                self.ports[message.shard_id] = message.port or 20000 + len(self.ports)
                await session.send(w.ShardStatus(shard_id=message.shard_id, state="ready", model=message.model,
                                                 port=self.ports[message.shard_id], command_id=message.command_id))

    def start(self) -> None:
        self.task = asyncio.create_task(self.conn.run(self.on_session))

    async def stop(self) -> None:
        await self.conn.stop()
        if self.task is not None:
            done, _ = await asyncio.wait({self.task}, timeout=10)
            assert done, "the fake agent did not stop within 10 s"


async def until(predicate, timeout: float = 10.0, what: str = "the condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_leader_standby_and_an_agent_that_follows_the_lease(tmp_path, aiohttp_client):
    dsn = f"sqlite:///{tmp_path}/store.db"
    store1, store2 = await open_store(dsn), await open_store(dsn)
    replicas1, replicas2 = ReplicaSet(), ReplicaSet()
    cp1 = ControlPlane(server_config(), store1, replicas1, engines=ENGINES, holder="cp-1", standby_hold=0.3)
    cp2 = ControlPlane(server_config(), store2, replicas2, engines=ENGINES, holder="cp-2", standby_hold=0.3)
    agent = None
    try:
        await cp1.start()
        assert await cp1.leadership.wait_leading(3)
        await cp2.start()
        await asyncio.sleep(0.5)
        assert cp1.leading and not cp2.leading

        client1 = await aiohttp_client(make_control_app(cp1))
        client2 = await aiohttp_client(make_control_app(cp2))
        r1, r2 = await client1.get("/leader"), await client2.get("/leader")
        assert r1.status == 200 and (await r1.json())["holder"] == "cp-1"
        body = await r2.json()
        assert r2.status == 503 and body["leader"] is False and body["holder"] == "cp-1" and body["epoch"] == 1
        assert (await client2.get("/health")).status == 200

        # The agent tries the standby first: refused, naming the leader; then the leader takes it.
        agent = FakeAgent([f"127.0.0.1:{cp2.agent_port}", f"127.0.0.1:{cp1.agent_port}"])
        agent.start()
        await until(lambda: replicas1.replicas_for("tiny"), what="the replica on the leader")
        [replica] = replicas1.replicas_for("tiny")
        assert replica.base_url.startswith("http://127.0.0.1:")
        assert len(agent.shards) == 1 and replica.id in agent.shards
        assert agent.welcomes == [f"ws://127.0.0.1:{cp1.agent_port}/agent/v1"]
        assert replicas2.replicas_for("tiny") == []
        # The leader told the agent both control planes.
        await until(lambda: agent.control_planes, what="a ControlPlanes message")
        assert sorted(agent.control_planes[-1]) == sorted(
            [f"ws://127.0.0.1:{cp1.agent_port}/agent/v1", f"ws://127.0.0.1:{cp2.agent_port}/agent/v1"])
        assert cp1.explain("tiny")["status"] == "ready"
        assert [n["id"] for n in cp1.nodes()] == ["node-a"]
        with pytest.raises(ModelUnavailable, match="standby; the leader is cp-1"):
            await cp2.ensure_started("tiny", timeout=1)

        # The leader dies: no release, its agent port closes.
        await cp1.leadership.stop(release=False)
        await cp1.reconciler.stop()
        await cp1.endpoint.stop()
        await until(lambda: cp2.leading, timeout=5, what="the standby taking over")
        await until(lambda: replicas2.replicas_for("tiny"), timeout=10, what="the agent on the new leader")
        # The engine was adopted, not started again.
        assert [r.id for r in replicas2.replicas_for("tiny")] == [replica.id]
        assert len(agent.shards) == 1
        # The new leader publishes the adopted replica as it takes the registration; the agent's side of the
        # session (its welcome) may come a moment after.
        await until(lambda: agent.welcomes[-1] == f"ws://127.0.0.1:{cp2.agent_port}/agent/v1", timeout=5,
                    what="the agent's session with the new leader")
        r2 = await client2.get("/leader")
        assert r2.status == 200 and (await r2.json())["epoch"] == 2
    finally:
        if agent is not None:
            await agent.stop()
        await cp2.stop()
        cp1._started = True
        await cp1.stop()
        await store1.close()
        await store2.close()


async def test_cordon_is_kept_in_the_store_and_in_the_audit(tmp_path):
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    cp = ControlPlane(server_config(), store, ReplicaSet(), engines=ENGINES, holder="cp-1")
    try:
        await cp.start()
        assert await cp.leadership.wait_leading(3)
        await cp.cordon("node-z", "bad fan", actor="ann")
        assert (await store.get_setting("control.cordons")).value == {"node-z": "bad fan"}
        await cp.uncordon("node-z", actor="ann")
        assert (await store.get_setting("control.cordons")).value == {}
        assert [e.action for e in await store.list_audit(actor="ann")] == ["nodes.uncordon", "nodes.cordon"]
        await cp.add_model({"name": "more", "engine": "sim", "profiles": [{"name": "d"}]}, actor="ann")
        await cp.reconciler.reconcile_once()
        assert cp.knows("more")
        info = cp.explain("more")
        assert (info["status"], info["reason"]) == ("unplaced", "no node is connected")
        await cp.scale_model("more", max=0, min=0, actor="ann")
        assert cp.explain("more")["status"] == "stopped"
        status = cp.status()
        assert status["leadership"]["leader"] and status["models"]["more"] == "stopped"
    finally:
        await cp.stop()
        await store.close()


async def test_installed_in_an_application(tmp_path, aiohttp_client):
    from aiohttp import web

    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    try:
        app = web.Application()
        slot = install_control_plane(app, server_config(), ReplicaSet(), store=store, engines=ENGINES, holder="cp-1")
        client = await aiohttp_client(app)
        await until(lambda: slot.plane is not None and slot.plane.leading, timeout=5, what="leading")
        r = await client.get("/leader")
        assert r.status == 200 and (await r.json())["self"] == "cp-1"
        await client.close()
        assert slot.plane is None
        # Released at shutdown, so a standby need not wait for it to lapse.
        assert (await store.get_lease("control-plane")).expires_at <= dt.datetime.now(dt.UTC)

        off = web.Application()
        config = parse_server_config({"agent_listen": f"127.0.0.1:{free_port()}", "agent_insecure": True,
                                      "control": {"enabled": False}})
        install_control_plane(off, config, ReplicaSet(), store=store, engines=ENGINES)
        client = await aiohttp_client(off)
        r = await client.get("/leader")
        assert r.status == 503 and "gateway only" in (await r.json())["error"]
    finally:
        await store.close()


async def test_attached_to_the_gateway_with_the_admin_api(tmp_path, aiohttp_client):
    import aiohttp

    from llmgw.control.wiring import attach_control_plane
    from llmgw.server import make_gateway_app

    admin_port = free_port()
    config = parse_server_config({
        "agent_listen": f"127.0.0.1:{free_port()}", "agent_insecure": True,
        "admin_listen": f"127.0.0.1:{admin_port}", "admin_token_file": str(tmp_path / "admin-token"),
        "store": {"dsn": str(tmp_path / "store.db")}, "auth": {"keys_required": False},
        "models": [{"name": "tiny", "engine": "sim", "profiles": [{"name": "cpu"}]}],
    })
    app = make_gateway_app(config)
    slot = attach_control_plane(app, config, engines=ENGINES, holder="cp-1")
    client = await aiohttp_client(app)
    await until(lambda: slot.plane is not None and slot.plane.leading, timeout=5, what="leading")
    assert (await client.get("/leader")).status == 200
    token = (tmp_path / "admin-token").read_text().strip()
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{admin_port}/api/v1/models",
                            headers={"Authorization": f"Bearer {token}"}) as resp:
            assert resp.status == 200
            assert [m["name"] for m in (await resp.json())["models"]] == ["tiny"]


class EngineStartingAgent(FakeAgent):
    """As FakeAgent, but each StartShard starts a real sim engine that demands the key it was given."""

    def __init__(self, urls: list[str]) -> None:
        super().__init__(urls)
        self.engines: list = []

    async def on_session(self, session) -> None:
        from llmgw.simengine import SimOptions, start

        self.welcomes.append(session.url)
        async for message in session:
            if isinstance(message, w.StartShard):
                engine = await start(SimOptions(models=(message.model,), port=0, api_key=message.api_key,
                                                ttft=0.0, tpot=0.0))
                self.engines.append(engine)
                self.shards[message.shard_id] = message
                self.ports[message.shard_id] = engine.port
                await session.send(w.ShardStatus(shard_id=message.shard_id, state="ready", model=message.model,
                                                 port=engine.port, command_id=message.command_id))

    async def stop(self) -> None:
        await super().stop()
        for engine in self.engines:
            await engine.close()


async def test_an_on_demand_model_starts_on_its_first_request_through_the_gateway(tmp_path, aiohttp_client):
    from llmgw.control.wiring import attach_control_plane
    from llmgw.server import make_gateway_app

    config = parse_server_config({
        "agent_listen": f"127.0.0.1:{free_port()}", "agent_insecure": True, "admin_listen": f"127.0.0.1:{free_port()}",
        "admin_token_file": str(tmp_path / "admin-token"),
        "store": {"dsn": str(tmp_path / "store.db")}, "auth": {"keys_required": False},
        "control": {"lease_ttl": "1200ms", "reconcile_interval": "200ms"},
        "models": [{"name": "lazy", "engine": "sim", "profiles": [{"name": "cpu"}],
                    "scaling": {"min": 0, "max": 1, "on_demand": True}}],
    })
    app = make_gateway_app(config)
    slot = attach_control_plane(app, config, engines=ENGINES, holder="cp-1", admin=False)
    client = await aiohttp_client(app)
    await until(lambda: slot.plane is not None and slot.plane.leading, timeout=5, what="leading")
    slot.plane.reconciler.hold_starts_until = 0.0  # no take-over to wait out in a test
    agent = EngineStartingAgent([f"127.0.0.1:{slot.plane.agent_port}"])
    agent.start()
    try:
        await until(lambda: slot.plane.nodes(), what="the agent registered")
        await asyncio.sleep(0.5)
        assert agent.shards == {}, "an on-demand model runs nothing before it is asked for"
        resp = await client.post("/v1/chat/completions", json={
            "model": "lazy", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4})
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["choices"][0]["message"]["content"]
        assert len(agent.shards) == 1
    finally:
        await agent.stop()
