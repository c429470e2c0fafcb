"""router.clients: slow headers and idle connections are closed, connection caps answer 503 cheaply."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from llmgw.config import parse_server_config
from llmgw.server.limits import ClientRunner


async def _serve(**clients) -> tuple[ClientRunner, int]:
    config = parse_server_config({"router": {"clients": clients}})

    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/health", hello)
    runner = ClientRunner(app, config.router.clients, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, runner.addresses[0][1]


async def _closed(reader: asyncio.StreamReader, within: float) -> bool:
    try:
        data = await asyncio.wait_for(reader.read(), within)
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return data == b"" or data.startswith(b"HTTP/1.1 4")


@pytest.fixture
async def served():
    runners = []

    async def make(**clients):
        runner, port = await _serve(**clients)
        runners.append(runner)
        return runner, port

    yield make
    for runner in runners:
        await runner.cleanup()


async def test_half_sent_headers_are_closed_after_the_header_timeout(served):
    runner, port = await served(header_timeout="200ms", idle_timeout="30s")
    conns = []
    for _ in range(20):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # never finished
        conns.append((reader, writer))
    await asyncio.sleep(0.1)
    assert runner.connections.total == 20
    results = await asyncio.gather(*(_closed(r, 2.0) for r, _ in conns))
    assert all(results)
    assert runner.connections.total == 0
    assert runner.connections.slow_headers_closed == 20
    for _, w in conns:
        w.close()


async def test_a_kept_alive_connection_that_starts_a_request_slowly_is_closed(served):
    runner, port = await served(header_timeout="200ms", idle_timeout="30s")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
    assert head.startswith(b"HTTP/1.1 200")
    length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0].split(b":")[1])
    await reader.readexactly(length)
    writer.write(b"GET /health HTTP/1.1\r\nHo")  # the next request, never finished
    assert await _closed(reader, 2.0)
    writer.close()


async def test_an_idle_kept_alive_connection_is_closed_after_the_idle_timeout(served):
    runner, port = await served(header_timeout="30s", idle_timeout="200ms")
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/health") as resp:
            assert resp.status == 200
        assert runner.connections.total == 1
        await asyncio.sleep(0.6)
        assert runner.connections.total == 0


async def test_connections_past_the_per_client_cap_get_503_while_another_address_gets_in(served):
    runner, port = await served(max_connections_per_client=5, header_timeout="30s")
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(5)]
    await asyncio.sleep(0.05)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answer = await asyncio.wait_for(reader.read(), 2)
    assert answer.startswith(b"HTTP/1.1 503")
    assert b"Retry-After: 2" in answer and b"max_connections_per_client" in answer
    writer.close()
    # the same gateway from another address of this machine still answers
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))) as session:
        async with session.get(f"http://127.0.0.1:{port}/health") as resp:
            assert resp.status == 200
    assert runner.connections.refused == 1
    for _, w in held:
        w.close()


async def test_connections_past_the_total_cap_get_503(served):
    runner, port = await served(max_connections=3, header_timeout="30s")
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
    await asyncio.sleep(0.05)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))) as session:
        async with session.get(f"http://127.0.0.1:{port}/health") as resp:
            assert resp.status == 503
            assert resp.headers["Retry-After"] == "2"
            assert (await resp.json())["error"]["code"] == "too_many_connections"
    for _, w in held:
        w.close()
    await asyncio.sleep(0.1)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/health") as resp:
            assert resp.status == 200
