"""The official openai and anthropic Python SDKs against the gateway: a plain call, a stream and a tool
call each, every answer of an OpenAI endpoint checked against OpenAI's published document."""

from __future__ import annotations

import json

import anthropic
import openai

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}}, "required": ["city"]}}}
HELLO = [{"role": "user", "content": "Say something about rivers."}]
ASK = [{"role": "user", "content": "What is the weather in Oslo?"}]


async def test_the_openai_sdk_plain_stream_tools_responses_and_models(served):
    s = await served()
    client = openai.AsyncOpenAI(base_url=s.base_url, api_key="none", max_retries=0)
    try:
        reply = await client.chat.completions.create(model="sim", messages=HELLO, max_tokens=8)
        assert reply.choices[0].message.content and reply.choices[0].message.refusal is None
        stream = await client.chat.completions.create(model="sim", messages=HELLO, max_tokens=8, stream=True,
                                                      stream_options={"include_usage": True})
        chunks = [c async for c in stream]
        assert chunks[-1].usage.completion_tokens == 8
        called = await client.chat.completions.create(model="sim", messages=ASK, tools=[WEATHER])
        call = called.choices[0].message.tool_calls[0]
        assert call.id.startswith("call_") and "city" in json.loads(call.function.arguments)
        words = await client.chat.completions.create(model="sim", messages=HELLO, tools=[WEATHER], max_tokens=5)
        assert words.choices[0].message.content and not words.choices[0].message.tool_calls
        logprobs = await client.chat.completions.create(model="sim", messages=HELLO, max_tokens=3, logprobs=True,
                                                        top_logprobs=2)
        assert len(logprobs.choices[0].logprobs.content) == 3
        text = await client.completions.create(model="sim", prompt="Rivers", max_tokens=4)
        assert text.choices[0].text
        response = await client.responses.create(model="sim", input="Hello", max_output_tokens=16)
        assert response.output_text
        events = [e async for e in await client.responses.create(model="sim", input="Hello", stream=True,
                                                                 max_output_tokens=16)]
        assert events[-1].type in ("response.completed", "response.incomplete")
        tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
        used = await client.responses.create(model="sim", input="What is the weather in Oslo?", tools=[tool])
        assert used.output[0].type == "function_call"
        assert [m.id for m in (await client.models.list()).data] == ["sim"]
    finally:
        await client.close()
    assert len(s.proxy.exchanges) == 10
    s.check()


async def test_the_anthropic_sdk_plain_stream_and_tools(served):
    s = await served()
    client = anthropic.AsyncAnthropic(base_url=s.url, api_key="none", max_retries=0)
    tool = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}
    try:
        message = await client.messages.create(model="sim", max_tokens=8, messages=HELLO)
        assert message.content[0].text and message.stop_reason == "max_tokens"
        async with client.messages.stream(model="sim", max_tokens=8, messages=HELLO) as stream:
            assert "".join([t async for t in stream.text_stream])
        used = await client.messages.create(model="sim", max_tokens=100, messages=ASK, tools=[tool])
        assert used.stop_reason == "tool_use" and used.content[0].id.startswith("toolu_")
    finally:
        await client.close()
    s.check()


async def test_errors_fit_the_document_too(served):
    s = await served()
    client = openai.AsyncOpenAI(base_url=s.base_url, api_key="none", max_retries=0)
    try:
        for bad in ({"model": "nope"}, {"model": "sim", "temperature": 3}):
            try:
                await client.chat.completions.create(messages=HELLO, **bad)
            except openai.APIStatusError as exc:
                assert exc.status_code in (400, 404)
    finally:
        await client.close()
    assert [e.status for e in s.proxy.exchanges] == [404, 400]
    s.check()
