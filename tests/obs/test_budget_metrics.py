"""llmgw_budget_spent_ratio on the server's /metrics: every budget's spend over the budget, as requests spend it."""

from __future__ import annotations

import sys
from pathlib import Path

import openai
from aiohttp import ClientSession, web

from llmgw.config import parse_server_config
from llmgw.server import make_gateway_app, make_metrics_app
from llmgw.server.app import METRICS
from llmgw.store import open_store

from scrape import promtool_problems, value

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from serving import project_key, sim_engine  # noqa: E402

HELLO = [{"role": "user", "content": "hello"}]


async def test_a_projects_budget_spent_ratio_follows_its_requests(tmp_path):
    db = str(tmp_path / "llmgw.db")
    store = await open_store(db)
    project, _, secret = await project_key(store, "search", "svc")
    await store.set_limits("project", project.id, budget_micros=50_000, budget_period="day")
    idle = await store.create_project(project.org_id, "idle")  # a budget nothing has spent from
    await store.set_limits("project", idle.id, budget_micros=1_000_000, budget_period="month")
    async with sim_engine("m") as engine:
        config = parse_server_config({
            "store": {"dsn": db},
            # 1000 micro-dollars a generated token: five tokens are a tenth of the budget.
            "models": [{"name": "m", "endpoints": [{"url": engine.url + "/v1"}], "price": {"input": 0.0, "output": 1000.0}}],
        })
        app = make_gateway_app(config, store=store)
        runners = []
        try:
            for made in (app, make_metrics_app(app[METRICS])):
                runner = web.AppRunner(made, access_log=None)
                await runner.setup()
                await web.TCPSite(runner, "127.0.0.1", 0).start()
                runners.append(runner)
            base = f"http://127.0.0.1:{runners[0].addresses[0][1]}/v1"
            metrics_url = f"http://127.0.0.1:{runners[1].addresses[0][1]}/metrics"
            async with openai.AsyncOpenAI(base_url=base, api_key=secret, max_retries=0) as client:
                for _ in range(3):
                    await client.chat.completions.create(model="m", messages=HELLO, max_tokens=5)
            async with ClientSession() as http, http.get(metrics_url) as resp:
                text = await resp.text()
            assert value(text, "llmgw_budget_spent_ratio", scope="project", name=project.id, period="day") == 0.3
            assert value(text, "llmgw_budget_spent_ratio", scope="project", name=idle.id, period="month") == 0
            assert promtool_problems(text) == []
        finally:
            for runner in reversed(runners):
                await runner.cleanup()
    await store.close()
