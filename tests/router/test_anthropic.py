"""Anthropic's Messages API at /v1/messages, as the official anthropic SDK sees it, and its translation."""

from __future__ import annotations

import asyncio
import base64

import anthropic
import pytest
from aiohttp import web

from llmgw.accounting.api import LimitExceeded
from llmgw.router.anthropic import MessageEvents, message_from_chat, to_chat
from llmgw.router.errors import GatewayError, dumps, loads
from llmgw.router.sse import SSERelay

from .conftest import model, principal

HI = [{"role": "user", "content": "Say something about rivers."}]
WEATHER = {
    "name": "get_weather", "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()


def client(gw, key: str = "none", **kw) -> anthropic.AsyncAnthropic:
    made = anthropic.AsyncAnthropic(base_url=gw.url, api_key=key, max_retries=0, **kw)
    gw.clients.append(made)
    return made


def sync_client(gw, key: str = "none") -> anthropic.Anthropic:
    made = anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0)
    gw.clients.append(made)
    return made


# ---------------------------------------------------------------- through the SDK


async def test_a_message_with_a_system_prompt_and_usage(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    raw = await client(gw).messages.with_raw_response.create(
        model="m", max_tokens=6, system="Answer briefly.", messages=HI,
        extra_headers={"anthropic-version": "2023-06-01"})
    message = await raw.parse()
    assert message.type == "message" and message.role == "assistant" and message.model == "m"
    assert message.id.startswith("msg_")
    assert [b.type for b in message.content] == ["text"] and message.content[0].text
    assert message.stop_reason == "max_tokens" and message.stop_sequence is None
    assert message.usage.output_tokens == 6 and message.usage.input_tokens > 0
    assert message.usage.cache_read_input_tokens == 0
    row = (await gw.settle(1))[0]
    assert row.request_id == raw.headers["x-llmgw-request-id"]
    assert (row.model_requested, row.model_served, row.status, row.outcome) == ("m", "m", 200, "ok")
    assert (row.prompt_tokens, row.completion_tokens) == (message.usage.input_tokens, 6)
    assert gw.accountant.settled == [("m", "m", row.prompt_tokens, 6)]


async def test_system_blocks_count_like_a_system_string(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    text = await client(gw).messages.create(model="m", max_tokens=1, system="Be kind. Be short.", messages=HI)
    blocks = await client(gw).messages.create(
        model="m", max_tokens=1, messages=HI,
        system=[{"type": "text", "text": "Be kind."}, {"type": "text", "text": "Be short.",
                                                       "cache_control": {"type": "ephemeral"}}])
    bare = await client(gw).messages.create(model="m", max_tokens=1, messages=HI)
    assert blocks.usage.input_tokens == text.usage.input_tokens > bare.usage.input_tokens


async def test_the_sync_client_and_an_echo_answer_that_ends_its_turn(sim, gateway):
    engine = await sim(models=["echo-m"])
    gw = await gateway([model("echo-m", engine)])

    def ask():
        return sync_client(gw).messages.create(
            model="echo-m", max_tokens=50, messages=[{"role": "user", "content": "three small words"}])

    message = await asyncio.to_thread(ask)
    assert message.content[0].text == "three small words"
    assert message.stop_reason == "end_turn"


async def test_streaming_gives_anthropics_event_sequence(sim, gateway):
    engine = await sim(models=["m"], tpot=0.002)
    gw = await gateway([model("m", engine)])
    async with client(gw).messages.stream(model="m", max_tokens=8, messages=HI) as stream:
        pieces = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert len(pieces) == 8
    assert final.content[0].text == "".join(pieces)
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 8 and final.usage.input_tokens > 0
    row = (await gw.settle(1))[0]
    assert (row.completion_tokens, row.outcome) == (8, "ok") and row.ttft_ms is not None


async def test_the_raw_stream_names_every_event_and_pings(sim, gateway, http):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    async with http.post(gw.url + "/v1/messages", headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
                         json={"model": "m", "max_tokens": 3, "stream": True, "messages": HI}) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
        body = (await resp.read()).decode()
    events = [block.split("\n") for block in body.strip().split("\n\n")]
    names = [lines[0].removeprefix("event: ") for lines in events]
    assert names == ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    for lines, name in zip(events, names):
        assert loads(lines[1].removeprefix("data: "))["type"] == name
    delta = loads(events[-2][1].removeprefix("data: "))
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 3 and delta["usage"]["input_tokens"] > 0
    assert "[DONE]" not in body and "chat.completion" not in body


async def test_a_tool_use_round_trip(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    ask = client(gw)
    asking = [{"role": "user", "content": "What is the weather in Oslo?"}]
    first = await ask.messages.create(model="m", max_tokens=200, tools=[WEATHER], messages=asking)
    assert first.stop_reason == "tool_use"
    (use,) = first.content
    assert use.type == "tool_use" and use.name == "get_weather" and isinstance(use.input["city"], str)
    history = [*asking, {"role": "assistant", "content": first.content},
               {"role": "user", "content": [
                   {"type": "tool_result", "tool_use_id": use.id, "content": '{"raining": false}'},
                   {"type": "text", "text": "And tomorrow?"}]}]
    second = await ask.messages.create(model="m", max_tokens=5, tools=[WEATHER], tool_choice={"type": "none"},
                                       messages=history)
    assert second.content[0].type == "text" and second.stop_reason == "max_tokens"
    # The call and its result were sent; the start the two requests share was in the engine's prefix cache.
    assert second.usage.cache_read_input_tokens > 0
    assert second.usage.input_tokens + second.usage.cache_read_input_tokens > first.usage.input_tokens
    forced = await ask.messages.create(model="m", max_tokens=200, tools=[WEATHER],
                                       tool_choice={"type": "tool", "name": "get_weather"}, messages=history)
    assert forced.stop_reason == "tool_use"


async def test_a_streamed_tool_call_arrives_as_input_json_deltas(sim, gateway):
    engine = await sim(models=["m"], tpot=0.001)
    gw = await gateway([model("m", engine)])
    kinds = []
    async with client(gw).messages.stream(model="m", max_tokens=200, tools=[WEATHER], messages=HI,
                                          tool_choice={"type": "any"}) as stream:
        async for event in stream:
            if event.type == "content_block_delta":
                kinds.append(event.delta.type)
        final = await stream.get_final_message()
    assert set(kinds) == {"input_json_delta"} and len(kinds) > 1
    (use,) = final.content
    assert use.type == "tool_use" and use.name == "get_weather" and isinstance(use.input["city"], str)
    assert final.stop_reason == "tool_use"


async def test_images_by_base64_and_by_url_are_sent(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    content = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
               {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
               {"type": "text", "text": "What is in these?"}]
    message = await client(gw).messages.create(model="m", max_tokens=3, messages=[{"role": "user",
                                                                                   "content": content}])
    assert message.content[0].text
    counted = await client(gw).messages.count_tokens(model="m", messages=[{"role": "user", "content": content}])
    text_only = await client(gw).messages.count_tokens(model="m", messages=[{"role": "user",
                                                                             "content": content[2:]}])
    assert counted.input_tokens > text_only.input_tokens


async def test_count_tokens_asks_the_engine_and_charges_nothing(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    ask = client(gw)
    short = await ask.messages.count_tokens(model="m", messages=HI)
    longer = await ask.messages.count_tokens(model="m", messages=HI, system="You answer in verse.",
                                             tools=[WEATHER])
    served = await ask.messages.create(model="m", max_tokens=1, messages=HI)
    assert short.input_tokens == served.usage.input_tokens  # the same tokenizer and template
    assert longer.input_tokens > short.input_tokens
    await gw.settle(1)
    assert len(gw.accountant.rows) == 1 and gw.accountant.admitted == ["m"]  # only the message


async def test_count_tokens_with_llama_servers_tokenizer_and_with_none(gateway):
    async def apply_template(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"prompt": " ".join(m["content"] for m in body["messages"])})

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"tokens": list(range(len(body.get("content", "").split())))})

    llama = web.Application()
    llama.router.add_post("/apply-template", apply_template)
    llama.router.add_post("/tokenize", tokenize)
    silent = web.Application()  # an engine with neither
    runners = []
    urls = []
    for app in (llama, silent):
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{runner.addresses[0][1]}/v1")
    try:
        gw = await gateway([model("llama", urls[0]), model("other", urls[1])])
        ask = client(gw)
        counted = await ask.messages.count_tokens(model="llama", messages=[{"role": "user", "content": "a b c d e"}])
        assert counted.input_tokens == 5
        estimated = await ask.messages.count_tokens(model="other", messages=HI)
        assert 0 < estimated.input_tokens < 100
    finally:
        for runner in runners:
            await runner.cleanup()


# ---------------------------------------------------------------- refusals, in Anthropic's shape


async def test_a_bad_key_is_an_authentication_error(sim, gateway, http):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)], keys={"good": principal()})
    with pytest.raises(anthropic.AuthenticationError) as caught:
        await client(gw, "wrong").messages.create(model="m", max_tokens=1, messages=HI)
    assert caught.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                           "message": "unknown API key"}}
    with pytest.raises(anthropic.AuthenticationError):
        await client(gw, "wrong").messages.count_tokens(model="m", messages=HI)
    # The key as x-api-key, as Anthropic's own clients send it; or as a bearer token.
    for headers in ({"x-api-key": "good"}, {"Authorization": "Bearer good"}):
        async with http.post(gw.url + "/v1/messages", headers={**headers, "anthropic-version": "2023-06-01"},
                             json={"model": "m", "max_tokens": 1, "messages": HI}) as resp:
            assert resp.status == 200 and (await resp.json())["type"] == "message"
    async with http.post(gw.url + "/v1/messages", json={"model": "m", "max_tokens": 1, "messages": HI}) as resp:
        assert resp.status == 401 and (await resp.json())["error"]["type"] == "authentication_error"


