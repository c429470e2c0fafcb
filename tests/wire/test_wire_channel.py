"""The agent port over real TLS WebSockets: an in-process endpoint and connection."""

from __future__ import annotations

import asyncio
import ssl
import time

import aiohttp
import pytest
from aiohttp import web

from llmgw import pki, wire
from llmgw.wire.channel import PATH, AgentConnection, AgentEndpoint, agent_url

FAST = dict(ping_interval=0.2, pong_timeout=0.2)


def register(node_id: str = "node-a") -> wire.Register:
    return wire.Register(node_id=node_id, agent_version="test", hostname=node_id,
                         engines={"sim": "1"}, labels={"zone": "a"})


class Recorder:
    """A control plane's on_session that records what agents send and can be told to send."""

    def __init__(self) -> None:
        self.sessions: asyncio.Queue = asyncio.Queue()
        self.messages: asyncio.Queue = asyncio.Queue()
        self.ended: asyncio.Queue = asyncio.Queue()

    async def __call__(self, session) -> None:
        await self.sessions.put(session)
        async for msg in session:
            await self.messages.put((session.node_id, msg))
        await self.ended.put((session.node_id, session.close_reason, time.monotonic()))


async def get(queue: asyncio.Queue, timeout: float = 5.0):
    return await asyncio.wait_for(queue.get(), timeout)


@pytest.fixture
async def endpoint(test_pki):
    rec = Recorder()
    ep = AgentEndpoint(rec, ssl_context=test_pki.server_context(), heartbeat_interval=0.5, epoch=7)
    port = await ep.start("127.0.0.1", 0)
    ep.recorder = rec
    ep.url = f"wss://127.0.0.1:{port}{PATH}"
    yield ep
    await ep.stop()


async def run_agent(conn: AgentConnection, on_session):
    task = asyncio.create_task(conn.run(on_session))
    return task


async def stop_agent(conn: AgentConnection, task: asyncio.Task) -> None:
    await conn.stop()
    await asyncio.wait_for(task, 5)


async def test_a_node_registers_and_heartbeats(endpoint, test_pki):
    got_command: asyncio.Queue = asyncio.Queue()

    async def agent(session):
        assert session.welcome.node_id == "node-a"
        assert session.welcome.epoch == 7 and session.welcome.heartbeat_interval == 0.5
        await session.send(wire.Heartbeat(seq=1, load_1m=0.5))
        async for msg in session:
            await got_command.put(msg)
            if isinstance(msg, wire.StopShard):
                await session.send(wire.CommandResult(command_id=msg.command_id, ok=True))

    conn = AgentConnection([endpoint.url], register, ssl_context=test_pki.node_context())
    task = await run_agent(conn, agent)
    cp_session = await get(endpoint.recorder.sessions)
    assert cp_session.node_id == "node-a"
    assert cp_session.peer.common_name == "node-a"
    assert cp_session.register.engines == {"sim": "1"}
    assert endpoint.sessions == {"node-a": cp_session}

    assert await get(endpoint.recorder.messages) == ("node-a", wire.Heartbeat(seq=1, load_1m=0.5))
    await cp_session.send(wire.StopShard(shard_id="s1", command_id="c1"))
    assert await get(got_command) == wire.StopShard(shard_id="s1", command_id="c1")
    assert await get(endpoint.recorder.messages) == ("node-a", wire.CommandResult(command_id="c1", ok=True))

    await stop_agent(conn, task)
    node, reason, _ = await get(endpoint.recorder.ended)
    assert node == "node-a" and "stopping" in reason
    assert endpoint.sessions == {}


async def test_a_node_claiming_another_id_is_refused(endpoint, test_pki):
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(endpoint.url, ssl=test_pki.node_context(test_pki.node_a)) as ws:
            await ws.send_bytes(wire.encode(register("node-b")))
            msg = await ws.receive(timeout=5)
            refused = wire.decode(msg.data)
            assert isinstance(refused, wire.Refused)
            assert "node 'node-a'" in refused.reason and "'node-b'" in refused.reason
            closing = await ws.receive(timeout=5)
            assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            assert ws.close_code == 1008
    assert endpoint.recorder.sessions.empty()


