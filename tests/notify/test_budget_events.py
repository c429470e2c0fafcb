"""Budget events through the real gateway: a share of a budget crossed and a request refused are each sent to
the sinks once per period, counted in llmgw_budget_events_total, and not sent again after a restart."""

from __future__ import annotations

import asyncio

import openai
import pytest
from aiohttp import web
from server.serving import project_key, sim_engine

from llmgw.config import parse_server_config
from llmgw.notify.wiring import install_notifier
from llmgw.server import make_gateway_app
from llmgw.server.app import METRICS
from llmgw.store import open_store

HELLO = [{"role": "user", "content": "Hello there."}]


def config_for(engine_url: str, db: str, receiver_url: str, **extra):
    return parse_server_config({
        "store": {"dsn": db},
        "accounting": {"flush_interval": "50ms"},
        # 1000 micro-dollars a generated token: a request of five tokens is a quarter of the budget.
        "models": [{"name": "m", "endpoints": [{"url": engine_url + "/v1"}], "price": {"output": 1000.0}}],
        "notify": {"sinks": [{"url": receiver_url + "/hook", "events": ["budget_spent"]}]},
        **extra,
    })


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/v1"


def events_counted(app, threshold: str) -> float:
    return app[METRICS].registry.get_sample_value(
        "llmgw_budget_events_total", {"scope": "project", "threshold": threshold}) or 0.0


async def received(receiver, count: int) -> list[dict]:
    for _ in range(200):
        if len(receiver.received) >= count:
            break
        await asyncio.sleep(0.02)
    return [r.json() for r in receiver.received]


async def test_a_budget_tells_its_share_crossed_and_its_refusal_once_even_after_a_restart(receiver, tmp_path):
    db = str(tmp_path / "llmgw.db")
    store = await open_store(db)
    project, _, secret = await project_key(store, "search", "svc")
    await store.set_limits("project", project.id, budget_micros=20_000, budget_period="day")
    async with sim_engine("m") as engine:
        config = config_for(engine.url, db, receiver.url, budgets={"notify_at": [0.5]})
        app = make_gateway_app(config, store=store)  # the real key resolver and accountant
        install_notifier(app, config)
        runner, base = await serve(app)
        try:
            async with openai.AsyncOpenAI(base_url=base, api_key=secret, max_retries=0) as client:
                for _ in range(4):  # 5,000 each: 25%, 50% (told), 75%, 100%
                    await client.chat.completions.create(model="m", messages=HELLO, max_tokens=5)
                [half] = await received(receiver, 1)
                for _ in range(3):  # spent: refused three times, told once
                    with pytest.raises(openai.RateLimitError) as refused:
                        await client.chat.completions.create(model="m", messages=HELLO, max_tokens=5)
                    assert refused.value.body["code"] == "budget_exceeded"
                events = await received(receiver, 2)
                await asyncio.sleep(0.1)  # nothing more comes
            assert len(receiver.received) == 2
            assert events_counted(app, "0.5") == 1 and events_counted(app, "refused") == 1
        finally:
            await runner.cleanup()

        assert (half["kind"], half["subject"]) == ("budget_spent", f"project:{project.id}")
        assert half["details"]["reason"] == "threshold" and half["details"]["threshold"] == 0.5
        assert half["details"]["spent_micros"] == 10_000 and "is 50% spent" in half["summary"]
        spent = events[1]
        assert spent["details"]["reason"] == "refused" and spent["details"]["threshold"] is None
        assert spent["details"]["budget_micros"] == 20_000 and "daily budget" in spent["summary"]

        # The same budget, the same day, a gateway started again: the refusal is not sent a second time.
        app = make_gateway_app(config, store=store)
        install_notifier(app, config)
        runner, base = await serve(app)
        try:
            async with openai.AsyncOpenAI(base_url=base, api_key=secret, max_retries=0) as client:
                with pytest.raises(openai.RateLimitError):
                    await client.chat.completions.create(model="m", messages=HELLO, max_tokens=5)
            await asyncio.sleep(0.1)
            assert len(receiver.received) == 2 and events_counted(app, "refused") == 0
        finally:
            await runner.cleanup()
    await store.close()


async def test_a_request_too_dear_for_what_is_left_is_a_refusal_told_without_sinks_as_a_metric(tmp_path):
    db = str(tmp_path / "llmgw.db")
    store = await open_store(db)
    project, _, secret = await project_key(store, "search", "svc")
    await store.set_limits("project", project.id, budget_micros=8_000, budget_period="month")
    async with sim_engine("m") as engine:
        config = parse_server_config({"store": {"dsn": db},
                                      "models": [{"name": "m", "endpoints": [{"url": engine.url + "/v1"}],
                                                  "price": {"output": 1000.0}}]})
        app = make_gateway_app(config, store=store)
        install_notifier(app, config)  # no sinks: counted all the same
        runner, base = await serve(app)
        try:
            async with openai.AsyncOpenAI(base_url=base, api_key=secret, max_retries=0) as client:
                await client.chat.completions.create(model="m", messages=HELLO, max_tokens=5)  # 5,000 of 8,000
                for _ in range(2):  # up to 5,000 more does not fit in the 3,000 left
                    with pytest.raises(openai.RateLimitError):
                        await client.chat.completions.create(model="m", messages=HELLO, max_tokens=5)
                await asyncio.sleep(0.1)
            assert events_counted(app, "refused") == 1
        finally:
            await runner.cleanup()
    await store.close()
