"""Residency: a key kept in the cluster never reaches an external provider, through a real gateway.

The gateway runs with a real SQLite store and the real key resolver; keys and
residency rules are made with the tenancy operations `llmgw keys` and the
admin API use. The external provider is a recording engine the test runs
(server.yaml `endpoints:`); the cluster's own engine is a simulated one put in
the replica set as the scheduler would.
"""

from __future__ import annotations

import anthropic
import openai
import pytest
from aiohttp import web

from llmgw.auth.keys import KeyResolver
from llmgw.auth.tenancy import Tenancy
from llmgw.config import parse_server_config
from llmgw.obs.metrics import GatewayMetrics
from llmgw.router.gateway import GATEWAY
from llmgw.router.replicas import Replica
from llmgw.server import make_gateway_app
from llmgw.store import open_store

from .conftest import HELLO, FakeAccountant
from .stored import recorder  # noqa: F401


@pytest.fixture
async def setup(tmp_path, sim, recorder):  # noqa: F811
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    tenancy = Tenancy(store, actor="test")
    await tenancy.create("acme")
    await tenancy.create("acme/ml")
    await tenancy.create("acme/ml/train")
    await tenancy.create("acme/ml/open")
    outside = await recorder(name="ext")
    engine = await sim(models=["local"])
    config = parse_server_config({
        "store": {"dsn": "/nonexistent/llmgw.db"},
        "auth": {"keys_required": True},
        "router": {"scrape_interval": "100ms"},
        "models": [
            {"name": "ext", "endpoints": [{"url": outside.url + "/v1"}]},
            {"name": "ext-then-local", "endpoints": [{"url": outside.url + "/v1"}], "fallbacks": ["local"]},
            {"name": "local", "profiles": [{"engine": "sim"}]},
        ],
    })
    resolver = KeyResolver(store, ttl=0.0, negative_ttl=0.0)
    app = make_gateway_app(config, store=store, resolver=resolver, accountant=FakeAccountant(),
                           metrics=GatewayMetrics())
    runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    gw = app[GATEWAY]
    # The cluster's own replica of `local`, as the scheduler adds one it started.
    gw.replicas.add(Replica(id="local/node-1", model="local", base_url=engine.url + "/v1", source="control"))
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    clients = []

    def client(secret: str, kind=openai.AsyncOpenAI):
        c = kind(base_url=url + ("/v1" if kind is openai.AsyncOpenAI else ""), api_key=secret, max_retries=0)
        clients.append(c)
        return c

    yield tenancy, outside, client, resolver
    for c in clients:
        await c.close()
    await runner.cleanup()
    await store.close()


async def test_a_key_kept_in_the_cluster_is_refused_an_external_model_and_the_provider_sees_nothing(setup):
    tenancy, outside, client, resolver = setup
    issued = await tenancy.create_key(project="acme/ml/train", name="indexer")
    before = await client(issued.secret).chat.completions.create(model="ext", messages=HELLO, max_tokens=4)
    assert before.choices[0].message.content == "answer 1" and len(outside.seen) == 1

    await tenancy.set_residency("project:acme/ml/train", True)
    resolver.invalidate()
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await client(issued.secret).chat.completions.create(model="ext", messages=HELLO, max_tokens=4)
    error = refused.value.body
    assert refused.value.status_code == 403 and error["code"] == "residency_in_cluster"
    assert error["param"] == "model" and "'ext'" in error["message"]
    assert "residency in-cluster is set on its project" in error["message"]
    # Anthropic's shape, the same refusal
    with pytest.raises(anthropic.PermissionDeniedError) as in_anthropic:
        await client(issued.secret, anthropic.AsyncAnthropic).messages.create(
            model="ext", max_tokens=4, messages=[{"role": "user", "content": "hello"}])
    assert "must stay on the cluster's own engines" in in_anthropic.value.body["error"]["message"]
    # a model the cluster runs is served; one whose fallback the cluster runs falls back to it
    local = await client(issued.secret).chat.completions.create(model="local", messages=HELLO, max_tokens=4)
    assert local.model == "local"
    moved = await client(issued.secret).chat.completions.with_raw_response.create(
        model="ext-then-local", messages=HELLO, max_tokens=4)
    assert moved.parse().choices[0].message.content
    assert len(outside.seen) == 1  # the provider saw the first request only

    # another project's keys are not held; lifting it lets the project out again
    other = await tenancy.create_key(project="acme/ml/open")
    await client(other.secret).chat.completions.create(model="ext", messages=HELLO, max_tokens=4)
    assert len(outside.seen) == 2
    await tenancy.set_residency("project:acme/ml/train", False)
    resolver.invalidate()
    await client(issued.secret).chat.completions.create(model="ext", messages=HELLO, max_tokens=4)
    assert len(outside.seen) == 3


async def test_residency_on_the_organization_or_the_key_holds_every_key_under_it(setup):
    tenancy, outside, client, resolver = setup
    one = await tenancy.create_key(project="acme/ml/open")
    two = await tenancy.create_key(project="acme/ml/train")
    await tenancy.set_residency(f"key:{one.key.id}", True)
    resolver.invalidate()
    with pytest.raises(openai.PermissionDeniedError) as by_key:
        await client(one.secret).chat.completions.create(model="ext", messages=HELLO, max_tokens=4)
    assert "set on the key" in by_key.value.body["message"]
    await client(two.secret).chat.completions.create(model="ext", messages=HELLO, max_tokens=4)
    assert len(outside.seen) == 1

    await tenancy.set_residency("org:acme", True)
    resolver.invalidate()
    with pytest.raises(openai.PermissionDeniedError) as by_org:
        await client(two.secret).chat.completions.create(model="ext", messages=HELLO, max_tokens=4)
    assert "set on its organization" in by_org.value.body["message"]
    assert len(outside.seen) == 1


async def test_residency_is_refused_on_a_team_naming_where_it_may_be_set(setup):
    tenancy, *_ = setup
    with pytest.raises(Exception, match="organization, a project or a key, not a team"):
        await tenancy.set_residency("team:acme/ml", True)


async def test_a_batch_of_a_key_kept_in_the_cluster_never_reaches_the_provider(setup):
    import json

    from .stored import wait_for

    tenancy, outside, client, resolver = setup
    issued = await tenancy.create_key(project="acme/ml/train")
    await tenancy.set_residency("project:acme/ml/train", True)
    resolver.invalidate()
    lines = [{"custom_id": f"c-{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": model_name, "messages": HELLO, "max_tokens": 4}}
             for i, model_name in enumerate(("ext", "local"))]
    c = client(issued.secret)
    uploaded = await c.files.create(file=("in.jsonl", "".join(json.dumps(x) + "\n" for x in lines).encode()),
                                    purpose="batch")
    batch = await c.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                   completion_window="24h")

    async def ended():
        got = await c.batches.retrieve(batch.id)
        return got if got.status in ("completed", "failed") else None

    done = await wait_for(ended, timeout=30)
    assert (done.request_counts.completed, done.request_counts.failed) == (1, 1)
    errors = [json.loads(x) for x in (await c.files.content(done.error_file_id)).text.splitlines()]
    assert errors[0]["custom_id"] == "c-0" and "residency" in json.dumps(errors[0])
    assert outside.seen == []