async def test_the_connection_reports_a_refusal_and_keeps_trying(endpoint, test_pki):
    conn = AgentConnection([endpoint.url], lambda: register("node-b"), ssl_context=test_pki.node_context(),
                           backoff_initial=0.05, backoff_max=0.1)

    async def never(session):  # pragma: no cover - must not be reached
        raise AssertionError("a refused agent got a session")

    task = await run_agent(conn, never)
    for _ in range(100):
        if conn.last_error:
            break
        await asyncio.sleep(0.02)
    assert "refused: this certificate is node 'node-a'" in conn.last_error
    await stop_agent(conn, task)


@pytest.mark.parametrize("which", ["no certificate", "another CA"])
async def test_a_client_without_a_cluster_certificate_is_refused_at_tls(endpoint, test_pki, which):
    if which == "no certificate":
        ctx = pki.ssl_client_context(None, None, test_pki.ca.cert)
    else:
        ctx = pki.ssl_client_context(test_pki.stranger.cert, test_pki.stranger.key, test_pki.ca.cert)
    async with aiohttp.ClientSession() as http:
        with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
            async with http.ws_connect(endpoint.url, ssl=ctx) as ws:
                await ws.send_bytes(wire.encode(register()))
                msg = await ws.receive(timeout=5)
                if msg.type is aiohttp.WSMsgType.ERROR:
                    raise msg.data
                raise AssertionError(f"got {msg.type}")
    assert endpoint.recorder.sessions.empty()


async def test_a_revoked_node_is_refused(test_pki):
    revoked = pki.RevocationList(common_names={"node-a"})
    rec = Recorder()
    ep = AgentEndpoint(rec, ssl_context=test_pki.server_context(), revocations=lambda: revoked)
    port = await ep.start("127.0.0.1", 0)
    try:
        conn = AgentConnection([f"127.0.0.1:{port}"], register, ssl_context=test_pki.node_context(),
                               backoff_initial=0.05)
        task = await run_agent(conn, rec)
        for _ in range(100):
            if conn.last_error:
                break
            await asyncio.sleep(0.02)
        assert "refused: certificates for 'node-a' are revoked" in conn.last_error
        await stop_agent(conn, task)
        assert rec.sessions.empty()
    finally:
        await ep.stop()


async def test_on_register_may_refuse(test_pki):
    ep = AgentEndpoint(Recorder(), ssl_context=test_pki.server_context(),
                       on_register=lambda reg, peer: "node-a was deleted")
    port = await ep.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(f"wss://127.0.0.1:{port}{PATH}", ssl=test_pki.node_context()) as ws:
                await ws.send_bytes(wire.encode(register()))
                assert wire.decode((await ws.receive(timeout=5)).data) == wire.Refused("node-a was deleted")
    finally:
        await ep.stop()


async def test_the_endpoint_finds_a_silent_agent(test_pki):
    rec = Recorder()
    ep = AgentEndpoint(rec, ssl_context=test_pki.server_context(), **FAST)
    port = await ep.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as http:
            # autoping=False and never reading: this agent answers no ping.
            async with http.ws_connect(f"wss://127.0.0.1:{port}{PATH}", ssl=test_pki.node_context(),
                                       autoping=False) as ws:
                await ws.send_bytes(wire.encode(register()))
                assert isinstance(wire.decode((await ws.receive(timeout=5)).data), wire.Welcome)
                await get(rec.sessions)
                silent_since = time.monotonic()
                node, reason, ended_at = await get(rec.ended, timeout=3)
                assert node == "node-a"
                assert "no answer to a ping within 0.2 s" in reason
                assert ended_at - silent_since < 1.0  # ping after 0.2 s, 0.2 s to answer
                assert ep.sessions == {}
    finally:
        await ep.stop()


