"""The answer cache: opt-in per project, exact repeats answered from memory, streams replayed, no cost."""

from __future__ import annotations

import datetime as dt

import openai

from llmgw.router.cache import ResponseCache, cache_key

from .conftest import HELLO, model


async def ask(client: openai.AsyncOpenAI, **kw):
    raw = await client.chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=6, **kw)
    return raw.parse(), raw.headers


async def test_a_project_without_the_cache_gets_no_header(stored_gateway, sim):
    engine = await sim(models=["m"])
    sg = await stored_gateway([model("m", engine)])
    _, headers = await ask(sg.client())
    assert "x-llmgw-cache" not in headers


async def test_a_repeat_is_a_hit_recorded_without_tokens_or_cost(stored_gateway, sim):
    engine = await sim(models=["m"])
    sg = await stored_gateway([model("m", engine)])
    await sg.turn_on(cache=True, cache_ttl=dt.timedelta(minutes=10))
    client = sg.client()
    first, h1 = await ask(client)
    second, h2 = await ask(client, user="someone-else", metadata={"feature": "x"})
    assert (h1["x-llmgw-cache"], h2["x-llmgw-cache"]) == ("miss", "hit")
    assert second.choices[0].message.content == first.choices[0].message.content
    assert h2["x-request-id"] != h1["x-request-id"]
    rows = await sg.running.settle(2)
    miss, hit = rows
    assert (miss.outcome, miss.completion_tokens > 0, miss.cost_micros > 0) == ("ok", True, True)
    assert (hit.outcome, hit.status, hit.prompt_tokens, hit.completion_tokens, hit.cost_micros) == (
        "cache_hit", 200, 0, 0, 0)
    assert hit.request_id == h2["x-request-id"]
    assert len(sg.accountant.settled) == 1 and sg.accountant.released == 1, "a hit holds and spends nothing"

    _, other = await ask(client, temperature=0.5)
    assert other["x-llmgw-cache"] == "miss", "another body is another request"
    _, forced = await ask(client, extra_headers={"Cache-Control": "no-cache"})
    assert forced["x-llmgw-cache"] == "miss"
    await sg.turn_on(sg.other, cache=True)
    _, theirs = await ask(sg.client("sk-b"))
    assert theirs["x-llmgw-cache"] == "miss", "another project's answers are its own"
    await sg.turn_on(cache=False)
    _, off = await ask(client)
    assert "x-llmgw-cache" not in off


async def test_a_streamed_answer_is_replayed_as_chunks(stored_gateway, sim):
    engine = await sim(models=["m"])
    sg = await stored_gateway([model("m", engine)])
    await sg.turn_on(cache=True)
    client = sg.client()

    async def stream():
        raw = await client.chat.completions.with_raw_response.create(
            model="m", messages=HELLO, max_tokens=8, stream=True, stream_options={"include_usage": True})
        chunks = [c async for c in raw.parse()]
        return raw.headers, chunks

    h1, first = await stream()
    h2, second = await stream()
    assert (h1["x-llmgw-cache"], h2["x-llmgw-cache"]) == ("miss", "hit")
    assert h2["content-type"].startswith("text/event-stream")
    text = "".join(c.choices[0].delta.content or "" for c in first if c.choices)
    assert text and text == "".join(c.choices[0].delta.content or "" for c in second if c.choices)
    assert len(second) == len(first) > 2, "the same pieces, not one blob"
    assert second[-1].usage.completion_tokens == 8
    hit = (await sg.running.settle(2))[1]
    assert (hit.outcome, hit.completion_tokens, hit.cost_micros) == ("cache_hit", 0, 0)
    # A whole answer is not a stream's: the stream flag is part of the request.
    _, whole = await ask(client)
    assert whole["x-llmgw-cache"] == "miss"


async def test_embeddings_are_cached_too(stored_gateway, sim):
    engine = await sim(models=["e"])
    sg = await stored_gateway([model("e", engine)])
    await sg.turn_on(cache=True)
    client = sg.client()
    first = await client.embeddings.with_raw_response.create(model="e", input="rivers")
    second = await client.embeddings.with_raw_response.create(model="e", input="rivers")
    assert (first.headers["x-llmgw-cache"], second.headers["x-llmgw-cache"]) == ("miss", "hit")
    assert second.parse().data[0].embedding == first.parse().data[0].embedding


def test_the_cache_is_bounded_and_ages():
    now = [0.0]
    cache = ResponseCache(max_bytes=3000, max_entry_bytes=1200, clock=lambda: now[0])
    assert cache.put("a", status=200, content_type="application/json", ttl=10, body=b"x" * 700)
    assert not cache.put("big", status=200, content_type="application/json", ttl=10, body=b"x" * 1200)
    assert cache.put("b", status=200, content_type="application/json", ttl=10, body=b"x" * 700)
    assert cache.get("a") is not None  # a is now the most recently used
    assert cache.put("c", status=200, content_type="application/json", ttl=10, body=b"x" * 700)
    assert cache.put("d", status=200, content_type="application/json", ttl=10, body=b"x" * 700)
    assert cache.get("b") is None and cache.get("a") is not None, "the least recently used goes first"
    assert cache.bytes <= 3000
    now[0] = 11
    assert cache.get("a") is None, "past its TTL"
    assert (cache.hits, cache.misses) == (2, 2)


def test_the_key_ignores_what_does_not_change_an_answer():
    body = {"model": "alias", "messages": HELLO, "max_tokens": 5}
    same = {"max_tokens": 5, "messages": HELLO, "model": "m", "user": "u", "metadata": {"a": "b"}}
    assert cache_key("p", "/v1/chat/completions", "m", body) == cache_key("p", "/v1/chat/completions", "m", same)
    assert cache_key("p", "/v1/chat/completions", "m", body) != cache_key("q", "/v1/chat/completions", "m", body)
    assert cache_key("p", "/v1/chat/completions", "m", body) != cache_key("p", "/v1/completions", "m", body)
    assert cache_key("p", "/v1/chat/completions", "m", body) != cache_key(
        "p", "/v1/chat/completions", "m", {**body, "stream": True})
