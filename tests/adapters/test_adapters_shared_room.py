"""A base and its adapters at one engine share the engine's concurrency: never more than it in flight there."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import openai
import pytest
from aiohttp import web
from adapter_files import sim_adapter

from llmgw.adapters import serving
from llmgw.config import parse_server_config
from llmgw.router.gateway import GATEWAY
from llmgw.router.replicas import Replica, ReplicaSet
from llmgw.server import make_gateway_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from router.conftest import FakeAccountant, FakeResolver, principal  # noqa: E402

ASK = [{"role": "user", "content": "Which table holds the orders?"}]
QWEN = {"name": "qwen", "engine": "sim", "profiles": [{"name": "cpu"}], "concurrency": 2,
        "adapters": [{"name": "sql", "source": "adapters/sql.json"}, {"name": "docs", "source": "adapters/d.json"}]}


@pytest.fixture
async def served(sim, tmp_path):
    engine = await sim(models=["qwen"], ttft=0.2, max_num_seqs=8,
                       lora_modules=[f"sql={sim_adapter(tmp_path / 'sql.json', 'SQL:')}",
                                     f"docs={sim_adapter(tmp_path / 'docs.json', 'DOCS:')}"])
    config = parse_server_config({"models": [QWEN], "store": {"dsn": "/nonexistent/llmgw.db"},
                                  "auth": {"keys_required": True}})
    app = make_gateway_app(config, accountant=FakeAccountant(), resolver=FakeResolver(
        {"k": principal("a", models={"qwen", "qwen:sql", "qwen:docs"})}))
    runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    gw = app[GATEWAY]
    base = gw.replicas.add(Replica(id="r1", model="qwen", base_url=engine.url + "/v1", source="control",
                                   max_concurrency=2))
    serving.publish(gw.replicas, base, config.model("qwen"), ["sql", "docs"], "sim")
    yield gw, engine, f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    await runner.cleanup()


async def test_a_base_request_and_two_adapter_requests_never_put_three_at_an_engine_of_concurrency_2(served):
    gw, engine, url = served
    most = 0

    async def watch():
        nonlocal most
        while True:
            most = max(most, engine.engine.scheduler.running)
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    async with openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0) as c:
        asks = [asyncio.create_task(c.chat.completions.create(model=m, messages=ASK, max_tokens=4))
                for m in ("qwen", "qwen:sql", "qwen:docs")]
        await asyncio.sleep(0.1)  # all three at the router; the engine still on its first token
        in_flight = sum(r.in_flight for r in gw.replicas)
        waiting = sum(gw.admission.waiting(m) for m in ("qwen", "qwen:sql", "qwen:docs"))
        answers = await asyncio.gather(*asks)
    watcher.cancel()
    assert (in_flight, waiting) == (2, 1)  # the third waits in its model's queue, as a base's third would
    assert most == 2
    texts = [a.choices[0].message.content for a in answers]
    assert texts[1].startswith("SQL:") and texts[2].startswith("DOCS:") and not texts[0].startswith("SQL:")
    assert all(r.in_flight == 0 for r in gw.replicas)


def test_the_room_is_the_base_s_and_its_adapters_together_and_an_unloaded_adapter_leaves_it():
    replicas = ReplicaSet()
    model = parse_server_config({"models": [QWEN]}).models[0]
    base = replicas.add(Replica(id="r1", model="qwen", base_url="http://h/v1", source="control", max_concurrency=2))
    other = replicas.add(Replica(id="r2", model="qwen", base_url="http://g/v1", source="control", max_concurrency=2))
    sql, docs = serving.publish(replicas, base, model, ["sql", "docs"], "sim")
    base.in_flight, sql.in_flight = 1, 1
    assert not base.has_room() and not sql.has_room() and not docs.has_room()
    assert other.has_room()  # another engine: its own room
    assert sorted(base.sharing_models()) == ["qwen", "qwen:docs", "qwen:sql"]
    serving.withdraw(replicas, "r1", "sql")  # unloaded to make room (nothing in flight there by then)
    assert base.has_room() and docs.has_room()
    again = serving.publish(replicas, base, model, ["sql"], "sim")[0]  # loaded again: back in the room
    again.in_flight = 1
    assert not docs.has_room()


def test_a_worker_s_copy_of_the_replicas_shares_the_room_as_worker_0_s_does():
    from types import SimpleNamespace

    from llmgw.router.catalog import Catalog
    from llmgw.server.workers import apply, snapshot

    config = parse_server_config({"models": [QWEN]})

    def gateway():
        replicas = ReplicaSet()
        return SimpleNamespace(replicas=replicas, catalog=Catalog(config.models, replicas))

    first, worker = gateway(), gateway()
    base = first.replicas.add(Replica(id="r1", model="qwen", base_url="http://h/v1", source="control",
                                      max_concurrency=2))
    serving.publish(first.replicas, base, config.models[0], ["sql", "docs"], "sim")
    apply(worker, snapshot(first))
    copy = {r.id: r for r in worker.replicas}
    assert sorted(copy) == ["r1", "r1+docs", "r1+sql"]
    copy["r1"].in_flight, copy["r1+sql"].in_flight = 1, 1
    assert not copy["r1+docs"].has_room()
    assert base.has_room()  # worker 0's own count is its own