async def test_the_agent_finds_a_silent_control_plane(free_port):
    welcomed = asyncio.Event()

    async def silent_control_plane(request):
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        first = wire.decode((await ws.receive()).data)
        await ws.send_bytes(wire.encode(wire.Welcome(node_id=first.node_id)))
        welcomed.set()
        await asyncio.sleep(30)  # then nothing, not even a pong
        return ws

    app = web.Application()
    app.router.add_get(PATH, silent_control_plane)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", free_port).start()
    ended: asyncio.Queue = asyncio.Queue()

    async def agent(session):
        start = time.monotonic()
        async for _ in session:
            pass
        await ended.put((session.close_reason, time.monotonic() - start))

    conn = AgentConnection([f"127.0.0.1:{free_port}"], register, **FAST, backoff_initial=5)
    task = await run_agent(conn, agent)
    try:
        reason, took = await get(ended, timeout=3)
        assert "no answer to a ping within 0.2 s" in reason
        assert took < 1.0
    finally:
        await stop_agent(conn, task)
        await runner.cleanup()


async def test_failover_to_the_second_control_plane(endpoint, test_pki, free_port):
    down = f"wss://127.0.0.1:{free_port}{PATH}"
    sessions: asyncio.Queue = asyncio.Queue()

    async def agent(session):
        await sessions.put(session)
        async for _ in session:
            pass

    conn = AgentConnection([down, endpoint.url], register, ssl_context=test_pki.node_context(),
                           backoff_initial=5)
    started = time.monotonic()
    task = await run_agent(conn, agent)
    session = await get(sessions)
    assert session.url == endpoint.url
    assert time.monotonic() - started < 2  # no backoff before the second address
    assert str(free_port) in conn.last_error
    await stop_agent(conn, task)


async def test_a_control_plane_that_goes_away_is_replaced_by_the_next(test_pki):
    recs = [Recorder(), Recorder()]
    eps = [AgentEndpoint(r, ssl_context=test_pki.server_context()) for r in recs]
    ports = [await ep.start("127.0.0.1", 0) for ep in eps]
    sessions: asyncio.Queue = asyncio.Queue()

    async def agent(session):
        await sessions.put(session.url)
        async for _ in session:
            pass

    conn = AgentConnection([f"127.0.0.1:{p}" for p in ports], register,
                           ssl_context=test_pki.node_context(), backoff_initial=5)
    task = await run_agent(conn, agent)
    try:
        assert str(ports[0]) in await get(sessions)
        await get(recs[0].sessions)
        await eps[0].stop()
        assert str(ports[1]) in await get(sessions)
        assert (await get(recs[1].sessions)).node_id == "node-a"
    finally:
        await stop_agent(conn, task)
        await eps[1].stop()


async def test_control_planes_replaces_the_agents_list(endpoint, test_pki):
    seen: list = []
    got: asyncio.Queue = asyncio.Queue()

    async def agent(session):
        async for msg in session:
            await got.put(msg)

    conn = AgentConnection([endpoint.url], register, ssl_context=test_pki.node_context(),
                           on_control_planes=seen.append)
    task = await run_agent(conn, agent)
    cp_session = await get(endpoint.recorder.sessions)
    await endpoint.broadcast(wire.ControlPlanes(addresses=("10.0.0.1:7443", endpoint.url), epoch=8))
    assert isinstance(await get(got), wire.ControlPlanes)  # the agent sees it too, to keep it
    assert conn.urls == ("wss://10.0.0.1:7443/agent/v1", endpoint.url)
    assert seen == [conn.urls]
    assert cp_session.node_id == "node-a"
    await stop_agent(conn, task)


async def test_an_unknown_message_type_is_skipped_not_fatal(endpoint, test_pki):
    import msgpack

    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(endpoint.url, ssl=test_pki.node_context()) as ws:
            await ws.send_bytes(wire.encode(register()))
            assert isinstance(wire.decode((await ws.receive(timeout=5)).data), wire.Welcome)
            await ws.send_bytes(msgpack.packb({"type": "from_a_newer_agent", "x": 1}))
            await ws.send_bytes(wire.encode(wire.Heartbeat(seq=1)))
            assert await get(endpoint.recorder.messages) == ("node-a", wire.Heartbeat(seq=1))


