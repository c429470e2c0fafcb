"""logprobs as OpenAI answers them: per token of a chat answer, streamed or not, and of a completion."""

from __future__ import annotations

import math

import openai
import pytest

HELLO = [{"role": "user", "content": "Say something about rivers."}]


def _client(engine) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=engine.url + "/v1", api_key="none", max_retries=0)


async def test_a_chat_answer_has_a_logprob_per_token_and_the_alternatives_asked(sim):
    engine = await sim(models=["m"])
    async with _client(engine) as client:
        reply = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=6, logprobs=True,
                                                     top_logprobs=3, seed=1)
        again = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=6, logprobs=True,
                                                     top_logprobs=3, seed=1)
        plain = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=6)
    content = reply.choices[0].logprobs.content
    assert "".join(t.token for t in content) == reply.choices[0].message.content
    assert len(content) == reply.usage.completion_tokens == 6
    for token in content:
        assert token.logprob <= 0 and bytes(token.bytes).decode() == token.token
        assert len(token.top_logprobs) == 3 and token.top_logprobs[0].token == token.token
        assert [t.logprob for t in token.top_logprobs] == sorted((t.logprob for t in token.top_logprobs),
                                                                reverse=True)
        assert sum(math.exp(t.logprob) for t in token.top_logprobs) <= 1.5
    assert again.choices[0].logprobs == reply.choices[0].logprobs, "the same request, the same numbers"
    assert plain.choices[0].logprobs is None


async def test_a_streamed_chat_answer_carries_each_tokens_logprob(sim):
    engine = await sim(models=["m"])
    async with _client(engine) as client:
        stream = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=5, logprobs=True,
                                                      top_logprobs=2, stream=True)
        chunks = [c async for c in stream]
    tokens = [t for c in chunks for ch in c.choices if ch.logprobs for t in ch.logprobs.content]
    text = "".join(ch.delta.content or "" for c in chunks for ch in c.choices)
    assert len(tokens) == 5 and "".join(t.token for t in tokens) == text
    assert all(len(t.top_logprobs) == 2 for t in tokens)


async def test_a_completion_has_tokens_token_logprobs_and_offsets(sim):
    engine = await sim(models=["m"])
    async with _client(engine) as client:
        reply = await client.completions.create(model="m", prompt="Rivers are", max_tokens=4, logprobs=2)
        streamed = [c async for c in await client.completions.create(model="m", prompt="Rivers are", max_tokens=4,
                                                                      logprobs=2, stream=True)]
    logprobs = reply.choices[0].logprobs
    assert "".join(logprobs.tokens) == reply.choices[0].text
    assert len(logprobs.token_logprobs) == 4 and all(lp <= 0 for lp in logprobs.token_logprobs)
    assert logprobs.text_offset[0] == 0 and all(len(alts) == 2 for alts in logprobs.top_logprobs)
    assert sum(len(c.choices[0].logprobs.tokens) for c in streamed if c.choices and c.choices[0].logprobs) == 4


async def test_top_logprobs_without_logprobs_is_refused(sim):
    engine = await sim(models=["m"])
    async with _client(engine) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="m", messages=HELLO, top_logprobs=2)
    assert caught.value.param == "top_logprobs"
