"""A model added at run time (the admin API, `llmgw ctl model add`) is served by the router at once.

A control plane + a fake agent that starts real sim engines; requests through the openai SDK.
"""

from __future__ import annotations

import asyncio

import aiohttp
import openai
import pytest

from llmgw.config.load import parse_server_config
from llmgw.router.gateway import GATEWAY

from .conftest import ENGINES
from .test_service import EngineStartingAgent, free_port, until

HELLO = [{"role": "user", "content": "hello"}]


def config_for(tmp_path, store: str, **extra):
    return parse_server_config({
        "agent_listen": f"127.0.0.1:{free_port()}", "agent_insecure": True,
        "admin_listen": f"127.0.0.1:{free_port()}", "admin_token_file": str(tmp_path / "admin-token"),
        "store": {"dsn": store}, "auth": {"keys_required": False}, **extra,
        "control": {"lease_ttl": "1200ms", "reconcile_interval": "200ms"},
        "models": [{"name": "primary", "engine": "sim", "profiles": [{"name": "cpu"}],
                    "scaling": {"min": 0, "max": 1}}],
    })


class Admin:
    def __init__(self, http: aiohttp.ClientSession, config, tmp_path) -> None:
        self.http = http
        self.base = f"http://{config.admin_listen}/api/v1"
        self.headers = {"Authorization": f"Bearer {(tmp_path / 'admin-token').read_text().strip()}"}

    async def call(self, method: str, path: str, body=None, **params) -> dict:
        async with self.http.request(method, self.base + path, json=body, params=params,
                                     headers=self.headers) as resp:
            assert resp.status < 300, await resp.text()
            return await resp.json()


LAZY = {"name": "lazy", "engine": "sim", "aliases": ["spare"], "profiles": [{"name": "cpu"}],
        "scaling": {"min": 0, "max": 1, "on_demand": True}}


@pytest.mark.slow
async def test_a_model_added_at_run_time_is_served_aliased_fallen_back_to_and_removed(tmp_path, aiohttp_client):
    from llmgw.control.wiring import attach_control_plane
    from llmgw.server import make_gateway_app

    config = config_for(tmp_path, str(tmp_path / "store.db"))
    app = make_gateway_app(config)
    slot = attach_control_plane(app, config, engines=ENGINES, holder="cp-1")
    client = await aiohttp_client(app)
    await until(lambda: slot.plane is not None and slot.plane.leading, timeout=5, what="leading")
    slot.plane.reconciler.hold_starts_until = 0.0  # no take-over to wait out in a test
    agent = EngineStartingAgent([f"127.0.0.1:{slot.plane.agent_port}"])
    agent.start()
    sdk = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="none", max_retries=0)
    try:
        await until(lambda: slot.plane.nodes(), what="the agent registered")
        with pytest.raises(openai.NotFoundError, match="no model called 'lazy' is served here"):
            await sdk.chat.completions.create(model="lazy", messages=HELLO, max_tokens=4)
        async with aiohttp.ClientSession() as http:
            admin = Admin(http, config, tmp_path)
            await admin.call("POST", "/models", LAZY)
            assert "lazy" in [m.id for m in (await sdk.models.list()).data]
            assert agent.shards == {}, "an on-demand model runs nothing before it is asked for"

            answer = await sdk.chat.completions.create(model="lazy", messages=HELLO, max_tokens=4)
            assert answer.choices[0].message.content
            assert len(agent.shards) == 1
            answer = await sdk.chat.completions.create(model="spare", messages=HELLO, max_tokens=4)
            assert answer.model and answer.choices[0].message.content

            # a run-time model that is down (stopped) falls back to lazy, named by its alias
            await admin.call("POST", "/models", {"name": "stopped", "engine": "sim", "profiles": [{"name": "cpu"}],
                                                 "fallbacks": ["spare"], "scaling": {"min": 0, "max": 0}})
            answer = await sdk.chat.completions.create(model="stopped", messages=HELLO, max_tokens=4)
            assert answer.choices[0].message.content
            assert len(agent.shards) == 1, "the fallback ran on the replica already there"

            # a new concurrency for the replicas already serving it
            await admin.call("POST", "/models", {**LAZY, "concurrency": 3}, replace="true")
            replicas = app[GATEWAY].replicas.replicas_for("lazy")
            assert replicas and {r.max_concurrency for r in replicas} == {3}

            await admin.call("DELETE", "/models/lazy", {})
            for name in ("lazy", "spare"):
                with pytest.raises(openai.NotFoundError, match=f"no model called '{name}' is served here"):
                    await sdk.chat.completions.create(model=name, messages=HELLO, max_tokens=4)
            assert "lazy" not in [m.id for m in (await sdk.models.list()).data]
    finally:
        await sdk.close()
        await agent.stop()


