"""The engine as the official openai SDK sees it, sync and async."""

from __future__ import annotations

import asyncio
import json
import math

import openai
import pytest

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "note": {"type": "string"},
            },
            "required": ["city", "unit", "days"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}},
}
HELLO = [{"role": "user", "content": "Say something about rivers and cities."}]
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Oslo this week?"}]


def clients(engine):
    base = engine.url + "/v1"
    return openai.AsyncOpenAI(base_url=base, api_key="none"), openai.OpenAI(base_url=base, api_key="none")


async def test_chat_answers_with_usage_and_the_asked_length(sim):
    engine = await sim(models=["m1", "m2"])
    aclient, _ = clients(engine)
    reply = await aclient.chat.completions.create(model="m2", messages=HELLO, max_tokens=7)
    assert reply.object == "chat.completion"
    assert reply.model == "m2"
    choice = reply.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason == "length"
    usage = reply.usage
    assert usage.completion_tokens == 7
    assert usage.prompt_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + 7
    assert usage.prompt_tokens_details.cached_tokens == 0


async def test_no_max_tokens_gives_the_default_and_stop(sim):
    engine = await sim(max_tokens_default=5)
    aclient, _ = clients(engine)
    reply = await aclient.chat.completions.create(model="sim", messages=HELLO)
    assert reply.usage.completion_tokens == 5
    assert reply.choices[0].finish_reason == "stop"


async def test_max_completion_tokens_wins_over_max_tokens(sim):
    engine = await sim()
    aclient, _ = clients(engine)
    reply = await aclient.chat.completions.create(
        model="sim", messages=HELLO, max_tokens=9, max_completion_tokens=3)
    assert reply.usage.completion_tokens == 3


async def test_the_sync_client_works_too(sim):
    engine = await sim()
    _, client = clients(engine)

    def ask():
        models = client.models.list()
        reply = client.chat.completions.create(model="sim", messages=HELLO, max_tokens=4)
        return [m.id for m in models.data], reply

    names, reply = await asyncio.to_thread(ask)
    assert names == ["sim"]
    assert reply.usage.completion_tokens == 4


async def test_sync_streaming(sim):
    engine = await sim()
    _, client = clients(engine)

    def ask():
        stream = client.chat.completions.create(model="sim", messages=HELLO, max_tokens=6, stream=True)
        return [chunk for chunk in stream]

    chunks = await asyncio.to_thread(ask)
    assert chunks[-1].choices[0].finish_reason == "length"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 6


async def test_same_seed_same_text_other_seed_other_text(sim):
    engine = await sim()
    aclient, _ = clients(engine)

    async def text(seed, **kw):
        reply = await aclient.chat.completions.create(
            model="sim", messages=HELLO, max_tokens=20, seed=seed, temperature=0.8, **kw)
        return reply.choices[0].message.content

    first = await text(7)
    assert await text(7) == first
    assert await text(8) != first
    other = await sim(seed=1)
    reply = await clients(other)[0].chat.completions.create(
        model="sim", messages=HELLO, max_tokens=20, seed=7, temperature=0.8)
    assert reply.choices[0].message.content != first  # the engine seed counts too


async def test_stream_with_include_usage_matches_the_plain_answer(sim):
    engine = await sim()
    aclient, _ = clients(engine)
    plain = await aclient.chat.completions.create(model="sim", messages=HELLO, max_tokens=12, seed=3)
    stream = await aclient.chat.completions.create(
        model="sim", messages=HELLO, max_tokens=12, seed=3, stream=True,
        stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finish] == ["length"]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage.completion_tokens == 12
    assert last.usage.prompt_tokens == plain.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])


async def test_stream_without_include_usage_has_no_usage_chunk(sim):
    engine = await sim()
    aclient, _ = clients(engine)
    stream = await aclient.chat.completions.create(model="sim", messages=HELLO, max_tokens=3, stream=True)
    chunks = [c async for c in stream]
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


async def test_stop_strings_end_the_answer(sim):
    engine = await sim()
    aclient, _ = clients(engine)
    reply = await aclient.chat.completions.create(model="sim", messages=HELLO, max_tokens=200, stop=["."])
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    assert "." not in choice.message.content
    assert 0 < reply.usage.completion_tokens < 200
    stream = await aclient.chat.completions.create(
        model="sim", messages=HELLO, max_tokens=200, stop=["."], stream=True)
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == choice.message.content
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_n_gives_distinct_choices(sim):
    engine = await sim()
    aclient, _ = clients(engine)
    reply = await aclient.chat.completions.create(model="sim", messages=HELLO, max_tokens=8, n=3)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert len({c.message.content for c in reply.choices}) == 3
    assert reply.usage.completion_tokens == 24
    stream = await aclient.chat.completions.create(
        model="sim", messages=HELLO, max_tokens=8, n=2, stream=True)
    texts = {0: "", 1: ""}
    async for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
    assert texts[0] == reply.choices[0].message.content
    assert texts[1] == reply.choices[1].message.content


