"""Kept requests at the gateway (with a store, fake keys): what is kept of a whole and a streamed answer, and
that nothing is kept without a rule. The whole server (CLI, admin API, replay, sweep, forget) is in
test_kept_requests.py."""

from __future__ import annotations

import asyncio
import datetime as dt

from llmgw.router import kept_requests

from .conftest import model
from .stored import stored_gateway  # noqa: F401

HELLO = [{"role": "user", "content": "Tell me about the sea, briefly."}]


async def _kept(sg, count: int):
    for _ in range(100):
        kept = await sg.store.list_kept_requests()
        if len(kept) >= count:
            return kept
        await asyncio.sleep(0.01)
    return await sg.store.list_kept_requests()


async def test_nothing_is_kept_without_a_rule_and_a_keys_rule_wins_over_its_projects(sim, stored_gateway):
    engine = await sim(models=["m"])
    sg = await stored_gateway([model("m", engine)])
    await sg.client().chat.completions.create(model="m", messages=HELLO, max_tokens=2)
    await sg.client("sk-b").chat.completions.create(model="m", messages=HELLO, max_tokens=2)
    await asyncio.sleep(0.05)
    assert await sg.store.list_kept_requests() == []

    await sg.store.set_keep_rule("project", sg.project.id, dt.timedelta(days=7))
    await sg.store.set_keep_rule("key", "key-a", dt.timedelta(hours=1))
    kept_rules = kept_requests.rules_of(sg.data)
    kept_rules.forget()
    raw = await sg.client().chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=2)
    await sg.client("sk-b").chat.completions.create(model="m", messages=HELLO, max_tokens=2)
    (kept,) = await _kept(sg, 1)
    assert kept.id == raw.headers["x-request-id"] and kept.key_id == "key-a", "project B asked for nothing"
    assert kept.expires_at - kept.at == dt.timedelta(hours=1), "the key's own time, not its project's 7d"


async def test_a_whole_answer_and_a_streamed_one_are_kept_as_the_client_got_them(sim, stored_gateway):
    engine = await sim(models=["m"])
    sg = await stored_gateway([model("m", engine)])
    await sg.store.set_keep_rule("project", sg.project.id, dt.timedelta(days=1))
    client = sg.client()
    whole = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=5)
    stream = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=5, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    streamed, kept_whole = await _kept(sg, 2)
    assert (kept_whole.streamed, streamed.streamed) == (False, True)
    assert kept_whole.request["messages"] == HELLO and kept_whole.request["max_tokens"] == 5
    assert kept_requests.answer_text(kept_whole.answer) == whole.choices[0].message.content
    assert kept_requests.answer_text(streamed.answer) == text
    assert streamed.answer["object"] == "chat.completion"
    assert streamed.answer["choices"][0]["finish_reason"] == "length"
    assert (kept_whole.model, kept_whole.status, kept_whole.outcome, kept_whole.completion_tokens) == ("m", 200, "ok", 5)


def test_a_stream_with_tool_calls_is_assembled_into_one_message():
    pieces = [
        {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let me "}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"content": "look."}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_1", "function": {"name": "read_file", "arguments": '{"pa'}}]}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": 'th": "a.py"}'}}]}, "finish_reason": "tool_calls"}]},
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}},
    ]
    import json

    data = b"".join(b"data: " + json.dumps(p).encode() + b"\n\n" for p in pieces) + b"data: [DONE]\n\n"
    answer = kept_requests.assemble_stream(data, "chat")
    message = answer["choices"][0]["message"]
    assert message["content"] == "Let me look."
    assert message["tool_calls"] == [{"id": "call_1", "type": "function",
                                      "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]
    assert answer["choices"][0]["finish_reason"] == "tool_calls" and answer["usage"]["completion_tokens"] == 9
    assert kept_requests.answer_text(answer) == "Let me look.\n(tool calls: read_file)"


async def test_anthropic_messages_and_the_responses_api_are_kept_as_the_chat_the_model_was_sent(sim, stored_gateway):
    import anthropic

    engine = await sim(models=["m"])
    sg = await stored_gateway([model("m", engine)])
    await sg.store.set_keep_rule("key", "key-a", dt.timedelta(days=1))
    client = anthropic.AsyncAnthropic(base_url=sg.url, api_key="sk-a", max_retries=0)
    try:
        message = await client.messages.create(model="m", max_tokens=4, system="Be brief.", messages=HELLO)
    finally:
        await client.close()
    response = await sg.client().responses.create(model="m", input="Say hi.", max_output_tokens=16)
    from_responses, from_messages = await _kept(sg, 2)
    assert (from_messages.endpoint, from_responses.endpoint) == ("/v1/messages", "/v1/responses")
    assert from_messages.request["messages"][0] == {"role": "system", "content": "Be brief."}
    assert kept_requests.answer_text(from_messages.answer) == message.content[0].text
    assert from_responses.request["messages"][-1]["content"] == "Say hi."
    assert kept_requests.answer_text(from_responses.answer) == response.output_text


async def test_a_request_larger_than_the_limit_is_not_kept(sim, stored_gateway, monkeypatch):
    monkeypatch.setattr(kept_requests, "MAX_KEPT_BYTES", 2000)
    engine = await sim(models=["m"])
    sg = await stored_gateway([model("m", engine)])
    await sg.store.set_keep_rule("key", "key-a", dt.timedelta(days=1))
    big = [{"role": "user", "content": "sea " * 600}]
    await sg.client().chat.completions.create(model="m", messages=big, max_tokens=2)
    small = await sg.client().chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=2)
    assert [k.id for k in await _kept(sg, 1)] == [small.headers["x-request-id"]]
