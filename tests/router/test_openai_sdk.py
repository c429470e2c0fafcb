"""The gateway as the official openai SDK sees it, in front of simulated engines."""

from __future__ import annotations

import asyncio
import json
import time

import openai
import pytest

from .conftest import HELLO, model

WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
}


async def test_chat_answers_with_usage_and_gateway_headers(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    raw = await gw.client().chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=5)
    reply = raw.parse()
    assert reply.choices[0].message.content
    assert reply.usage.completion_tokens == 5
    request_id = raw.headers["x-request-id"]
    assert request_id.startswith("req_")
    assert raw.headers["x-llmgw-request-id"] == request_id
    assert int(raw.headers["x-llmgw-queue-ms"]) >= 0
    assert "x-llmgw-served-model" not in raw.headers
    row = (await gw.settle(1))[0]
    assert row.request_id == request_id
    assert (row.model_requested, row.model_served, row.replica) == ("m", "m", "m/endpoint-0")
    assert (row.status, row.outcome) == (200, "ok")
    assert row.completion_tokens == 5 and row.prompt_tokens > 0
    assert row.cost_micros == row.prompt_tokens + row.completion_tokens
    assert gw.accountant.settled == [("m", "m", row.prompt_tokens, 5)]


async def test_alias_user_metadata_and_tags_reach_the_usage_row(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine, aliases=["short"])])
    await gw.client().chat.completions.create(
        model="short", messages=HELLO, max_tokens=2, user="user-42",
        metadata={"feature": "triage"}, extra_headers={"x-llmgw-tags": "team=a, job=nightly,,"})
    row = (await gw.settle(1))[0]
    assert (row.model_requested, row.model_served) == ("short", "m")
    assert row.client_user == "user-42"
    assert row.metadata == {"feature": "triage"}
    assert row.tags == ("team=a", "job=nightly")


async def test_the_sync_client_works(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])

    def ask():
        client = gw.sync_client()
        reply = client.chat.completions.create(model="m", messages=HELLO, max_tokens=3)
        chunks = list(client.chat.completions.create(model="m", messages=HELLO, max_tokens=3, stream=True))
        return reply, chunks

    reply, chunks = await asyncio.to_thread(ask)
    assert reply.usage.completion_tokens == 3
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


async def test_stream_without_include_usage_hides_the_usage_but_counts_it(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    stream = await gw.client().chat.completions.create(model="m", messages=HELLO, max_tokens=6, stream=True)
    chunks = [c async for c in stream]
    assert chunks and all(c.choices for c in chunks), "a usage-only chunk reached a client that did not ask"
    assert all(c.usage is None for c in chunks)
    row = (await gw.settle(1))[0]
    assert row.completion_tokens == 6 and row.prompt_tokens > 0
    assert row.ttft_ms is not None


async def test_stream_with_include_usage_ends_with_the_usage_chunk(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    stream = await gw.client().chat.completions.create(
        model="m", messages=HELLO, max_tokens=4, stream=True, stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
    assert sum(1 for c in chunks if c.usage is not None) == 1


async def test_without_inject_usage_a_stream_is_counted_by_its_chunks(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)], router={"inject_usage": False})
    stream = await gw.client().chat.completions.create(model="m", messages=HELLO, max_tokens=5, stream=True)
    chunks = [c async for c in stream]
    assert all(c.choices for c in chunks)
    row = (await gw.settle(1))[0]
    assert row.completion_tokens >= 5  # estimated from the events relayed


async def test_chunks_arrive_as_the_engine_makes_them(sim, gateway):
    engine = await sim(models=["m"], tpot=0.03)
    gw = await gateway([model("m", engine)])
    started = time.monotonic()
    stream = await gw.client().chat.completions.create(model="m", messages=HELLO, max_tokens=20, stream=True)
    arrivals = []
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic() - started)
    total = time.monotonic() - started
    assert total >= 0.5  # 19 gaps of 30 ms
    assert arrivals[0] < total - 0.3, f"first content at {arrivals[0]:.3f}s of {total:.3f}s: buffered"
    assert len({round(a, 2) for a in arrivals}) > 10  # spread out in time, not one burst


async def test_tool_calls_come_back(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    reply = await gw.client().chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Weather in Ankara?"}], tools=[WEATHER])
    call = reply.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert "city" in json.loads(call.function.arguments)
    stream = await gw.client().chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER], stream=True)
    arguments = ""
    async for chunk in stream:
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            arguments += tc.function.arguments or ""
    assert "city" in json.loads(arguments)


async def test_embeddings_and_completions(sim, gateway):
    engine = await sim(models=["e"], embedding_dim=8)
    gw = await gateway([model("e", engine)])
    client = gw.client()
    result = await client.embeddings.create(model="e", input=["one", "two"])
    assert [len(d.embedding) for d in result.data] == [8, 8]
    done = await client.completions.create(model="e", prompt="Once upon", max_tokens=3)
    assert done.usage.completion_tokens == 3
    stream = await client.completions.create(model="e", prompt="Once upon", max_tokens=3, stream=True)
    assert "".join([c.choices[0].text async for c in stream if c.choices])
    rows = await gw.settle(3)
    assert rows[0].prompt_tokens > 0 and rows[0].completion_tokens == 0
    assert [r.outcome for r in rows] == ["ok", "ok", "ok"]


async def test_errors_are_openai_shaped_with_a_code(sim, gateway, http):
    engine = await sim(models=["m"], context_length=64)
    gw = await gateway([model("m", engine)])
    client = gw.client()
    with pytest.raises(openai.NotFoundError) as caught:
        await client.chat.completions.create(model="nope", messages=HELLO)
    assert caught.value.body["code"] == "model_not_found"
    assert "'nope'" in caught.value.body["message"] and "m" in caught.value.body["message"]
    # The engine's own refusal (a prompt too long for its context) is passed on as it is.
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "word " * 100}])
    assert caught.value.body["code"] == "context_length_exceeded"
    async with http.post(gw.base_url + "/chat/completions", data=b"{not json",
                         headers={"Content-Type": "application/json"}) as resp:
        body = await resp.json()
        assert resp.status == 400 and body["error"]["code"] == "invalid_json"
        assert set(body["error"]) == {"message", "type", "param", "code"}
        assert resp.headers["x-request-id"].startswith("req_")
    async with http.post(gw.base_url + "/chat/completions", json={"messages": HELLO}) as resp:
        assert (await resp.json())["error"]["code"] == "missing_model"
    async with http.get(gw.url + "/v1/nothing-here") as resp:
        assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"
        assert resp.headers["x-request-id"]
    rows = await gw.settle(4)
    assert [r.status for r in rows[:2]] == [404, 400]
    assert rows[0].outcome == "refused" and rows[1].outcome == "error"


async def test_a_sane_client_request_id_is_echoed(sim, gateway, http):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    body = {"model": "m", "messages": HELLO, "max_tokens": 1}
    async with http.post(gw.base_url + "/chat/completions", json=body, headers={"x-request-id": "trace-7.a"}) as resp:
        assert resp.headers["x-request-id"] == "trace-7.a"
        ours = resp.headers["x-llmgw-request-id"]
    async with http.post(gw.base_url + "/chat/completions", json=body,
                         headers={"x-request-id": "no spaces or <tags> please"}) as resp:
        assert resp.headers["x-request-id"].startswith("req_")
    rows = await gw.settle(2)
    # The row's id is always the gateway's, so a client cannot make two rows collide.
    assert rows[0].request_id == ours and "client_request_id=trace-7.a" in rows[0].tags