async def test_tools_give_a_tool_call_with_the_required_arguments(sim):
    engine = await sim()
    aclient, _ = clients(engine)
    reply = await aclient.chat.completions.create(
        model="sim", messages=ASK_WEATHER, tools=[WEATHER_TOOL, TIME_TOOL], max_tokens=100)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function"
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert set(args) == {"city", "unit", "days"}
    assert args["unit"] == "celsius"
    assert 1 <= args["days"] <= 7
    assert isinstance(args["city"], str) and args["city"]

    named = await aclient.chat.completions.create(
        model="sim", messages=HELLO, tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert named.choices[0].message.tool_calls[0].function.name == "get_time"

    none = await aclient.chat.completions.create(
        model="sim", messages=HELLO, tools=[WEATHER_TOOL], tool_choice="none", max_tokens=4)
    assert none.choices[0].finish_reason == "length"
    assert not none.choices[0].message.tool_calls

    # auto, and a message that asks for no tool: an answer in words, as a model gives one
    chat = await aclient.chat.completions.create(
        model="sim", messages=HELLO, tools=[WEATHER_TOOL, TIME_TOOL], max_tokens=4)
    assert chat.choices[0].message.content and not chat.choices[0].message.tool_calls
    required = await aclient.chat.completions.create(
        model="sim", messages=HELLO, tools=[WEATHER_TOOL, TIME_TOOL], tool_choice="required")
    assert required.choices[0].message.tool_calls[0].function.name == "get_weather"
    asked = await aclient.chat.completions.create(
        model="sim", messages=[{"role": "user", "content": "Use a tool to answer."}], tools=[TIME_TOOL])
    assert asked.choices[0].message.tool_calls[0].function.name == "get_time"
    after = await aclient.chat.completions.create(model="sim", tools=[WEATHER_TOOL], max_tokens=4, messages=[
        *ASK_WEATHER, {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])
    assert after.choices[0].message.content and not after.choices[0].message.tool_calls


async def test_tool_calls_stream(sim):
    engine = await sim()
    aclient, _ = clients(engine)
    stream = await aclient.chat.completions.create(
        model="sim", messages=ASK_WEATHER, tools=[WEATHER_TOOL], stream=True,
        stream_options={"include_usage": True})
    name, arguments, finish, usage = None, "", None, None
    async for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            for call in c.delta.tool_calls or ():
                name = call.function.name or name
                arguments += call.function.arguments or ""
            finish = c.finish_reason or finish
    assert name == "get_weather"
    assert set(json.loads(arguments)) == {"city", "unit", "days"}
    assert finish == "tool_calls"
    assert usage.completion_tokens > 0


async def test_response_format_gives_json(sim):
    engine = await sim()
    aclient, _ = clients(engine)
    reply = await aclient.chat.completions.create(
        model="sim", messages=HELLO, response_format={"type": "json_object"}, max_tokens=200)
    assert isinstance(json.loads(reply.choices[0].message.content), dict)
    schema = {"type": "object", "properties": {"title": {"type": "string"},
                                               "score": {"type": "number", "maximum": 1}},
              "required": ["title", "score"]}
    reply = await aclient.chat.completions.create(
        model="sim", messages=HELLO, max_tokens=200,
        response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    value = json.loads(reply.choices[0].message.content)
    assert set(value) == {"title", "score"} and value["score"] <= 1


async def test_completions_plain_streamed_echoed_and_batched(sim):
    engine = await sim()
    aclient, _ = clients(engine)
    reply = await aclient.completions.create(model="sim", prompt="Once upon a time", max_tokens=5, seed=1)
    assert reply.object == "text_completion"
    assert reply.usage.prompt_tokens == 4 and reply.usage.completion_tokens == 5
    stream = await aclient.completions.create(
        model="sim", prompt="Once upon a time", max_tokens=5, seed=1, stream=True,
        stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == reply.choices[0].text
    assert chunks[-1].usage.completion_tokens == 5
    echoed = await aclient.completions.create(model="sim", prompt="Hi", max_tokens=2, echo=True)
    assert echoed.choices[0].text.startswith("Hi")
    batch = await aclient.completions.create(model="sim", prompt=["one", "two three"], max_tokens=2, n=2)
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert batch.usage.prompt_tokens == 3


async def test_embeddings(sim):
    engine = await sim(embedding_dim=64)
    aclient, _ = clients(engine)
    reply = await aclient.embeddings.create(model="sim", input=["rivers and cities", "rivers and towns", "x"])
    vectors = [d.embedding for d in reply.data]
    assert [d.index for d in reply.data] == [0, 1, 2]
    assert all(len(v) == 64 for v in vectors)
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-4) for v in vectors)
    assert reply.usage.prompt_tokens == 7 and reply.usage.total_tokens == 7

    def cosine(a, b):
        return sum(x * y for x, y in zip(a, b))

    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])
    single = await aclient.embeddings.create(model="sim", input="rivers and cities", encoding_format="float")
    assert single.data[0].embedding == pytest.approx(vectors[0], abs=1e-6)
    short = await aclient.embeddings.create(model="sim", input="rivers", dimensions=16)
    assert len(short.data[0].embedding) == 16


async def test_sdk_errors(sim):
    engine = await sim(context_length=50)
    aclient, _ = clients(engine)
    with pytest.raises(openai.NotFoundError) as missing:
        await aclient.chat.completions.create(model="nope", messages=HELLO)
    assert missing.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as too_long:
        await aclient.chat.completions.create(model="sim", messages=HELLO, max_tokens=100)
    assert "maximum context length is 50 tokens" in too_long.value.message
