"""A key under a guardrails policy with no_store is kept in the cluster: an external provider is refused."""

from __future__ import annotations

import openai
import pytest
from aiohttp import web

from llmgw.router.replicas import Replica

from llmgw.auth.principal import Principal


@pytest.fixture
async def provider():
    seen: list[dict] = []

    async def chat(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return web.json_response({"id": "c", "object": "chat.completion", "created": 0, "model": "ext",
                                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                               "finish_reason": "stop"}],
                                  "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1", seen
    await runner.cleanup()


async def test_no_store_keeps_a_key_off_external_providers(guarded, sim, provider):
    url, seen = provider
    engine = await sim(models=["local"])
    keys = {"sk-kept": Principal(key_id="key-kept", key_prefix="llmgw-kept00", key_name="kept", kind="service",
                                 org_id="org-1", team_id=None, project_id="prj-secret", user_id=None, band=None,
                                 allowed_models=None)}
    gw = await guarded(
        [{"name": "ext", "endpoints": [{"url": url}]}, {"name": "local", "profiles": [{"engine": "sim"}]}],
        keys=keys,
        guard={"policies": {"private": {"no_store": True}}, "default": ["private"]})
    gw.gateway.replicas.add(Replica(id="local/n1", model="local", base_url=engine.url + "/v1", source="control"))
    kept = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="sk-kept", max_retries=0)
    try:
        with pytest.raises(openai.PermissionDeniedError) as refused:
            await kept.chat.completions.create(model="ext", messages=[{"role": "user", "content": "x"}])
        assert refused.value.body["code"] == "residency_in_cluster"
        assert "a guardrails policy with no_store applies to the key" in refused.value.body["message"]
        assert seen == []
        local = await kept.chat.completions.create(model="local", messages=[{"role": "user", "content": "x"}],
                                                   max_tokens=2)
        assert local.model == "local"
        assert seen == []
    finally:
        await kept.close()