async def test_a_second_connection_from_a_node_replaces_the_first(endpoint, test_pki):
    async with aiohttp.ClientSession() as http:
        first = await http.ws_connect(endpoint.url, ssl=test_pki.node_context())
        await first.send_bytes(wire.encode(register()))
        await first.receive(timeout=5)
        old = await get(endpoint.recorder.sessions)
        second = await http.ws_connect(endpoint.url, ssl=test_pki.node_context())
        await second.send_bytes(wire.encode(register()))
        await second.receive(timeout=5)
        new = await get(endpoint.recorder.sessions)
        assert old.closed and "replaced" in old.close_reason
        assert endpoint.sessions["node-a"] is new
        await first.close()
        await second.close()


async def test_the_handler_returning_closes_the_connection(test_pki):
    async def brief(session):
        await session.send(wire.Restart(reason="bye"))

    ep = AgentEndpoint(brief, ssl_context=test_pki.server_context())
    port = await ep.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(f"wss://localhost:{port}{PATH}", ssl=test_pki.node_context()) as ws:
                await ws.send_bytes(wire.encode(register()))
                assert isinstance(wire.decode((await ws.receive(timeout=5)).data), wire.Welcome)
                assert wire.decode((await ws.receive(timeout=5)).data) == wire.Restart(reason="bye")
                assert (await ws.receive(timeout=5)).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    finally:
        await ep.stop()


async def test_insecure_mode_is_loopback_only(free_port):
    with pytest.raises(ValueError, match="mutual TLS"):
        AgentEndpoint(Recorder())
    ep = AgentEndpoint(Recorder(), insecure=True)
    with pytest.raises(ValueError, match="loopback"):
        await ep.start("0.0.0.0", free_port)
    rec = Recorder()
    ep = AgentEndpoint(rec, insecure=True)
    port = await ep.start("127.0.0.1", 0)
    conn = AgentConnection([f"127.0.0.1:{port}"], register)
    assert conn.urls == (f"ws://127.0.0.1:{port}{PATH}",)
    async def agent(session):
        async for _ in session:
            pass

    task = await run_agent(conn, agent)
    try:
        session = await get(rec.sessions)
        assert session.node_id == "node-a" and session.peer.common_name is None
    finally:
        await stop_agent(conn, task)
        await ep.stop()


def test_a_server_context_that_does_not_require_client_certs_is_refused(test_pki):
    ctx = pki.ssl_server_context(test_pki.server.cert, test_pki.server.key, test_pki.ca.cert, require_client=False)
    with pytest.raises(ValueError, match="CERT_REQUIRED"):
        AgentEndpoint(Recorder(), ssl_context=ctx)


@pytest.mark.parametrize("address, tls, url", [
    ("cp1:7443", True, "wss://cp1:7443/agent/v1"),
    ("cp1:7443", False, "ws://cp1:7443/agent/v1"),
    ("https://cp1:7443", True, "wss://cp1:7443/agent/v1"),
    ("wss://cp1:7443/agent/v1", True, "wss://cp1:7443/agent/v1"),
])
def test_agent_url(address, tls, url):
    assert agent_url(address, tls=tls) == url


def test_agent_url_refuses_nonsense():
    with pytest.raises(ValueError, match="host:port"):
        agent_url("ftp://x")


@pytest.mark.parametrize("first, match", [
    (wire.Heartbeat(seq=1), "first message must be a register, got 'heartbeat'"),
    (wire.Register(node_id="node-a", protocol=0), "protocol 0, older"),
])
async def test_a_bad_first_message_is_refused(endpoint, test_pki, first, match):
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(endpoint.url, ssl=test_pki.node_context()) as ws:
            await ws.send_bytes(wire.encode(first))
            refused = wire.decode((await ws.receive(timeout=5)).data)
            assert isinstance(refused, wire.Refused)
            assert match in refused.reason


def test_set_urls_leaves_out_bad_addresses_and_ignores_an_empty_list():
    conn = AgentConnection(["cp1:7443"], register)
    conn.set_urls(["ftp://nope", "cp2:7443"])
    assert conn.urls == ("ws://cp2:7443/agent/v1",)
    conn.set_urls([])
    assert conn.urls == ("ws://cp2:7443/agent/v1",)
    with pytest.raises(ValueError, match="at least one"):
        AgentConnection([], register)