async def test_an_unknown_model_is_not_found_and_a_forbidden_one_a_permission_error(sim, gateway):
    engine = await sim(models=["m", "n"])
    gw = await gateway([model("m", engine), model("n", engine)], keys={"k": principal(models={"m"})})
    ask = client(gw, "k")
    for call in (ask.messages.create(model="nope", max_tokens=1, messages=HI),
                 ask.messages.count_tokens(model="nope", messages=HI)):
        with pytest.raises(anthropic.NotFoundError) as caught:
            await call
        assert caught.value.body["error"]["type"] == "not_found_error"
        assert "your key may use: m" in caught.value.body["error"]["message"]
    with pytest.raises(anthropic.PermissionDeniedError):
        await ask.messages.create(model="n", max_tokens=1, messages=HI)


async def test_a_rate_limit_is_a_rate_limit_error_with_retry_after(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    gw.accountant.refuse["m"] = LimitExceeded("rate_limited", "project prj-1 is over 10 requests a minute",
                                              scope="project", retry_after=3.2)
    with pytest.raises(anthropic.RateLimitError) as caught:
        await client(gw).messages.create(model="m", max_tokens=1, messages=HI)
    assert caught.value.response.headers["Retry-After"] == "4"
    assert caught.value.body["error"] == {"type": "rate_limit_error",
                                          "message": "project prj-1 is over 10 requests a minute"}
    row = (await gw.settle(1))[0]
    assert (row.status, row.outcome) == (429, "refused")


async def test_no_replica_is_overloaded_and_a_malformed_request_invalid(gateway):
    gw = await gateway([model("m")])  # a cluster model with no replica running
    with pytest.raises(anthropic.OverloadedError) as caught:
        await client(gw).messages.create(model="m", max_tokens=1, messages=HI)
    assert caught.value.status_code == 529 and caught.value.body["error"]["type"] == "overloaded_error"
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client(gw).messages.create(model="m", max_tokens=1, messages="not a list")  # type: ignore[arg-type]
    assert caught.value.body["error"]["type"] == "invalid_request_error"


async def test_an_engine_refusal_is_relayed_in_anthropics_shape(sim, gateway):
    engine = await sim(models=["m"], context_length=64)
    gw = await gateway([model("m", engine)])
    with pytest.raises(anthropic.BadRequestError) as caught:  # a prompt longer than the context
        await client(gw).messages.create(model="m", max_tokens=100,
                                         messages=[{"role": "user", "content": "word " * 100}])
    assert caught.value.body["type"] == "error"
    assert "maximum context length" in caught.value.body["error"]["message"]


async def test_a_stream_cut_by_the_gateway_ends_with_an_error_event(sim, gateway):
    engine = await sim(models=["m"], tpot=0.5)
    gw = await gateway([model("m", engine)], router={"timeouts": {"idle": "100ms"}})
    with pytest.raises(anthropic.APIStatusError) as caught:
        async with client(gw).messages.stream(model="m", max_tokens=10, messages=HI) as stream:
            async for _ in stream:
                pass
    assert caught.value.body["error"]["type"] == "api_error" and "idle" in caught.value.body["error"]["message"]
    row = (await gw.settle(1))[0]
    assert row.outcome == "error"


# ---------------------------------------------------------------- the translation


def test_a_request_translated_to_a_chat_completion():
    chat = to_chat({
        "model": "m", "max_tokens": 100, "stop_sequences": ["END"], "temperature": 0.3, "top_k": 5,
        "system": [{"type": "text", "text": "A."}, {"type": "text", "text": "B."}],
        "metadata": {"user_id": "u-1"}, "thinking": {"type": "enabled", "budget_tokens": 10}, "stream": True,
        "tools": [WEATHER, {"type": "web_search_20250305", "name": "web_search"}],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "QUJD"}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "x"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Ankara"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
                 "content": [{"type": "text", "text": "down"},
                             {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]},
                {"type": "text", "text": "Try again."}]},
        ],
    })
    assert chat["messages"] == [
        {"role": "system", "content": "A.\n\nB."},
        {"role": "user", "content": [{"type": "text", "text": "Look:"},
                                     {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}}]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "get_weather",
                                                              "arguments": '{"city": "Ankara"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: down"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                                     {"type": "text", "text": "Try again."}]},
    ]
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER["input_schema"], "description": "The weather in a city."}}]
    assert chat["tool_choice"] == "auto" and chat["parallel_tool_calls"] is False
    assert (chat["max_tokens"], chat["stop"], chat["temperature"], chat["top_k"]) == (100, ["END"], 0.3, 5)
    assert chat["user"] == "u-1" and chat["stream_options"] == {"include_usage": True}
    assert "thinking" not in chat and "metadata" not in chat


