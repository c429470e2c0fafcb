"""Keys, allowlists, limits, fallbacks, the body limit, /v1/models, /me, /health, /ready, metrics."""

from __future__ import annotations

import openai
import pytest

from llmgw.accounting.api import LimitExceeded
from llmgw.server import make_metrics_app

from .conftest import HELLO, FakeAccountant, model, principal


async def test_keys_are_required_and_checked(sim, gateway, http):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)], keys={"good": principal()})
    with pytest.raises(openai.AuthenticationError) as caught:
        await gw.client("bad").chat.completions.create(model="m", messages=HELLO)
    assert caught.value.body["code"] == "invalid_api_key"
    async with http.post(gw.base_url + "/chat/completions", json={"model": "m", "messages": HELLO}) as resp:
        assert resp.status == 401 and (await resp.json())["error"]["code"] == "missing_api_key"
    # Anthropic's header works as well as a bearer token.
    async with http.post(gw.base_url + "/chat/completions", headers={"x-api-key": "good"},
                         json={"model": "m", "messages": HELLO, "max_tokens": 1}) as resp:
        assert resp.status == 200
    rows = await gw.settle(1)
    assert len(rows) == 1, "requests without a usable key leave no usage row"
    assert (rows[0].key_id, rows[0].project_id, rows[0].org_id) == ("key-1", "prj-1", "org-1")


async def test_a_model_outside_the_allowlist_is_403_and_recorded(sim, gateway):
    engine = await sim(models=["m", "n"])
    gw = await gateway([model("m", engine), model("n", engine)], keys={"k": principal(models={"m"})})
    with pytest.raises(openai.PermissionDeniedError) as caught:
        await gw.client("k").chat.completions.create(model="n", messages=HELLO)
    assert caught.value.body["code"] == "model_not_allowed"
    row = (await gw.settle(1))[0]
    assert (row.status, row.outcome, row.model_requested) == (403, "refused", "n")
    models = await gw.client("k").models.list()
    assert [m.id for m in models.data] == ["m"]


async def test_a_limit_is_429_with_retry_after_when_waiting_helps(sim, gateway):
    engine = await sim(models=["m"])
    accountant = FakeAccountant(refuse={"m": LimitExceeded("rate_limit_exceeded", "project prj-1: 10 requests a minute",
                                                           scope="project:prj-1", retry_after=2.2)})
    gw = await gateway([model("m", engine)], accountant=accountant)
    with pytest.raises(openai.RateLimitError) as caught:
        await gw.client().chat.completions.create(model="m", messages=HELLO)
    assert caught.value.body["code"] == "rate_limit_exceeded"
    assert caught.value.response.headers["Retry-After"] == "3"
    accountant.refuse["m"] = LimitExceeded("budget_exceeded", "spent", scope="org:o", retry_after=None)
    with pytest.raises(openai.RateLimitError) as caught:
        await gw.client().chat.completions.create(model="m", messages=HELLO)
    assert "Retry-After" not in caught.value.response.headers
    rows = await gw.settle(2)
    assert [r.outcome for r in rows] == ["refused", "refused"]


async def test_a_spent_budget_moves_to_a_fallback_charged_at_its_price(sim, gateway):
    engine = await sim(models=["big", "small"])
    accountant = FakeAccountant(refuse={"big": LimitExceeded("budget_exceeded", "spent", scope="team:t",
                                                             retry_after=None)})
    gw = await gateway([model("big", engine, fallbacks=["small"]), model("small", engine)], accountant=accountant)
    raw = await gw.client().chat.completions.with_raw_response.create(model="big", messages=HELLO, max_tokens=2)
    assert raw.headers["x-llmgw-served-model"] == "small"
    assert accountant.admitted == ["big", "small"]
    assert accountant.settled[0][:2] == ("small", "small")
    row = (await gw.settle(1))[0]
    assert (row.model_requested, row.model_served) == ("big", "small")


