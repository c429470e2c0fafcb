"""An engine that forgot an adapter (restarted, or unloaded behind the router's back): its 404 has the adapter
loaded into it again and the request sent once more; a load that fails answers a clear 503.

The gateway, the sim engine and the adapter loader are the real ones; the control plane around the loader is
cut down to what it reads (its replica records: where the node keeps each adapter)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import openai
import pytest
from aiohttp import web
from adapter_files import sim_adapter

from llmgw.adapters import loading, serving
from llmgw.config import parse_server_config
from llmgw.router.gateway import GATEWAY
from llmgw.router.replicas import Replica
from llmgw.server import make_gateway_app
from llmgw.simengine.adapters import ADAPTERS
from llmgw.wire.messages import AdapterHeld

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from router.conftest import FakeAccountant, FakeResolver, principal  # noqa: E402

ASK = [{"role": "user", "content": "Which table holds the orders?"}]
QWEN = {"name": "qwen", "engine": "sim", "profiles": [{"name": "cpu"}], "max_adapters": 2,
        "adapters": [{"name": "sql", "source": "adapters/sql.json"}]}


async def serve(sim, tmp_path, adapter_path: Path):
    """A gateway whose router thinks replica r1 holds `sql`, and an engine that holds nothing (restarted)."""
    engine = await sim(models=["qwen"], max_loras=2)
    config = parse_server_config({"models": [QWEN], "store": {"dsn": "/nonexistent/llmgw.db"},
                                  "auth": {"keys_required": True}})
    app = make_gateway_app(config, accountant=FakeAccountant(),
                           resolver=FakeResolver({"k": principal("a", models={"qwen", "qwen:sql"})}))
    runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    gw = app[GATEWAY]
    base = gw.replicas.add(Replica(id="r1", model="qwen", base_url=engine.url + "/v1", source="control"))
    serving.publish(gw.replicas, base, config.model("qwen"), ["sql"], "sim")
    record = SimpleNamespace(id="r1", model="qwen", node="n1",
                             adapters=(AdapterHeld(name="sql", path=str(adapter_path), loaded=True),))
    loader = loading.AdapterLoader(SimpleNamespace(replicas=gw.replicas, records={"r1": record}))
    plane = SimpleNamespace(reconciler=loader.reconciler, leading=True, _adapter_loader=lambda: loader)
    gw.upstream.adapter_missing = loading.reload_forgotten(SimpleNamespace(plane=plane))
    return gw, engine, record, runner, f"http://127.0.0.1:{runner.addresses[0][1]}/v1"


async def test_the_next_request_for_a_forgotten_adapter_is_answered_the_adapter_loaded_again(sim, tmp_path):
    gw, engine, record, runner, url = await serve(sim, tmp_path, sim_adapter(tmp_path / "sql.json", "SQL:"))
    try:
        assert engine.app[ADAPTERS].get("sql") is None  # the engine forgot it
        async with openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0) as c:
            answer = await c.chat.completions.create(model="qwen:sql", messages=ASK, max_tokens=6)
            assert answer.choices[0].message.content.startswith("SQL:")
            assert engine.app[ADAPTERS].get("sql") is not None
            assert [a.loaded for a in record.adapters] == [True]
            again = await c.chat.completions.create(model="qwen:sql", messages=ASK, max_tokens=6)
            assert again.choices[0].message.content.startswith("SQL:")
        assert gw.replicas.get("r1+sql").in_flight == 0 and gw.replicas.get("r1").in_flight == 0
    finally:
        await runner.cleanup()


async def test_an_adapter_that_cannot_be_loaded_again_gets_a_503_and_is_no_longer_sent_there(sim, tmp_path):
    gw, engine, record, runner, url = await serve(sim, tmp_path, tmp_path / "gone.json")
    try:
        async with openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0) as c:
            with pytest.raises(openai.InternalServerError) as caught:
                await c.chat.completions.create(model="qwen:sql", messages=ASK, max_tokens=6)
        assert caught.value.status_code == 503
        assert "replica r1 refused load_lora_adapter of 'sql' (400)" in str(caught.value)
        assert gw.replicas.get("r1+sql") is None and [a.loaded for a in record.adapters] == [False]
        assert gw.replicas.get("r1").in_flight == 0
    finally:
        await runner.cleanup()
