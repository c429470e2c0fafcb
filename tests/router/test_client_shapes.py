"""Fields and headers as OpenAI's and Anthropic's own services have them, seen through their SDKs.

refusal and annotations on chat messages, call_/toolu_ tool call ids (the
engine's are chatcmpl-tool-…), request-id and x-request-id on every answer,
rate-limit headers from the key's own limits, the Responses usage and tools
as OpenAI echoes them.
"""

from __future__ import annotations

import datetime as dt
import json

import anthropic
import attrs
import openai
import pytest

from llmgw.accounting.api import Reservation
from llmgw.accounting.limits import RateLimiter
from llmgw.auth.principal import Principal

from .conftest import HELLO, FakeAccountant, model, principal

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
PICK_WEATHER = {"type": "function", "function": {"name": "get_weather"}}


@attrs.define
class LimitedAccountant(FakeAccountant):
    """Counts requests and tokens against the key's limits as the real accountant does."""

    rates: RateLimiter = attrs.Factory(lambda: RateLimiter(default_rpm=60, default_tpm=10_000))

    async def admit(self, principal: Principal, model: str, *, prompt_tokens: int, max_tokens: int) -> Reservation:
        self.rates.admit(principal, prompt_tokens)
        return await super().admit(principal, model, prompt_tokens=prompt_tokens, max_tokens=max_tokens)

    def headroom(self, principal: Principal) -> list:
        return self.rates.headroom(principal)


async def test_chat_messages_carry_refusal_annotations_and_call_ids(sim, gateway, http):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    async with http.post(gw.base_url + "/chat/completions",
                         json={"model": "m", "messages": HELLO, "max_tokens": 3}) as resp:
        message = (await resp.json())["choices"][0]["message"]
    assert message["refusal"] is None and message["annotations"] == []

    reply = await gw.client().chat.completions.create(model="m", messages=HELLO, tools=[WEATHER],
                                                      tool_choice=PICK_WEATHER)
    call = reply.choices[0].message.tool_calls[0]
    assert call.id.startswith("call_") and json.loads(call.function.arguments)["city"]

    stream = await gw.client().chat.completions.create(model="m", messages=HELLO, tools=[WEATHER],
                                                       tool_choice=PICK_WEATHER, stream=True)
    ids = [c.id for chunk in [x async for x in stream] for choice in chunk.choices
           for c in choice.delta.tool_calls or () if c.id]
    assert ids and all(i.startswith("call_") for i in ids)


async def test_anthropic_tool_use_ids_are_toolu(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    client = anthropic.AsyncAnthropic(base_url=gw.url, api_key="none", max_retries=0)
    tool = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}
    try:
        message = await client.messages.create(model="m", max_tokens=50, messages=HELLO, tools=[tool],
                                               tool_choice={"type": "tool", "name": "get_weather"})
        async with client.messages.stream(model="m", max_tokens=50, messages=HELLO, tools=[tool],
                                          tool_choice={"type": "any"}) as stream:
            streamed = await stream.get_final_message()
    finally:
        await client.close()
    for answer in (message, streamed):
        uses = [b for b in answer.content if b.type == "tool_use"]
        assert uses and all(b.id.startswith("toolu_") for b in uses)
        assert answer.stop_reason == "tool_use"


async def test_every_answer_has_request_id_and_x_request_id(sim, gateway, http):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)], keys={"sk": principal()})
    cases = [("POST", "/v1/chat/completions", {"model": "m", "messages": HELLO, "max_tokens": 2}, "sk", 200),
             ("POST", "/v1/chat/completions", {"model": "m", "messages": HELLO}, "wrong", 401),
             ("POST", "/v1/messages", {"model": "m", "messages": HELLO}, "sk", 400),
             ("GET", "/v1/nowhere", None, "sk", 404)]
    for method, path, body, key, status in cases:
        async with http.request(method, gw.url + path, json=body, headers={"Authorization": f"Bearer {key}"}) as r:
            assert r.status == status, (path, await r.text())
            assert r.headers["request-id"] == r.headers["x-request-id"] == r.headers["x-llmgw-request-id"]
            assert r.headers["request-id"].startswith("req_")


async def test_rate_limit_headers_come_from_the_keys_limits(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)], keys={"sk": principal()}, accountant=LimitedAccountant())
    raw = await gw.client("sk").chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=2)
    assert raw.headers["x-ratelimit-limit-requests"] == "60"
    assert raw.headers["x-ratelimit-remaining-requests"] == "59"
    assert raw.headers["x-ratelimit-limit-tokens"] == "10000"
    assert int(raw.headers["x-ratelimit-remaining-tokens"]) < 10000
    assert raw.headers["x-ratelimit-reset-requests"].endswith(("ms", "s"))

    client = anthropic.AsyncAnthropic(base_url=gw.url, api_key="sk", max_retries=0)
    try:
        answer = await client.messages.with_raw_response.create(model="m", max_tokens=2, messages=HELLO)
    finally:
        await client.close()
    assert answer.headers["anthropic-ratelimit-requests-limit"] == "60"
    assert answer.headers["anthropic-ratelimit-requests-remaining"] == "58"
    assert answer.headers["anthropic-ratelimit-tokens-limit"] == "10000"
    reset = dt.datetime.fromisoformat(answer.headers["anthropic-ratelimit-requests-reset"].replace("Z", "+00:00"))
    assert dt.timedelta(0) <= reset - dt.datetime.now(dt.UTC) <= dt.timedelta(seconds=61)
    assert "x-ratelimit-limit-requests" not in answer.headers


async def test_no_limits_no_rate_limit_headers(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    raw = await gw.client().chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=2)
    assert not [h for h in raw.headers if h.startswith("x-ratelimit")]


async def test_responses_usage_and_tools_as_openai_echoes_them(sim, gateway, http):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
    async with http.post(gw.base_url + "/responses",
                         json={"model": "m", "input": "Hi", "tools": [tool], "tool_choice": "none"}) as resp:
        body = await resp.json()
    assert body["usage"]["input_tokens_details"] == {"cached_tokens": 0, "cache_write_tokens": 0}
    assert body["tools"] == [{**tool, "description": None, "strict": None}]


@pytest.mark.parametrize("body, field", [
    ({"temperature": 3}, "temperature"), ({"max_tokens": 0}, "max_tokens"), ({"top_p": 1.5}, "top_p"),
    ({"n": 0}, "n"), ({"presence_penalty": -3}, "presence_penalty"), ({"frequency_penalty": 2.5},
                                                                       "frequency_penalty"),
])
async def test_out_of_range_values_are_refused_as_openai_does(sim, gateway, body, field):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    with pytest.raises(openai.BadRequestError) as caught:
        await gw.client().chat.completions.create(model="m", messages=HELLO, **body)
    assert caught.value.param == field


async def test_logprobs_reach_the_client_through_the_gateway(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    reply = await gw.client().chat.completions.create(model="m", messages=HELLO, max_tokens=3, logprobs=True,
                                                      top_logprobs=2)
    content = reply.choices[0].logprobs.content
    assert len(content) == 3 and all(len(t.top_logprobs) == 2 for t in content)
