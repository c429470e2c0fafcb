"""Federation: another llmgw cluster as a provider, with two real gateways in the test.

Each cluster is a real gateway with its own SQLite store, the real key
resolver and the real accountant (usage rows land in its store); its own
model is a simulated engine put in its replica set as the scheduler would.
Cluster A names cluster B in server.yaml's `federation.peers` with a key B
issued to it; clients of A use B's models as `b/MODEL`.
"""

from __future__ import annotations

import aiohttp
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

from .conftest import HELLO
from .stored import wait_for
from .test_resilience import closed_port_url


class Cluster:
    def __init__(self, name, store, tenancy, runner, app, url):
        self.name, self.store, self.tenancy, self.runner, self.app, self.url = name, store, tenancy, runner, app, url
        self.clients: list = []

    @property
    def gw(self):
        return self.app[GATEWAY]

    def client(self, secret: str) -> openai.AsyncOpenAI:
        c = openai.AsyncOpenAI(base_url=self.url + "/v1", api_key=secret, max_retries=0)
        self.clients.append(c)
        return c

    async def rows(self, key_id: str, count: int):
        """The usage rows of a key once `count` are in the store (the accountant writes them in batches)."""
        async def enough():
            rows = await self.store.list_usage(key_id=key_id)
            return rows if len(rows) >= count else None
        return await wait_for(enough, timeout=10)

    async def close(self):
        for c in self.clients:
            await c.close()
        self.clients = []
        await self.runner.cleanup()


@pytest.fixture
async def cluster(tmp_path, sim):
    made: list[Cluster] = []

    async def make(name: str, *, local: str = "local", peers=(), models=()) -> Cluster:
        store = await open_store(f"sqlite:///{tmp_path}/{name}.db")
        tenancy = Tenancy(store, actor="test")
        await tenancy.create(name)
        await tenancy.create(f"{name}/apps", project=True)
        engine = await sim(models=[local])
        config = parse_server_config({
            "store": {"dsn": "/nonexistent/llmgw.db"},
            "auth": {"keys_required": True},
            "router": {"scrape_interval": "100ms", "retries": {"attempts": 0, "backoff": "0s"}},
            "accounting": {"flush_interval": "50ms"},
            "federation": {"cluster_id": name, "sync_interval": "100ms", "peers": list(peers)},
            "models": [{"name": local, "profiles": [{"engine": "sim"}]}, *models],
        })
        resolver = KeyResolver(store, ttl=0.0, negative_ttl=0.0)
        app = make_gateway_app(config, store=store, resolver=resolver, metrics=GatewayMetrics())
        runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        app[GATEWAY].replicas.add(Replica(id=f"{local}/node-1", model=local, base_url=engine.url + "/v1",
                                          source="control"))
        c = Cluster(name, store, tenancy, runner, app, f"http://127.0.0.1:{runner.addresses[0][1]}")
        made.append(c)
        return c

    yield make
    for c in made:
        await c.close()
        await c.store.close()


async def _pair(cluster, **a_extra):
    """Cluster B, and cluster A federating B with a key B issued to A (written to a file A reads)."""
    b = await cluster("b")
    issued = await b.tenancy.create_key(project="b/apps", name="cluster-a")
    a = await cluster("a", local="here",
                      peers=[{"name": "b", "url": b.url, "api_key": issued.secret}], **a_extra)
    return a, b, issued


async def _listed(c: Cluster, secret: str) -> dict:
    return {m.id: m for m in (await c.client(secret).models.list()).data}