def test_stop_reasons_and_usage_of_a_whole_answer():
    def answer(finish, *, stop_reason=None, calls=None, content="x"):
        return {"choices": [{"index": 0, "finish_reason": finish, "stop_reason": stop_reason,
                             "message": {"role": "assistant", "content": content, "tool_calls": calls or []}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}}

    def reason(message):
        return message["stop_reason"], message["stop_sequence"]

    assert reason(message_from_chat(answer("stop"), "m", [])) == ("end_turn", None)
    assert reason(message_from_chat(answer("length"), "m", [])) == ("max_tokens", None)
    assert reason(message_from_chat(answer("stop", stop_reason="END"), "m", ["END"])) == ("stop_sequence", "END")
    assert reason(message_from_chat(answer("stop", stop_reason=151643), "m", ["END"])) == ("end_turn", None)
    assert reason(message_from_chat(answer("content_filter"), "m", [])) == ("refusal", None)
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    message = message_from_chat(answer("tool_calls", calls=[call], content=None), "m", [])
    assert reason(message) == ("tool_use", None)
    assert message["content"] == [{"type": "tool_use", "id": "toolu_c1", "name": "f", "input": {"a": 1}}]
    assert message["usage"] == {"input_tokens": 6, "output_tokens": 2, "cache_read_input_tokens": 4,
                                "cache_creation_input_tokens": 0}


def _chunk(delta=None, finish=None, **extra) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish, **extra}]}
    return b"data: " + dumps(body) + b"\n\n"


