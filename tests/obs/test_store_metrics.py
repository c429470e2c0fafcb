"""The store's series on the server's /metrics, on SQLite and PostgreSQL: transaction times by kind,
failures (a refusal of the input is not one), the PostgreSQL pool and the primary's view of its members."""

from __future__ import annotations

import pytest
from aiohttp import ClientSession, web

from llmgw.config import parse_server_config
from llmgw.server import make_gateway_app, make_metrics_app
from llmgw.server.app import METRICS
from llmgw.store import open_store
from llmgw.store.errors import Conflict, StoreError

from scrape import promtool_problems, undeclared, value


@pytest.fixture(params=["sqlite", "postgres"])
def dsn(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "llmgw.db")
    server = request.getfixturevalue("postgres_server")
    return server.dsn(server.create_database())


async def test_the_stores_transactions_pool_and_members_are_published(dsn, tmp_path):
    store = await open_store(dsn)
    config = parse_server_config({"store": {"dsn": dsn}, "auth": {"keys_required": False}, "models": []})
    app = make_gateway_app(config, store=store)
    runners = []
    try:
        for made in (app, make_metrics_app(app[METRICS])):
            runner = web.AppRunner(made, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            runners.append(runner)
        metrics_url = f"http://127.0.0.1:{runners[1].addresses[0][1]}/metrics"
        await store.create_org("acme")
        with pytest.raises(Conflict):
            await store.create_org("acme")  # refused: the caller's mistake, not the store's
        assert await store.get_org_by_name("acme") is not None
        async with ClientSession() as http, http.get(metrics_url) as resp:
            text = await resp.text()
        backend = store.dialect
        assert value(text, "llmgw_store_query_duration_seconds_count", backend=backend, kind="write") >= 2
        assert value(text, "llmgw_store_query_duration_seconds_count", backend=backend, kind="read") >= 1
        assert value(text, "llmgw_store_query_errors_total", backend=backend, kind="write") == 0
        if backend == "postgres":
            assert value(text, "llmgw_store_pool_connections", state="max") >= 1
            in_use, idle = (value(text, "llmgw_store_pool_connections", state=s) for s in ("in_use", "idle"))
            assert 1 <= in_use + idle <= value(text, "llmgw_store_pool_connections", state="max")
            # The test's server is a primary without standbys.
            assert value(text, "llmgw_store_member", role="leader", state="running") == 1
            assert value(text, "llmgw_store_replica_lag_bytes") is None
        else:
            assert value(text, "llmgw_store_pool_connections", state="max") is None
            assert value(text, "llmgw_store_member", role="leader") is None
        assert promtool_problems(text) == []
        assert undeclared(text, "server") == []
        await store.close()
        with pytest.raises(StoreError):
            await store.create_org("later")
        async with ClientSession() as http, http.get(metrics_url) as resp:
            text = await resp.text()
        assert value(text, "llmgw_store_query_errors_total", backend=backend, kind="write") == 1
    finally:
        for runner in reversed(runners):
            await runner.cleanup()
        await store.close()