async def test_a_peers_models_are_listed_and_served_whole_and_streamed_with_usage_on_both_sides(cluster):
    a, b, federation_key = await _pair(cluster)
    mine = await a.tenancy.create_key(project="a/apps", name="app")
    listed = await wait_for(lambda: _has(a, mine.secret, "b/local"))
    assert {"here", "b/local"} <= set(listed) and listed["b/local"].owned_by == "federation:b"

    raw = await a.client(mine.secret).chat.completions.with_raw_response.create(
        model="b/local", messages=HELLO, max_tokens=5)
    assert raw.parse().choices[0].message.content
    stream = await a.client(mine.secret).chat.completions.create(model="b/local", messages=HELLO, max_tokens=5,
                                                                 stream=True)
    assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    here = await a.rows(mine.key.id, 2)
    assert {(r.model_requested, r.model_served, r.replica, r.status) for r in here} == {
        ("b/local", "b/local", "federation:b/local", 200)}
    assert all(r.completion_tokens > 0 for r in here)
    there = await b.rows(federation_key.key.id, 2)  # the peer's own rows, for the key it issued to A
    assert {(r.model_requested, r.status) for r in there} == {("local", 200)}
    assert sorted(r.completion_tokens for r in there) == sorted(r.completion_tokens for r in here)


async def _has(c: Cluster, secret: str, name: str):
    listed = await _listed(c, secret)
    return listed if name in listed else None


async def test_a_model_the_peer_withdraws_is_withdrawn_here(cluster):
    a, b, _ = await _pair(cluster)
    mine = await a.tenancy.create_key(project="a/apps")
    await wait_for(lambda: _has(a, mine.secret, "b/local"))
    import anthropic  # Anthropic's API here, translated, then OpenAI's to the peer

    async with anthropic.AsyncAnthropic(base_url=a.url, api_key=mine.secret, max_retries=0) as claude:
        said = await claude.messages.create(model="b/local", max_tokens=5,
                                            messages=[{"role": "user", "content": "hello"}])
    assert said.content[0].text
    b.gw.replicas.remove("local/node-1")
    b.gw.catalog.set_models([])  # B serves no model any more

    async def gone():
        return "b/local" not in await _listed(a, mine.secret)
    await wait_for(gone, timeout=5)
    with pytest.raises(openai.NotFoundError) as missing:
        await a.client(mine.secret).chat.completions.create(model="b/local", messages=HELLO, max_tokens=3)
    assert missing.value.body["code"] == "model_not_found"


async def test_loops_are_refused_and_federation_is_not_transitive(cluster, http):
    b = await cluster("b")
    a_key_at_b = await b.tenancy.create_key(project="b/apps")
    a = await cluster("a", local="here", peers=[{"name": "b", "url": b.url, "api_key": a_key_at_b.secret}])
    mine = await a.tenancy.create_key(project="a/apps")
    # B federates A too: B lists a/here, and A, reading B, does not list b/a/here
    b_key_at_a = await a.tenancy.create_key(project="a/apps", name="cluster-b")
    b.gw.federation.peers.update(_peer(a, b_key_at_a.secret))
    b.gw.federation.start(b.gw.upstream.session)
    theirs = await b.tenancy.create_key(project="b/apps")
    await wait_for(lambda: _has(b, theirs.secret, "a/here"))
    await wait_for(lambda: _has(a, mine.secret, "b/local"))
    await b.gw.federation.sync(b.gw.federation.peers["a"])
    await a.gw.federation.sync(a.gw.federation.peers["b"])
    assert "b/a/here" not in await _listed(a, mine.secret)

    body = {"model": "here", "messages": HELLO, "max_tokens": 3}
    headers = {"Authorization": f"Bearer {mine.secret}", "x-llmgw-hop": "b, a"}
    async with http.post(a.url + "/v1/chat/completions", json=body, headers=headers) as resp:
        error = (await resp.json())["error"]
    assert resp.status == 508 and error["code"] == "federation_loop"
    assert "already passed through cluster 'a'" in error["message"]
    # a peer's request for a model A forwards to yet another cluster is refused, naming why
    headers["x-llmgw-hop"] = "c"
    async with http.post(a.url + "/v1/chat/completions", json={**body, "model": "b/local"}, headers=headers) as resp:
        error = (await resp.json())["error"]
    assert resp.status == 403 and error["code"] == "federation_not_transitive"
    async with http.post(a.url + "/v1/chat/completions", json=body, headers=headers) as resp:
        assert resp.status == 200, "a peer may use A's own models"

    # were B to list what it federates, A's request carries its hop and B refuses to pass it on
    a.gw.replicas.add(Replica(id="federation:b/a/here", model="b/a/here", base_url=b.url + "/v1",
                              engine_model="a/here", api_key=a.gw.federation.peers["b"].api_key,
                              source="federation", extra_headers={"x-llmgw-hop": "a"}))
    with pytest.raises(openai.PermissionDeniedError) as passed_on:
        await a.client(mine.secret).chat.completions.create(model="b/a/here", messages=HELLO, max_tokens=3)
    assert passed_on.value.body["code"] == "federation_not_transitive"
    assert "x-llmgw-hop: a" in passed_on.value.body["message"]