def _events(out: bytes) -> list[tuple[str, dict]]:
    events = []
    for block in out.decode().strip().split("\n\n"):
        name, data = block.split("\n")
        events.append((name.removeprefix("event: "), loads(data.removeprefix("data: "))))
    return events


def test_a_stream_with_text_then_two_tool_calls_and_a_stop_sequence():
    relay = MessageEvents(SSERelay(strip_usage=False), "m", ["END"])
    out = relay.feed(_chunk({"role": "assistant", "content": ""}) + _chunk({"content": "Hi"}))
    out += relay.feed(_chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}}]}))
    out += relay.feed(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]})
                      + _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}))
    out += relay.feed(_chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}]}))
    out += relay.feed(_chunk({}, "stop", stop_reason="END")
                      + b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}\n\n'
                      + b"data: [DONE]\n\n")
    assert relay.close() == b""
    events = _events(out)
    assert [n for n, _ in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    starts = [e["content_block"] for n, e in events if n == "content_block_start"]
    assert starts == [{"type": "text", "text": ""}, {"type": "tool_use", "id": "toolu_a", "name": "f", "input": {}},
                      {"type": "tool_use", "id": "toolu_b", "name": "g", "input": {}}]
    assert [e["index"] for n, e in events if n.startswith("content_block")] == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
    delta = events[-2][1]
    # A called tool wins over the stop string.
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"] == {"input_tokens": 7, "output_tokens": 3, "cache_read_input_tokens": 0,
                              "cache_creation_input_tokens": 0}
    plain = MessageEvents(SSERelay(strip_usage=False), "m", ["END"])
    ended = _events(plain.feed(_chunk({"content": "x"}) + _chunk({}, "stop", stop_reason="END")) + plain.close())
    assert ended[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}


