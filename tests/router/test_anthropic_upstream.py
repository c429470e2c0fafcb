"""A model served by an Anthropic-shaped provider (`endpoints[].api: anthropic`), asked in OpenAI's API
and in Anthropic's: the gateway translates the chat completion to a Messages request and the answer
back, whole or streamed, tools included.

The provider is a fake the test runs: it checks what a real one checks (the key in x-api-key, the
version header, max_tokens present, alternating turns) and answers as Anthropic does.
"""

from __future__ import annotations

import json

import anthropic
import pytest
from aiohttp import web

from .conftest import HELLO

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}}, "required": ["city"]}}}


def _sse(name: str, data: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


@pytest.fixture
async def provider():
    seen: list[dict] = []

    async def messages(request: web.Request) -> web.StreamResponse:
        if request.headers.get("x-api-key") != "sk-ant-test" or request.headers.get("anthropic-version") is None:
            return web.json_response({"type": "error", "error": {"type": "authentication_error",
                                                                 "message": "invalid x-api-key"}}, status=401)
        body = await request.json()
        seen.append(body)
        if "max_tokens" not in body:
            return web.json_response({"type": "error", "error": {"type": "invalid_request_error",
                                                                 "message": "max_tokens: Field required"}}, status=400)
        roles = [m["role"] for m in body["messages"]]
        assert all(a != b for a, b in zip(roles, roles[1:])), "turns must alternate"
        wants_tool = body.get("tool_choice", {}).get("type") in ("any", "tool")
        usage = {"input_tokens": 12, "output_tokens": 5, "cache_read_input_tokens": 3,
                 "cache_creation_input_tokens": 0}
        if not body.get("stream"):
            content = ([{"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Oslo"}}]
                       if wants_tool else [{"type": "text", "text": "Rivers run to the sea."}])
            return web.json_response({"id": "msg_01", "type": "message", "role": "assistant",
                                      "model": body["model"], "content": content,
                                      "stop_reason": "tool_use" if wants_tool else "end_turn",
                                      "stop_sequence": None, "usage": usage})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_sse("message_start", {"type": "message_start", "message": {
            "id": "msg_02", "type": "message", "role": "assistant", "model": body["model"], "content": [],
            "stop_reason": None, "usage": {"input_tokens": 12, "output_tokens": 1}}}))
        await response.write(_sse("ping", {"type": "ping"}))
        if wants_tool:
            await response.write(_sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                              "content_block": {"type": "tool_use", "id": "toolu_02B",
                                                                                "name": "get_weather", "input": {}}}))
            for part in ('{"city": ', '"Oslo"}'):
                await response.write(_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                                  "delta": {"type": "input_json_delta",
                                                                            "partial_json": part}}))
        else:
            await response.write(_sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                              "content_block": {"type": "text", "text": ""}}))
            for word in ("Rivers ", "run."):
                await response.write(_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                                  "delta": {"type": "text_delta", "text": word}}))
        await response.write(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
        await response.write(_sse("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": "tool_use" if wants_tool else "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 5}}))
        await response.write(_sse("message_stop", {"type": "message_stop"}))
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1", seen
    await runner.cleanup()


def _model(url: str) -> dict:
    return {"name": "claude", "endpoints": [{"url": url, "api": "anthropic", "api_key": "sk-ant-test",
                                             "model": "claude-sonnet-4-5"}]}


async def test_openai_clients_are_answered_by_an_anthropic_provider(provider, gateway):
    url, seen = provider
    gw = await gateway([_model(url)])
    client = gw.client()
    reply = await client.chat.completions.create(
        model="claude", messages=[{"role": "system", "content": "Be brief."}, *HELLO], max_tokens=50,
        temperature=1.5, stop=["END"])
    assert reply.choices[0].message.content == "Rivers run to the sea."
    assert reply.choices[0].finish_reason == "stop"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (15, 5)
    assert reply.usage.prompt_tokens_details.cached_tokens == 3
    sent = seen[-1]
    assert (sent["model"], sent["system"], sent["max_tokens"], sent["temperature"], sent["stop_sequences"]) == (
        "claude-sonnet-4-5", "Be brief.", 50, 1.0, ["END"])

    stream = await client.chat.completions.create(model="claude", messages=HELLO, stream=True,
                                                  stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Rivers run."
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage.completion_tokens == 5
    assert seen[-1]["max_tokens"] == 4096, "Anthropic requires max_tokens: a default is sent"

    called = await client.chat.completions.create(model="claude", messages=HELLO, tools=[WEATHER],
                                                  tool_choice="required")
    call = called.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "call_01A", "get_weather", {"city": "Oslo"})
    assert called.choices[0].finish_reason == "tool_calls"
    assert seen[-1]["tools"][0]["input_schema"]["properties"] == {"city": {"type": "string"}}

    follow = await client.chat.completions.create(model="claude", max_tokens=20, tools=[WEATHER], messages=[
        *HELLO, called.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"}])
    assert follow.choices[0].message.content
    sent = seen[-1]["messages"]
    assert sent[1]["content"][0] == {"type": "tool_use", "id": "toolu_01A", "name": "get_weather",
                                     "input": {"city": "Oslo"}}
    assert sent[2] == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A",
                                                    "content": "sunny"}]}

    stream = await client.chat.completions.create(model="claude", messages=HELLO, tools=[WEATHER],
                                                  tool_choice="required", stream=True)
    calls = [t for c in [x async for x in stream] for ch in c.choices for t in ch.delta.tool_calls or ()]
    assert calls[0].id == "call_02B" and "".join(t.function.arguments or "" for t in calls) == '{"city": "Oslo"}'


async def test_anthropic_clients_reach_an_anthropic_provider_through_the_gateway(provider, gateway):
    url, seen = provider
    gw = await gateway([_model(url)])
    client = anthropic.AsyncAnthropic(base_url=gw.url, api_key="none", max_retries=0)
    try:
        message = await client.messages.create(model="claude", max_tokens=30, messages=HELLO)
        async with client.messages.stream(model="claude", max_tokens=30, messages=HELLO) as stream:
            text = "".join([t async for t in stream.text_stream])
    finally:
        await client.close()
    assert message.content[0].text == "Rivers run to the sea." and message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 12 and message.usage.cache_read_input_tokens == 3
    assert text == "Rivers run."


async def test_a_provider_refusal_comes_back_in_the_clients_shape(provider, gateway):
    url, _ = provider
    gw = await gateway([{"name": "claude", "endpoints": [{"url": url, "api": "anthropic", "api_key": "wrong"}]}])
    import openai

    with pytest.raises(openai.APIStatusError) as caught:
        await gw.client().chat.completions.create(model="claude", messages=HELLO, max_tokens=5)
    assert caught.value.status_code == 401 and "invalid x-api-key" in caught.value.message
    with pytest.raises(openai.BadRequestError) as refused:
        await gw.client().embeddings.create(model="claude", input="hi")
    assert refused.value.code == "unsupported_endpoint"