@pytest.mark.slow
async def test_a_second_control_plane_on_the_store_serves_a_model_added_on_the_first(tmp_path, aiohttp_client):
    from llmgw.control.wiring import attach_control_plane
    from llmgw.router.catalog_follow import WATCH_S
    from llmgw.server import make_gateway_app

    store = str(tmp_path / "store.db")
    first, second = config_for(tmp_path, store), config_for(tmp_path, store)
    apps = [make_gateway_app(c) for c in (first, second)]
    slots = [attach_control_plane(a, c, engines=ENGINES, holder=f"cp-{i}")
             for i, (a, c) in enumerate(zip(apps, (first, second)))]
    clients = [await aiohttp_client(a) for a in apps]
    await until(lambda: all(s.plane is not None for s in slots) and any(s.plane.leading for s in slots),
                timeout=5, what="one of two control planes leading")
    # Added on the leader; the standby (whose scheduler reads nothing) has only the watcher to see it.
    lead = 0 if slots[0].plane.leading else 1
    standby = 1 - lead
    async with aiohttp.ClientSession() as http:
        await Admin(http, (first, second)[lead], tmp_path).call("POST", "/models", LAZY)
    loop = asyncio.get_running_loop()
    began = loop.time()

    async def served_by_second() -> bool:
        resp = await clients[standby].get("/v1/models")
        return "lazy" in [m["id"] for m in (await resp.json())["data"]]

    while not await served_by_second():
        assert loop.time() - began < WATCH_S + 2, "the second control plane did not see the model in time"
        await asyncio.sleep(0.1)
    assert not slots[standby].plane.leading
    gateway = apps[standby][GATEWAY]
    assert gateway.catalog.resolve("spare") == "lazy"
    assert gateway.resolver is None or gateway.resolver.aliases.get("spare") == "lazy"


@pytest.mark.slow
async def test_a_key_allowed_a_run_time_alias_may_use_the_model_by_its_name(tmp_path, aiohttp_client):
    from llmgw.control.wiring import attach_control_plane
    from llmgw.server import make_gateway_app
    from llmgw.auth.keys import hash_secret, new_secret, visible_prefix
    from llmgw.store import open_store

    db = str(tmp_path / "store.db")
    store = await open_store(db)
    try:  # the allowlist names the alias before the model exists
        project = await store.create_project((await store.create_org("acme")).id, "search")
        secret = new_secret()
        await store.create_key(key_hash=hash_secret(secret), prefix=visible_prefix(secret), name="svc",
                               project_id=project.id, allowed_models=["spare"])
    finally:
        await store.close()
    config = config_for(tmp_path, db, auth={"keys_required": True})
    app = make_gateway_app(config)
    slot = attach_control_plane(app, config, engines=ENGINES, holder="cp-1")
    client = await aiohttp_client(app)
    await until(lambda: slot.plane is not None and slot.plane.leading, timeout=5, what="leading")
    slot.plane.reconciler.hold_starts_until = 0.0
    agent = EngineStartingAgent([f"127.0.0.1:{slot.plane.agent_port}"])
    agent.start()
    sdk = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key=secret, max_retries=0)
    try:
        await until(lambda: slot.plane.nodes(), what="the agent registered")
        assert [m.id for m in (await sdk.models.list()).data] == []
        async with aiohttp.ClientSession() as http:
            await Admin(http, config, tmp_path).call("POST", "/models", LAZY)
        answer = await sdk.chat.completions.create(model="lazy", messages=HELLO, max_tokens=4)
        assert answer.choices[0].message.content
        assert [m.id for m in (await sdk.models.list()).data] == ["lazy"]
        # a batch's lines and a replay read the key's allowlist with the same names as a request does
        assert app[GATEWAY].model_aliases().get("spare") == "lazy"
        with pytest.raises(openai.PermissionDeniedError):
            await sdk.chat.completions.create(model="primary", messages=HELLO, max_tokens=4)
    finally:
        await sdk.close()
        await agent.stop()