def _peer(c: Cluster, secret: str) -> dict:
    from llmgw.config.secrets import Secret
    from llmgw.config.server import FederationPeer
    from llmgw.router.federation import Peer

    return {c.name: Peer(FederationPeer(name=c.name, url=c.url, api_key=Secret(secret)))}


async def test_a_key_kept_in_the_cluster_is_refused_a_peers_model_and_the_peer_sees_nothing(cluster):
    a, b, federation_key = await _pair(cluster)
    mine = await a.tenancy.create_key(project="a/apps")
    await wait_for(lambda: _has(a, mine.secret, "b/local"))
    await a.tenancy.set_residency("project:a/apps", True)
    a.gw.resolver.invalidate()
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await a.client(mine.secret).chat.completions.create(model="b/local", messages=HELLO, max_tokens=3)
    assert refused.value.status_code == 403 and refused.value.body["code"] == "residency_in_cluster"
    assert "residency in-cluster is set on its project" in refused.value.body["message"]
    assert (await a.client(mine.secret).chat.completions.create(model="here", messages=HELLO, max_tokens=3)).choices
    await a.rows(mine.key.id, 2)
    assert await b.store.list_usage(key_id=federation_key.key.id) == []


async def test_a_peer_that_is_down_answers_503_with_the_reason_and_fallbacks_are_used(cluster):
    a, b, _ = await _pair(cluster, models=[
        {"name": "primary", "endpoints": [{"url": closed_port_url()}], "fallbacks": ["b/local", "here"]}])
    mine = await a.tenancy.create_key(project="a/apps")
    await wait_for(lambda: _has(a, mine.secret, "b/local"))
    # a local model whose upstream is dead moves to the peer's model, on its first request
    raw = await a.client(mine.secret).chat.completions.with_raw_response.create(
        model="primary", messages=HELLO, max_tokens=3)
    assert raw.headers["x-llmgw-served-model"] == "b/local"

    await b.close()  # cluster B goes away

    async def down():
        listed = await _listed(a, mine.secret)
        return not listed["b/local"].model_extra["ready"]
    await wait_for(down, timeout=5)
    with pytest.raises(openai.APIStatusError) as refused:
        await a.client(mine.secret).chat.completions.create(model="b/local", messages=HELLO, max_tokens=3)
    error = refused.value.body
    assert refused.value.status_code == 503 and error["code"] == "peer_unavailable"
    assert "federation peer 'b', which is down: cannot connect to 127.0.0.1" in error["message"]
    raw = await a.client(mine.secret).chat.completions.with_raw_response.create(
        model="primary", messages=HELLO, max_tokens=3)
    assert raw.headers["x-llmgw-served-model"] == "here"


async def test_a_peer_back_up_serves_its_models_again(cluster):
    a, b, _ = await _pair(cluster)
    mine = await a.tenancy.create_key(project="a/apps")
    await wait_for(lambda: _has(a, mine.secret, "b/local"))
    site = next(iter(b.runner.sites))
    port = b.runner.addresses[0][1]
    await site.stop()  # B stops listening

    async def ready(expected: bool):
        return (await _listed(a, mine.secret))["b/local"].model_extra["ready"] is expected
    await wait_for(lambda: ready(False), timeout=5)
    await web.TCPSite(b.runner, "127.0.0.1", port).start()  # and listens again
    await wait_for(lambda: ready(True), timeout=5)
    answer = await a.client(mine.secret).chat.completions.create(model="b/local", messages=HELLO, max_tokens=3)
    assert answer.choices[0].message.content


