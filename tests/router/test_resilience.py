"""Timeouts, clients that leave, failing replicas, retries."""

from __future__ import annotations

import asyncio
import socket

import openai
import pytest

from .conftest import HELLO, model


def closed_port_url() -> str:
    """An address where nothing listens: connections to it are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def test_a_silent_stream_is_cut_after_the_idle_timeout(sim, gateway):
    engine = await sim(models=["m"], tpot=0.5)
    gw = await gateway([model("m", engine)], router={"timeouts": {"idle": "100ms"}})
    stream = await gw.client().chat.completions.create(model="m", messages=HELLO, max_tokens=10, stream=True)
    got = []
    with pytest.raises(openai.APIError) as caught:
        async for chunk in stream:
            got.append(chunk)
    assert got, "the first chunk came before the engine went quiet"
    assert "idle" in str(caught.value)
    row = (await gw.settle(1))[0]
    assert (row.outcome, row.status) == ("error", 200)
    await asyncio.sleep(0.1)
    assert engine.engine.scheduler.running == 0, "the engine still works on a cut stream"


async def test_no_first_byte_in_time_is_a_504_before_any_answer(sim, gateway):
    engine = await sim(models=["m"], ttft=1.0)
    gw = await gateway([model("m", engine)], router={"timeouts": {"first_byte": "150ms"}})
    with pytest.raises(openai.InternalServerError) as caught:
        await gw.client().chat.completions.create(model="m", messages=HELLO, max_tokens=3, stream=True)
    assert caught.value.status_code == 504
    assert caught.value.body["code"] == "upstream_timeout"
    assert "first_byte" in caught.value.body["message"]


async def test_a_client_that_leaves_cancels_the_engine_request(sim, gateway, http):
    engine = await sim(models=["m"], tpot=0.05)
    gw = await gateway([model("m", engine)])
    body = {"model": "m", "messages": HELLO, "max_tokens": 200, "stream": True}
    resp = await http.post(gw.base_url + "/chat/completions", json=body)
    await resp.content.readuntil(b"\n\n")
    assert engine.engine.scheduler.running == 1
    resp.close()  # the client goes away mid-stream
    for _ in range(100):
        if engine.engine.scheduler.running == 0:
            break
        await asyncio.sleep(0.01)
    assert engine.engine.scheduler.running == 0, "the engine kept generating for nobody"
    row = (await gw.settle(1))[0]
    assert (row.outcome, row.status) == ("cancelled", 499)
    assert gw.gateway.replicas.get("m/endpoint-0").in_flight == 0


async def test_a_client_that_leaves_before_a_whole_answer_cancels_it_too(sim, gateway, http):
    import aiohttp

    engine = await sim(models=["m"], tpot=0.02)
    gw = await gateway([model("m", engine)])
    body = {"model": "m", "messages": HELLO, "max_tokens": 200}
    with pytest.raises(asyncio.TimeoutError):
        await http.post(gw.base_url + "/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=0.2))
    for _ in range(100):
        if engine.engine.scheduler.running == 0:
            break
        await asyncio.sleep(0.01)
    assert engine.engine.scheduler.running == 0
    row = (await gw.settle(1))[0]
    assert row.outcome == "cancelled"


async def test_a_client_that_leaves_while_queued_gives_its_place_up(sim, gateway, http):
    engine = await sim(models=["m"], tpot=0.05)
    gw = await gateway([model("m", engine, concurrency=1)])
    body = {"model": "m", "messages": HELLO, "max_tokens": 8, "stream": True}
    first = await http.post(gw.base_url + "/chat/completions", json=body)
    waiting = asyncio.create_task(http.post(gw.base_url + "/chat/completions", json=body))
    await asyncio.sleep(0.05)
    assert gw.gateway.admission.waiting("m") == 1
    waiting.cancel()
    for _ in range(100):
        if gw.gateway.admission.waiting("m") == 0:
            break
        await asyncio.sleep(0.01)
    assert gw.gateway.admission.waiting("m") == 0
    await first.read()
    first.close()


async def test_a_dead_replica_is_ejected_and_the_live_one_answers(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", closed_port_url(), engine)], router={"retries": {"backoff": "0s"}})
    client = gw.client()
    for _ in range(6):
        reply = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=1)
        assert reply.choices
    dead = gw.gateway.replicas.get("m/endpoint-0")
    assert not dead.usable()
    assert dead.health.failures == 3, "an ejected replica was still tried"
    rows = await gw.settle(6)
    assert {r.replica for r in rows} == {"m/endpoint-1"}
    exposition = gw.metrics.exposition().decode()
    assert 'llmgw_upstream_retries_total{model="m"} 3.0' in exposition
    assert 'llmgw_replica_healthy{model="m",replica="m/endpoint-0"} 0.0' in exposition


async def test_an_ejected_replica_is_tried_again_after_its_backoff(sim, gateway, monkeypatch):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    replica = gw.gateway.replicas.get("m/endpoint-0")
    for _ in range(3):
        replica.failed("test")
    assert not replica.usable()
    with pytest.raises(openai.InternalServerError) as caught:
        await gw.client().chat.completions.create(model="m", messages=HELLO, max_tokens=1)
    assert caught.value.body["code"] == "model_unavailable"
    replica.health.ejected_until = 0  # the back-off is over
    await gw.client().chat.completions.create(model="m", messages=HELLO, max_tokens=1)
    assert replica.usable() and replica.health.failures == 0


async def test_an_engine_error_is_retried_on_another_replica(sim, gateway):
    failing = await sim(models=["m"], fail_rate=1.0)
    good = await sim(models=["m"])
    gw = await gateway([model("m", failing, good)], router={"retries": {"attempts": 1, "backoff": "0s"}})
    for _ in range(4):
        await gw.client().chat.completions.create(model="m", messages=HELLO, max_tokens=1)
    rows = await gw.settle(4)
    assert {r.replica for r in rows} == {"m/endpoint-1"}


async def test_without_retries_the_engine_error_reaches_the_client(sim, gateway):
    failing = await sim(models=["m"], fail_rate=1.0)
    gw = await gateway([model("m", failing)], router={"retries": {"attempts": 0}})
    with pytest.raises(openai.APIStatusError) as caught:
        await gw.client().chat.completions.create(model="m", messages=HELLO, max_tokens=1)
    assert caught.value.status_code == 502
    assert caught.value.body["code"] == "upstream_error"
    assert "answered 500" in caught.value.body["message"]
    row = (await gw.settle(1))[0]
    assert (row.status, row.outcome) == (502, "error")
    assert gw.accountant.released == 1  # nothing was used: the hold went back


async def test_the_engine_gets_its_own_key_never_the_clients(sim, gateway):
    engine = await sim(models=["m"], api_key="engine-secret")
    entry = model("m", engine)
    entry["endpoints"][0]["api_key"] = "engine-secret"
    from .conftest import principal

    gw = await gateway([entry], keys={"client-key": principal()})
    reply = await gw.client("client-key").chat.completions.create(model="m", messages=HELLO, max_tokens=1)
    assert reply.choices
