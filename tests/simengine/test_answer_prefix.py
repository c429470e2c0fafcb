"""--answer-prefix: every generated answer begins with the text given, within max_tokens."""

from __future__ import annotations

import openai

ASK = [{"role": "user", "content": "What is 17 + 25?"}]


async def test_answers_begin_with_the_prefix_and_keep_to_max_tokens(sim):
    engine = await sim(models=["m"], answer_prefix="42 is the answer.")
    plain = await sim(models=["m"])
    async with openai.AsyncOpenAI(base_url=engine.url + "/v1", api_key="none", max_retries=0) as client:
        reply = await client.chat.completions.create(model="m", messages=ASK, max_tokens=20)
        short = await client.chat.completions.create(model="m", messages=ASK, max_tokens=2)
    async with openai.AsyncOpenAI(base_url=plain.url + "/v1", api_key="none", max_retries=0) as client:
        other = await client.chat.completions.create(model="m", messages=ASK, max_tokens=20)
    assert reply.choices[0].message.content.startswith("42 is the answer.")
    assert reply.usage.completion_tokens == 20
    assert short.usage.completion_tokens == 2 and "42".startswith(short.choices[0].message.content[:2])
    assert not other.choices[0].message.content.startswith("42")
