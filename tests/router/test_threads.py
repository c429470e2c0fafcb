"""Threads: a project's stored conversation in front of each new turn, trimmed to fit the model."""

from __future__ import annotations

import asyncio
import datetime as dt

import anthropic
import openai
import pytest

from llmgw.router.threads import (
    DEFAULT_CONTEXT,
    context_length,
    estimate_tokens,
    response_id_for,
    thread_of_response_id,
)

from .conftest import model
from .stored import get_json

THREAD = {"x-llmgw-thread": "conv-7f3a:1"}


def said(text: str) -> list[dict]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


async def test_a_thread_puts_the_stored_conversation_in_front(stored_gateway, recorder):
    engine = await recorder()
    sg = await stored_gateway([model("m", engine.url + "/v1")])
    await sg.turn_on(threads=True, thread_retention=dt.timedelta(hours=2))
    client = sg.client()

    raw = await client.chat.completions.with_raw_response.create(
        model="m", messages=said("My name is Deniz."), extra_headers=THREAD)
    assert raw.parse().choices[0].message.content == "answer 1"
    assert "x-llmgw-thread-trimmed" not in raw.headers
    await client.chat.completions.create(model="m", messages=said("What is my name?"), extra_headers=THREAD)
    assert engine.messages() == [
        ("system", "Be brief."), ("user", "My name is Deniz."), ("assistant", "answer 1"),
        ("user", "What is my name?")]

    turns = await sg.store.get_thread_turns(sg.project.id, "conv-7f3a:1")
    assert [[(m["role"], m["content"]) for m in t.messages] for t in turns] == [
        [("user", "My name is Deniz."), ("assistant", "answer 1")],
        [("user", "What is my name?"), ("assistant", "answer 2")]], "system messages are not kept"
    # Another project's thread of the same id is another thread.
    await sg.turn_on(sg.other, threads=True)
    await sg.client("sk-b").chat.completions.create(model="m", messages=said("Hello"), extra_headers=THREAD)
    assert engine.messages() == [("system", "Be brief."), ("user", "Hello")]


async def test_a_streamed_answer_is_kept_as_its_message(stored_gateway, recorder):
    engine = await recorder()
    sg = await stored_gateway([model("m", engine.url + "/v1")])
    await sg.turn_on(threads=True)
    client = sg.client()
    stream = await client.chat.completions.create(model="m", messages=said("one"), stream=True, extra_headers=THREAD)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "answer 1"
    await client.chat.completions.create(model="m", messages=said("two"), stream=True, extra_headers=THREAD)
    assert engine.messages() == [("system", "Be brief."), ("user", "one"), ("assistant", "answer 1"), ("user", "two")]


async def test_the_anthropic_sdk_continues_a_thread_too(stored_gateway, recorder):
    engine = await recorder()
    sg = await stored_gateway([model("m", engine.url + "/v1")])
    await sg.turn_on(threads=True)
    client = anthropic.AsyncAnthropic(base_url=sg.url, api_key="sk-a", max_retries=0)
    try:
        await client.messages.create(model="m", max_tokens=20, messages=[{"role": "user", "content": "one"}],
                                     extra_headers=THREAD)
        async with client.messages.stream(model="m", max_tokens=20, messages=[{"role": "user", "content": "two"}],
                                          extra_headers=THREAD) as stream:
            assert await stream.get_final_text() == "answer 2"
        await client.messages.create(model="m", max_tokens=20, messages=[{"role": "user", "content": "three"}],
                                     extra_headers=THREAD)
    finally:
        await client.close()
    assert engine.messages() == [("user", "one"), ("assistant", "answer 1"), ("user", "two"),
                                 ("assistant", "answer 2"), ("user", "three")]


async def test_oldest_turns_are_left_out_to_fit_the_context(stored_gateway, recorder):
    engine = await recorder(context=600)
    sg = await stored_gateway([model("m", engine.url + "/v1")])
    await sg.turn_on(threads=True)
    client = sg.client()
    filler = " ".join(["word"] * 40)
    for i in range(7):
        raw = await client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": f"turn {i}: {filler}"}], max_tokens=100,
            extra_headers=THREAD)
    trimmed = int(raw.headers["x-llmgw-thread-trimmed"])
    assert 0 < trimmed < 6
    sent = engine.messages()
    kept = (len(sent) - 1) // 2
    assert kept == 6 - trimmed
    assert sent[0] == ("user", f"turn {trimmed}: {filler}"), "the oldest turns go first, the newest stay"
    assert sent[-1] == ("user", f"turn 6: {filler}")
    assert estimate_tokens(engine.seen[-1]["messages"]) + 100 <= 600


async def test_trimmed_conversations_fit_a_real_context(stored_gateway, sim):
    engine = await sim(models=["m"], context_length=400)
    sg = await stored_gateway([model("m", engine)])
    await sg.turn_on(threads=True)
    client = sg.client()
    trimmed = []
    for i in range(8):  # 8 turns of ~60 words and 20 tokens of answer: more than 400 tokens together
        raw = await client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": f"question {i} " + " ".join(["river"] * 60)}],
            max_tokens=20, extra_headers=THREAD)
        assert raw.parse().choices[0].message.content
        trimmed.append(int(raw.headers.get("x-llmgw-thread-trimmed", 0)))
    assert trimmed[0] == 0 and trimmed[-1] > 0