async def test_a_model_with_no_replica_falls_back_and_the_allowlist_holds(sim, gateway):
    engine = await sim(models=["small"])
    models = [model("big", fallbacks=["small"]), model("small", engine)]
    gw = await gateway(models, keys={"any": principal(), "big-only": principal("key-2", models={"big"})})
    raw = await gw.client("any").chat.completions.with_raw_response.create(model="big", messages=HELLO, max_tokens=1)
    assert raw.headers["x-llmgw-served-model"] == "small"
    assert raw.parse().choices
    # A key that may not use the fallback is not moved to it.
    with pytest.raises(openai.InternalServerError) as caught:
        await gw.client("big-only").chat.completions.create(model="big", messages=HELLO, max_tokens=1)
    assert caught.value.status_code == 503 and caught.value.body["code"] == "model_unavailable"
    text = gw.metrics.exposition().decode()
    assert 'llmgw_fallbacks_total{model="big",reason="no_replica",served="small"} 1.0' in text


async def test_a_body_past_the_limit_is_413(sim, gateway, http):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)], router={"max_body_bytes": "1KiB"})
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 2000}]}
    async with http.post(gw.base_url + "/chat/completions", json=body) as resp:
        error = (await resp.json())["error"]
        assert resp.status == 413 and error["code"] == "request_too_large"
        assert "router.max_body_bytes" in error["message"]
    # Sent in chunks, without a length: refused just the same.
    async def chunks():
        yield b'{"model": "m", "messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"x" * 100
        yield b'"}]}'

    async with http.post(gw.base_url + "/chat/completions", data=chunks()) as resp:
        assert resp.status == 413


async def test_models_me_health_and_ready(sim, gateway, http):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine, aliases=["mm"]), model("cold")],
                       keys={"k": principal(band="gold", models={"m", "mm", "cold"})})
    listed = await gw.client("k").models.list()
    assert [(m.id, m.model_extra["ready"]) for m in listed.data] == [("cold", False), ("m", True)]
    async with http.get(gw.url + "/me", headers={"Authorization": "Bearer k"}) as resp:
        me = await resp.json()
    assert me["key"]["prefix"] == "llmgw-abc123" and me["band"] == "gold"
    assert me["project_id"] == "prj-1" and me["models"] == ["cold", "m"]
    async with http.get(gw.url + "/me") as resp:
        assert resp.status == 401
    async with http.get(gw.url + "/health") as resp:
        assert resp.status == 200
    async with http.get(gw.url + "/ready") as resp:
        assert resp.status == 200 and (await resp.json())["models"] == ["m"]
    for _ in range(3):
        gw.gateway.replicas.get("m/endpoint-0").failed("test")
    async with http.get(gw.url + "/ready") as resp:
        assert resp.status == 503 and "healthy replica" in (await resp.json())["reason"]


async def test_metrics_are_exposed_on_their_own_listener(sim, gateway, aiohttp_client):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    client = gw.client()
    stream = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=3, stream=True)
    [c async for c in stream]
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="x", messages=HELLO)
    await gw.settle(2)
    metrics_client = await aiohttp_client(make_metrics_app(gw.metrics))
    resp = await metrics_client.get("/metrics")
    text = await resp.text()
    assert resp.status == 200
    for line in (
        'llmgw_requests_total{model="m",outcome="ok"} 1.0',
        'llmgw_requests_total{model="unknown",outcome="refused"} 1.0',
        'llmgw_tenant_requests_total{outcome="ok",tenant="anonymous"} 1.0',
        'llmgw_tokens_total{direction="completion",model="m"} 3.0',
        'llmgw_ttft_seconds_count{model="m"} 1.0',
        'llmgw_tpot_seconds_count{model="m"} 1.0',
        'llmgw_queue_wait_seconds_count{band="silver",model="m"} 1.0',
        'llmgw_request_duration_seconds_count{model="m"} 1.0',
        'llmgw_replica_in_flight{model="m",replica="m/endpoint-0"} 0.0',
    ):
        assert line in text, line