def test_a_stream_cut_or_failed_ends_with_an_error_event():
    relay = MessageEvents(SSERelay(strip_usage=False), "m", [])
    relay.feed(_chunk({"content": "x"}))
    cut = _events(relay.error_event(GatewayError(504, "upstream_timeout", "the engine went quiet")))
    assert cut == [("error", {"type": "error", "error": {"type": "api_error", "message": "the engine went quiet"}})]
    engine = MessageEvents(SSERelay(strip_usage=False), "m", [])
    failed = _events(engine.feed(b'data: {"error":{"message":"out of memory","code":500}}\n\n'))
    assert [n for n, _ in failed] == ["message_start", "ping", "error"]
    assert failed[-1][1]["error"]["message"] == "out of memory"


async def test_a_guardrail_that_stops_the_answer_is_a_refusal(sim, gateway):
    engine = await sim(models=["echo-m"], tpot=0.002)
    policy = {"policies": {"answers": {"output": {"pii": {"secret": "block"}}}}, "default": ["answers"]}
    gw = await gateway([model("echo-m", engine)], guard=policy)
    words = " ".join(f"word{i}" for i in range(60))
    ask = [{"role": "user", "content": f"Here it is: AKIAIOSFODNN7EXAMPLE and then {words}."}]
    async with client(gw).messages.stream(model="echo-m", max_tokens=200, messages=ask) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    assert final.stop_reason == "refusal"
    assert "AKIA" not in text and "word59" not in text
    whole = await client(gw).messages.create(model="echo-m", max_tokens=200, messages=ask)
    assert whole.stop_reason == "refusal" and "AKIA" not in str(whole.content)
