"""Adapters through the gateway: asked for as BASE:NAME, ALIAS:NAME or NAME, routed only where they are held."""

from __future__ import annotations

import sys
from pathlib import Path

import openai
import pytest
from aiohttp import web
from adapter_files import sim_adapter

from llmgw.adapters import serving
from llmgw.auth.keys import model_aliases
from llmgw.config import parse_server_config
from llmgw.router.gateway import GATEWAY
from llmgw.router.replicas import Replica, ReplicaSet
from llmgw.server import make_gateway_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from router.conftest import FakeAccountant, FakeResolver, principal  # noqa: E402

ASK = [{"role": "user", "content": "Which table holds the orders?"}]
QWEN = {"name": "qwen", "aliases": ["small"], "engine": "sim", "profiles": [{"name": "cpu"}],
        "adapters": [{"name": "sql", "source": "adapters/sql.json"}, {"name": "docs", "source": "adapters/d.json"}]}
OTHER = {"name": "other", "engine": "sim", "profiles": [{"name": "cpu"}]}


@pytest.fixture
async def served(sim, tmp_path):
    engine = await sim(models=["qwen"], lora_modules=[f"sql={sim_adapter(tmp_path / 'sql.json', 'SQL:')}"])
    config = parse_server_config({"models": [QWEN, OTHER], "store": {"dsn": "/nonexistent/llmgw.db"},
                                  "auth": {"keys_required": True}})
    names = model_aliases(config)
    allowed = {n for n, m in names.items() if m == "qwen"}
    accountant = FakeAccountant()
    app = make_gateway_app(config, resolver=FakeResolver({"k-qwen": principal("a", models=allowed),
                                                           "k-other": principal("b", models={"other"})}),
                           accountant=accountant)
    runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    gw = app[GATEWAY]
    base = gw.replicas.add(Replica(id="r1", model="qwen", base_url=engine.url + "/v1", source="control"))
    serving.publish(gw.replicas, base, config.model("qwen"), ["sql"], "sim")
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    yield gw, url, accountant
    await runner.cleanup()


def client(url: str, key: str = "k-qwen") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0)


async def test_every_name_of_an_adapter_reaches_it_and_the_base_stays_the_base(served):
    gw, url, accountant = served
    async with client(url) as c:
        for asked in ("qwen:sql", "small:sql", "sql"):
            answer = await c.chat.completions.create(model=asked, messages=ASK, max_tokens=8)
            assert answer.choices[0].message.content.startswith("SQL:"), asked
        base = await c.chat.completions.create(model="qwen", messages=ASK, max_tokens=8)
        assert not base.choices[0].message.content.startswith("SQL:")
        listed = {m.id for m in (await c.models.list()).data}
    assert {"qwen", "qwen:sql", "qwen:docs"} <= listed and "other" not in listed
    assert [r.model for r in accountant.rows] == ["qwen:sql", "qwen:sql", "qwen:sql", "qwen"]
    assert [(r.model_requested, r.model_served, r.replica) for r in accountant.rows][1] == \
        ("small:sql", "qwen:sql", "r1+sql")


async def test_a_key_for_another_model_may_not_use_the_adapter(served):
    _, url, _ = served
    async with client(url, "k-other") as c:
        with pytest.raises(openai.PermissionDeniedError):
            await c.chat.completions.create(model="qwen:sql", messages=ASK, max_tokens=4)


async def test_an_adapter_no_replica_holds_is_refused_and_one_goes_with_its_base(served):
    gw, url, _ = served
    async with client(url) as c:
        with pytest.raises(openai.InternalServerError) as caught:
            await c.chat.completions.create(model="qwen:docs", messages=ASK, max_tokens=4)
        assert "qwen:docs" in str(caught.value)
        gw.replicas.remove("r1")
        assert gw.replicas.replicas_for("qwen:sql") == []
        with pytest.raises(openai.NotFoundError):
            await c.chat.completions.create(model="qwen:nope", messages=ASK, max_tokens=4)


def test_llama_cpp_replicas_carry_the_adapter_by_its_index_and_scale():
    config = parse_server_config({"models": [{**QWEN, "engine": "llamacpp",
                                              "adapters": [{"name": "a", "source": "x"},
                                                           {"name": "b", "source": "y", "scale": 0.5}]}]})
    base = Replica(id="r1", model="qwen", base_url="http://h/v1", source="control")
    [b] = serving.publish(ReplicaSet(), base, config.models[0], ["b"], "llamacpp")
    assert (b.id, b.model, b.name_at_engine) == ("r1+b", "qwen:b", "qwen")
    sent = serving.with_body_fields(b, b'{"model":"qwen","messages":[]}', "application/json")
    assert b'"lora":[{"id":1,"scale":0.5}]' in sent.replace(b" ", b"")
    assert b'"cache_prompt":false' in sent.replace(b" ", b"")  # llama-server's cache ignores which adapter
    assert base.body_fields == {"cache_prompt": False}  # for the base's requests too


def test_an_adapter_is_priced_as_its_base():
    from llmgw.accounting.prices import PriceBook

    config = parse_server_config({"models": [{**QWEN, "price": {"input": 2.0, "output": 6.0}}, OTHER]})
    book = PriceBook.from_config(config)
    assert book.price("qwen:sql") == book.price("small:sql") == book.price("sql") == book.price("qwen")
    assert book.price("qwen:sql") != book.price("other")


def test_a_replica_serving_only_its_adapters_is_not_idle():
    replicas = ReplicaSet()
    base = replicas.add(Replica(id="r1", model="qwen", base_url="http://h/v1", source="control"))
    assert serving.last_used(replicas, "r1", 100.0) == 0.0
    [sql] = serving.publish(replicas, base, parse_server_config({"models": [QWEN]}).models[0], ["sql"], "sim")
    sql.last_chosen = 42.0
    assert serving.last_used(replicas, "r1", 100.0) == 42.0
    sql.in_flight = 1
    assert serving.last_used(replicas, "r1", 100.0) == 100.0
