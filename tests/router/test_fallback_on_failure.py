"""A model whose upstream fails a request before answering moves that very request to its fallback.

Not only once the failing upstream has been ejected: the first request
that meets a dead primary (connection refused) or one answering 5xx before
its first byte is answered by the fallback, streamed or not, in OpenAI's
and Anthropic's API, and says so in x-llmgw-served-model.
"""

from __future__ import annotations

import anthropic
import openai
import pytest
from aiohttp import web

from .conftest import HELLO, model
from .test_resilience import closed_port_url


async def _failing_upstream(status: int):
    """An OpenAI-shaped upstream that answers every generation with `status`, and how many it got."""
    seen = []

    async def fail(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({"error": {"message": "overloaded", "type": "server_error"}}, status=status)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", fail)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/v1", seen


async def test_a_dead_primarys_first_request_is_answered_by_the_fallback(sim, gateway):
    engine = await sim(models=["backup"])
    gw = await gateway([model("primary", closed_port_url(), fallbacks=["backup"]), model("backup", engine)],
                       router={"retries": {"attempts": 0, "backoff": "0s"}})
    raw = await gw.client().chat.completions.with_raw_response.create(model="primary", messages=HELLO, max_tokens=3)
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-llmgw-served-model"] == "backup"
    stream = await gw.client().chat.completions.create(model="primary", messages=HELLO, max_tokens=3, stream=True)
    assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    rows = await gw.settle(2)
    assert [(r.model_requested, r.model_served, r.status, r.outcome) for r in rows] == [
        ("primary", "backup", 200, "ok")] * 2
    assert gw.gateway.replicas.get("primary/endpoint-0").health.failures == 2, "the primary was tried each time"


async def test_a_5xx_before_the_first_byte_moves_to_the_fallback_in_anthropics_api_too(sim, gateway):
    runner, url, seen = await _failing_upstream(500)
    try:
        engine = await sim(models=["backup"])
        gw = await gateway([model("primary", url, fallbacks=["backup"]), model("backup", engine)],
                           router={"retries": {"backoff": "0s"}})
        client = anthropic.AsyncAnthropic(base_url=gw.url, api_key="none", max_retries=0)
        try:
            raw = await client.messages.with_raw_response.create(model="primary", max_tokens=3, messages=HELLO)
        finally:
            await client.close()
        assert (await raw.parse()).content[0].text and raw.headers["x-llmgw-served-model"] == "backup"
        assert seen == ["/v1/chat/completions"], "one failure is enough"
    finally:
        await runner.cleanup()


async def test_with_no_fallback_the_failure_is_the_answer(gateway):
    gw = await gateway([model("primary", closed_port_url())], router={"retries": {"attempts": 0}})
    with pytest.raises(openai.APIStatusError) as caught:
        await gw.client().chat.completions.create(model="primary", messages=HELLO, max_tokens=3)
    assert caught.value.status_code == 502 and caught.value.body["code"] == "upstream_unreachable"