async def test_threads_are_refused_where_they_are_off(stored_gateway, recorder, http):
    engine = await recorder()
    sg = await stored_gateway([model("m", engine.url + "/v1")])
    client = sg.client()
    with pytest.raises(openai.BadRequestError) as off:
        await client.chat.completions.create(model="m", messages=said("hi"), extra_headers=THREAD)
    assert off.value.code == "threads_off" and "llmgw keys threads" in off.value.message
    assert engine.seen == [], "refused, not answered without its history"

    await sg.turn_on(threads=True)
    with pytest.raises(openai.BadRequestError) as personal:
        await sg.client("sk-personal").chat.completions.create(model="m", messages=said("hi"), extra_headers=THREAD)
    assert personal.value.code == "project_required"
    with pytest.raises(openai.BadRequestError) as bad:
        await client.chat.completions.create(model="m", messages=said("hi"), extra_headers={"x-llmgw-thread": "a b"})
    assert bad.value.code == "invalid_thread_id"
    with pytest.raises(openai.BadRequestError) as long:
        await client.chat.completions.create(model="m", messages=said("hi"),
                                             extra_headers={"x-llmgw-thread": "x" * 129})
    assert long.value.code == "invalid_thread_id"
    row = (await sg.running.settle(4))[-1]
    assert (row.status, row.outcome) == (400, "refused")


async def test_a_failed_turn_is_not_kept_and_a_thread_can_be_deleted(stored_gateway, recorder, http):
    engine = await recorder()
    sg = await stored_gateway([model("m", engine.url + "/v1")])
    await sg.turn_on(threads=True)
    client = sg.client()
    await client.chat.completions.create(model="m", messages=said("keep me"), extra_headers=THREAD)
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="m", messages=said("fail"), extra_headers=THREAD)
    assert len(await sg.store.get_thread_turns(sg.project.id, "conv-7f3a:1")) == 1

    url = f"{sg.url}/v1/threads/conv-7f3a:1"
    status, body, _ = await get_json(http, "DELETE", url, headers=sg.headers("sk-b"))
    assert status == 404, "another project's key forgets nothing"
    status, body, _ = await get_json(http, "DELETE", url, headers=sg.headers())
    assert (status, body["deleted"]) == (200, True)
    status, body, _ = await get_json(http, "DELETE", url, headers=sg.headers())
    assert (status, body["error"]["code"]) == (404, "thread_not_found")
    await client.chat.completions.create(model="m", messages=said("again"), extra_headers=THREAD)
    assert engine.messages() == [("system", "Be brief."), ("user", "again")]


async def test_turns_of_one_thread_take_turns(stored_gateway, recorder):
    engine = await recorder()
    sg = await stored_gateway([model("m", engine.url + "/v1")])
    await sg.turn_on(threads=True)
    client = sg.client()
    await asyncio.gather(*(client.chat.completions.create(model="m", messages=said(f"q{i}"), extra_headers=THREAD)
                           for i in range(4)))
    turns = await sg.store.get_thread_turns(sg.project.id, "conv-7f3a:1")
    assert [t.seq for t in turns] == [1, 2, 3, 4]
    assert [len(body["messages"]) for body in engine.seen] == [2, 4, 6, 8], "each saw every turn before it"


async def test_embeddings_have_no_thread(stored_gateway, sim):
    engine = await sim(models=["e"])
    sg = await stored_gateway([model("e", engine)])
    await sg.turn_on(threads=True)
    with pytest.raises(openai.BadRequestError) as refused:
        await sg.client().embeddings.create(model="e", input="hello", extra_headers=THREAD)
    assert refused.value.code == "thread_unsupported"


async def test_the_context_is_what_the_engine_runs_with(stored_gateway, recorder):
    vllm_like = await recorder(context=2048)
    llamacpp = await recorder(context=512, llamacpp=True)
    sg = await stored_gateway([model("a", vllm_like.url + "/v1"), model("b", llamacpp.url + "/v1"),
                               model("c", "http://127.0.0.1:9/v1")])
    gw = sg.running.gateway
    assert await context_length(gw, sg.data, "a") == 2048
    assert await context_length(gw, sg.data, "b") == 512, "the context llama.cpp was started with, not trained with"
    assert await context_length(gw, sg.data, "c") == DEFAULT_CONTEXT


def test_a_response_id_carries_its_thread():
    rid = response_id_for("conv-7f3a:1")
    assert rid.startswith("resp_") and thread_of_response_id(rid) == "conv-7f3a:1"
    assert response_id_for("t") != response_id_for("t")
    assert thread_of_response_id("resp_abc") is None
    assert thread_of_response_id("resp_!!!_x") is None
