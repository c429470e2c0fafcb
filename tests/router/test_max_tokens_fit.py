"""max_tokens fitted to the context: the clients that ask for more than a local model holds, served.

Claude Code asks for max_tokens 32000 and pydantic-ai for 16384; against an
engine with an 8192-token context the gateway lowers it to what the prompt
leaves, says so in x-llmgw-max-tokens-fitted and holds the budget on that;
a project with `strict_max_tokens` gets a 400 in its API's shape instead.
"""

from __future__ import annotations

import anthropic
import attrs
import openai
import pytest

from llmgw.accounting.api import Reservation
from llmgw.auth.principal import Principal
from llmgw.router.fit import FITTED_HEADER

from .conftest import FakeAccountant, model
from .stored import stored_gateway  # noqa: F401

CONTEXT = 8192
SYSTEM = "You are Claude Code, a coding assistant. Answer briefly."
READ_FILE = {"name": "read_file", "description": "Read a file of the project.",
             "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
QUESTION = [{"role": "user", "content": "What does the main module do?"}]


@attrs.define
class HoldingAccountant(FakeAccountant):
    """Keeps the max_tokens each admission held the budget on."""

    held: list[int] = attrs.Factory(list)

    async def admit(self, principal: Principal, model: str, *, prompt_tokens: int, max_tokens: int) -> Reservation:
        self.held.append(max_tokens)
        return await super().admit(principal, model, prompt_tokens=prompt_tokens, max_tokens=max_tokens)


async def _prompt_tokens(engine_url: str, http, **ask) -> int:
    async with http.post(engine_url + "/tokenize", json={"model": "m", **ask}) as resp:
        return (await resp.json())["count"]


async def test_pydantic_ais_16384_is_fitted_to_what_an_8192_context_leaves(sim, gateway, http):
    engine = await sim(models=["m"], context_length=CONTEXT)
    accountant = HoldingAccountant()
    gw = await gateway([model("m", engine)], accountant=accountant)
    raw = await gw.client().chat.completions.with_raw_response.create(
        model="m", messages=QUESTION, max_tokens=16384)
    reply = raw.parse()
    left = CONTEXT - await _prompt_tokens(engine.url, http, messages=QUESTION)
    assert raw.headers[FITTED_HEADER] == str(left)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == left
    assert accountant.held == [left], "the budget holds on the fitted max_tokens, not the one asked"


async def test_claude_codes_32000_with_a_system_prompt_and_tools_streams(sim, gateway, http):
    engine = await sim(models=["m"], context_length=CONTEXT)
    gw = await gateway([model("m", engine)])
    client = anthropic.AsyncAnthropic(base_url=gw.url, api_key="none", max_retries=0)
    try:
        async with client.messages.stream(model="m", max_tokens=32000, system=SYSTEM, tools=[READ_FILE],
                                          messages=QUESTION) as stream:
            fitted = int(stream.response.headers[FITTED_HEADER])
            text = "".join([t async for t in stream.text_stream])
            final = await stream.get_final_message()
    finally:
        await client.close()
    assert 0 < fitted < CONTEXT
    assert text or final.content
    assert final.stop_reason in ("max_tokens", "tool_use", "end_turn")
    assert final.usage.output_tokens <= fitted


async def test_max_completion_tokens_and_max_output_tokens_are_fitted_too(sim, gateway):
    engine = await sim(models=["m"], context_length=CONTEXT)
    gw = await gateway([model("m", engine)])
    raw = await gw.client().chat.completions.with_raw_response.create(
        model="m", messages=QUESTION, max_completion_tokens=10_000)
    assert int(raw.headers[FITTED_HEADER]) < CONTEXT
    raw = await gw.client().responses.with_raw_response.create(model="m", input="Hello", max_output_tokens=9000)
    fitted = int(raw.headers[FITTED_HEADER])
    response = raw.parse()
    assert response.usage.output_tokens == fitted
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"


async def test_a_request_that_fits_is_left_as_asked(sim, gateway):
    engine = await sim(models=["m"], context_length=CONTEXT)
    gw = await gateway([model("m", engine)])
    raw = await gw.client().chat.completions.with_raw_response.create(model="m", messages=QUESTION, max_tokens=4000)
    assert FITTED_HEADER not in raw.headers
    assert raw.parse().usage.completion_tokens == 4000


async def test_a_prompt_that_fills_the_context_is_the_engines_refusal(sim, gateway):
    engine = await sim(models=["m"], context_length=64)
    gw = await gateway([model("m", engine)])
    long = [{"role": "user", "content": " ".join(["word"] * 100)}]
    with pytest.raises(openai.BadRequestError) as caught:
        await gw.client().chat.completions.create(model="m", messages=long, max_tokens=10)
    assert caught.value.code == "context_length_exceeded"
    assert "maximum context length is 64 tokens" in caught.value.message


async def test_a_strict_project_gets_a_400_in_each_apis_shape(sim, stored_gateway):
    engine = await sim(models=["m"], context_length=CONTEXT)
    sg = await stored_gateway([model("m", engine)])
    raw = await sg.client().chat.completions.with_raw_response.create(model="m", messages=QUESTION, max_tokens=16384)
    assert FITTED_HEADER in raw.headers, "fitted until the project asks for strictness"

    await sg.turn_on(strict_max_tokens=True)
    with pytest.raises(openai.BadRequestError) as caught:
        await sg.client().chat.completions.create(model="m", messages=QUESTION, max_tokens=16384)
    assert (caught.value.code, caught.value.param) == ("context_length_exceeded", "max_tokens")
    assert "16384 answer tokens asked for" in caught.value.message
    assert "llmgw keys strict-max-tokens" in caught.value.message

    client = anthropic.AsyncAnthropic(base_url=sg.url, api_key="sk-a", max_retries=0)
    try:
        with pytest.raises(anthropic.BadRequestError) as refused:
            async with client.messages.stream(model="m", max_tokens=32000, messages=QUESTION) as stream:
                await stream.get_final_message()
    finally:
        await client.close()
    assert refused.value.body["type"] == "error"
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert refused.value.body["error"]["message"].startswith("max_tokens: 32000 answer tokens asked for")

    other = await sg.client("sk-b").chat.completions.with_raw_response.create(
        model="m", messages=QUESTION, max_tokens=16384)
    assert FITTED_HEADER in other.headers, "strictness is the project's own"
    rows = [r for r in sg.accountant.rows if r.status == 400]
    assert len(rows) == 2 and all(r.outcome == "refused" for r in rows)


async def test_a_provider_that_does_not_say_its_context_is_not_fitted(gateway, http):
    """An upstream whose /v1/models carries no context length (a provider's API) gets max_tokens as asked."""
    from aiohttp import web

    seen: list[dict] = []

    async def models(request):
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def chat(request):
        seen.append(await request.json())
        return web.json_response({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                                  "choices": [{"index": 0, "finish_reason": "stop",
                                               "message": {"role": "assistant", "content": "hi"}}],
                                  "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        gw = await gateway([model("m", url)])
        raw = await gw.client().chat.completions.with_raw_response.create(
            model="m", messages=QUESTION, max_tokens=32000)
        assert FITTED_HEADER not in raw.headers
        assert seen[0]["max_tokens"] == 32000
    finally:
        await runner.cleanup()



async def test_a_cluster_models_first_replica_is_asked_its_context_at_once(sim, gateway):
    """`llmgw up`: its first request comes while the model is being placed (503); the replica that comes
    then is asked its context at the next request, not a minute later (claude -p's 32000 was refused)."""
    from llmgw.router.replicas import Replica

    gw = await gateway([model("m")])  # a cluster model: no replica until the scheduler runs one
    with pytest.raises(openai.APIStatusError) as caught:
        await gw.client().chat.completions.create(model="m", messages=QUESTION, max_tokens=8)
    assert caught.value.status_code == 503
    engine = await sim(models=["m"], context_length=CONTEXT)
    gw.gateway.replicas.add(Replica(id="m-1", model="m", base_url=engine.url + "/v1", source="control"))
    raw = await gw.client().chat.completions.with_raw_response.create(model="m", messages=QUESTION,
                                                                      max_tokens=200000)
    assert 0 < int(raw.headers[FITTED_HEADER]) < CONTEXT
    assert raw.parse().choices[0].finish_reason == "length"