def test_a_model_added_at_run_time_may_fall_back_to_a_peers_model_and_not_to_an_unknown_one():
    from llmgw.control.catalog import Catalog, CatalogError

    catalog = Catalog([], None, None)
    catalog.federation_peers = frozenset({"b"})
    spec = {"name": "m", "source": "hf:org/m", "profiles": [{"engine": "sim"}]}
    assert catalog.check({**spec, "fallbacks": ["b/local"]}).fallbacks == ["b/local"]
    with pytest.raises(CatalogError, match="no model called 'c/local' is in the catalog"):
        catalog.check({**spec, "fallbacks": ["c/local"]})


def test_with_no_cluster_id_the_hop_names_the_host():
    import socket

    from llmgw.config.server import FederationConfig
    from llmgw.router.federation import Federation
    from llmgw.router.replicas import ReplicaSet

    assert Federation(FederationConfig(), ReplicaSet()).cluster_id == socket.gethostname()


def test_server_yaml_with_a_bad_peer_is_refused_naming_each_key():
    from llmgw.config.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        parse_server_config({
            "models": [{"name": "b/x", "profiles": [{"engine": "sim"}]},
                       {"name": "y", "profiles": [{"engine": "sim"}], "fallbacks": ["b/z", "nope/z"]}],
            "federation": {"peers": [{"name": "b", "url": "http://b:8080", "api_key": "k"},
                                     {"name": "b", "url": "b:8080", "api_key": "k"},
                                     {"name": "c/d", "url": "http://c", "api_key": "k"}]}})
    text = str(refused.value)
    assert "federation.peers[0].name: models b/x start with b/" in text
    assert "federation.peers[1].name: peer 'b' is named twice" in text
    assert "federation.peers[1].url: 'b:8080' is not an http:// or https://" in text
    assert "federation.peers[2].name: 'c/d' is not a peer name" in text
    assert "fallbacks[1]: no model is called 'nope/z'" in text and "fallbacks[0]" not in text, "b/z is a peer's"


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


async def test_ctl_federation_list_shows_each_peer_up_or_down_with_its_models(cluster, tmp_path, capsys):
    import asyncio

    from llmgw.admin.app import make_admin_app
    from llmgw.cli.main import main
    from llmgw.server.live import GatewayLive

    a, b, federation_key = await _pair(cluster)
    mine = await a.tenancy.create_key(project="a/apps")
    await wait_for(lambda: _has(a, mine.secret, "b/local"))
    admin = make_admin_app(a.gw.config, a.store, token="admin-secret", live=GatewayLive(a.gw))
    runner = web.AppRunner(admin, shutdown_timeout=0.5, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    token = tmp_path / "token"
    token.write_text("admin-secret")
    argv = ["ctl", "federation", "list", "--admin", f"http://127.0.0.1:{runner.addresses[0][1]}",
            "--token-file", str(token)]
    try:
        capsys.readouterr()
        assert await asyncio.to_thread(main, argv) == 0
        out = capsys.readouterr().out
        assert out.splitlines()[0].split() == ["PEER", "STATE", "URL", "MODELS", "REASON"]
        assert out.splitlines()[1].split() == ["b", "up", b.url + "/v1", "b/local", "-"]
        assert federation_key.secret not in out
        await b.close()

        async def down():
            return not a.gw.federation.peers["b"].up
        await wait_for(down, timeout=5)
        assert await asyncio.to_thread(main, [*argv, "--json"]) == 0
        import json

        answer = json.loads(capsys.readouterr().out)
        assert answer["cluster_id"] == "a"
        assert answer["peers"][0]["up"] is False and "cannot connect to 127.0.0.1" in answer["peers"][0]["reason"]
    finally:
        await runner.cleanup()
