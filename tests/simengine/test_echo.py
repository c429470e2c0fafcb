"""A model named echo… answers with what it was sent."""

from __future__ import annotations

import openai


async def test_an_echo_model_repeats_the_last_user_message(sim):
    engine = await sim(models=("echo", "plain"))
    client = openai.AsyncOpenAI(base_url=engine.url + "/v1", api_key="none")
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "first"},
                {"role": "assistant", "content": "ok"}, {"role": "user", "content": "card 4111 1111 1111 1111, thanks."}]
    reply = await client.chat.completions.create(model="echo", messages=messages)
    assert reply.choices[0].message.content == "card 4111 1111 1111 1111, thanks."
    assert reply.choices[0].finish_reason == "stop"
    stream = await client.chat.completions.create(model="echo", messages=messages, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "card 4111 1111 1111 1111, thanks."
    cut = await client.chat.completions.create(model="echo", messages=messages, max_tokens=2)
    assert (cut.choices[0].message.content, cut.choices[0].finish_reason) == ("card 4111", "length")
    completion = await client.completions.create(model="echo", prompt="say this back")
    assert completion.choices[0].text == "say this back"
    other = await client.chat.completions.create(model="plain", messages=messages, max_tokens=5)
    assert "4111" not in other.choices[0].message.content
