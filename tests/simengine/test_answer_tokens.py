"""--answer-tokens: an answer that ends on its own before max_tokens, as a model that is done does."""

from __future__ import annotations

import openai

HELLO = [{"role": "user", "content": "Say something about rivers."}]


async def test_an_answer_ends_on_its_own_before_a_long_max_tokens(sim):
    engine = await sim(models=["m"], answer_tokens=12)
    async with openai.AsyncOpenAI(base_url=engine.url + "/v1", api_key="none", max_retries=0) as client:
        long = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=1000)
        short = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=5)
    assert (long.usage.completion_tokens, long.choices[0].finish_reason) == (12, "stop")
    assert (short.usage.completion_tokens, short.choices[0].finish_reason) == (5, "length")
