"""The assembled server: a real SQLite store, real keys, usage rows written, `llmgw server` itself."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import textwrap

import aiohttp
import openai
import pytest

from llmgw.auth.keys import KeyResolver, model_aliases
from llmgw.cli.main import main
from llmgw.config import parse_server_config
from llmgw.server import make_gateway_app, run_server
from llmgw.store import open_store

from .serving import project_key, serve, sim_engine

HELLO = [{"role": "user", "content": "Hello there."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def engine():
    async with sim_engine("m", "n", ttft=0.005) as running:
        yield running


def config_for(engine, db: str, **extra):
    return parse_server_config({
        "store": {"dsn": db},
        "listen": f"127.0.0.1:{free_port()}",
        "metrics_listen": f"127.0.0.1:{free_port()}",
        "accounting": {"flush_interval": "50ms"},
        "models": [
            {"name": "m", "endpoints": [{"url": engine.url + "/v1"}], "price": {"input": 1.0, "output": 2.0}},
            {"name": "n", "endpoints": [{"url": engine.url + "/v1"}]},
        ],
        **extra,
    })


async def test_without_keys_usage_rows_reach_the_store_by_shutdown(engine, tmp_path):
    db = str(tmp_path / "llmgw.db")
    config = config_for(engine, db, auth={"keys_required": False})
    runner, base = await serve(make_gateway_app(config))  # opens the store itself
    ids = []
    async with openai.AsyncOpenAI(base_url=base, api_key="none", max_retries=0) as client:
        for _ in range(5):
            raw = await client.chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=2)
            ids.append(raw.headers["x-request-id"])
    await runner.cleanup()  # writes what is buffered, closes the store
    store = await open_store(db)
    try:
        rows = [await store.get_usage(i) for i in ids]
        assert all(r is not None for r in rows)
        assert rows[0].model_served == "m" and rows[0].completion_tokens == 2
        assert rows[0].cost_micros > 0  # priced from server.yaml
    finally:
        await store.close()


async def test_real_keys_answer_revoked_keys_401_and_allowlists_403(engine, tmp_path):
    db = str(tmp_path / "llmgw.db")
    store = await open_store(db)
    project, key, secret = await project_key(store, "search", "svc", allowed_models=["m"])
    config = config_for(engine, db)
    resolver = KeyResolver(store, ttl=0.0, negative_ttl=0.0, aliases=model_aliases(config))
    runner, base = await serve(make_gateway_app(config, store=store, resolver=resolver))
    client = openai.AsyncOpenAI(base_url=base, api_key=secret, max_retries=0)
    try:
        reply = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=1)
        assert reply.choices
        stream = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=2, stream=True)
        assert [c async for c in stream]
        assert [m.id for m in (await client.models.list()).data] == ["m"]
        with pytest.raises(openai.PermissionDeniedError):
            await client.chat.completions.create(model="n", messages=HELLO, max_tokens=1)
        async with aiohttp.ClientSession() as http, http.get(
                base[:-3] + "/me", headers={"Authorization": f"Bearer {secret}"}) as resp:
            me = await resp.json()
        assert me["key"]["id"] == key.id and me["project_id"] == project.id and me["org_id"] == project.org_id
        await store.revoke_key(key.id)
        with pytest.raises(openai.AuthenticationError) as caught:
            await client.chat.completions.create(model="m", messages=HELLO, max_tokens=1)
        assert "revoked" in caught.value.body["message"]
    finally:
        await client.close()
        await runner.cleanup()
    rows = await store.list_usage(key_id=key.id)
    assert {r.status for r in rows} == {200, 403}
    assert all(r.project_id == project.id and r.org_id == project.org_id for r in rows)
    await store.close()


async def test_a_budget_for_ten_is_never_overspent_and_the_rest_falls_back(engine, tmp_path):
    db = str(tmp_path / "llmgw.db")
    store = await open_store(db)
    project, _, secret = await project_key(store, "search", "svc")
    await store.set_limits("project", project.id, budget_micros=50_000, budget_period="day")
    config = parse_server_config({
        "store": {"dsn": db},
        "models": [
            # 1000 micro-dollars a generated token: five tokens are a tenth of the budget.
            {"name": "m", "endpoints": [{"url": engine.url + "/v1"}], "fallbacks": ["n"],
             "price": {"input": 0.0, "output": 1000.0}},
            {"name": "n", "endpoints": [{"url": engine.url + "/v1"}]},  # free
        ],
    })
    runner, base = await serve(make_gateway_app(config, store=store))  # the real resolver and accountant
    served = []
    try:
        async with openai.AsyncOpenAI(base_url=base, api_key=secret, max_retries=0) as client:
            async def ask():
                raw = await client.chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=5)
                return raw.headers.get("x-llmgw-served-model", "m")

            served = await asyncio.gather(*(ask() for _ in range(20)))
            async with aiohttp.ClientSession() as http, http.get(
                    base[:-3] + "/me", headers={"Authorization": f"Bearer {secret}"}) as resp:
                me = await resp.json()
    finally:
        await runner.cleanup()
    assert served.count("m") == 10 and served.count("n") == 10
    project_spend = next(s for s in me["spend"] if s["scope"] == "project")
    assert project_spend["spent_micros"] == 50_000 and project_spend["budget_micros"] == 50_000
    assert await store.spend_since("project", project.id, dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)) == 50_000
    rows = await store.list_usage(project_id=project.id)
    assert len(rows) == 20 and {r.model_served for r in rows} == {"m", "n"}
    await store.close()


async def test_run_server_listens_and_stops_cleanly(engine, tmp_path):
    config = config_for(engine, str(tmp_path / "llmgw.db"), auth={"keys_required": False})
    stop = asyncio.Event()
    task = asyncio.create_task(run_server(config, stop=stop, drain_seconds=2))
    base = f"http://{config.listen}"
    async with aiohttp.ClientSession() as http:
        for _ in range(100):
            try:
                async with http.get(base + "/ready") as resp:
                    if resp.status == 200:
                        break
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.02)
        async with http.post(base + "/v1/chat/completions", json={"model": "n", "messages": HELLO,
                                                                 "max_tokens": 1}) as resp:
            assert resp.status == 200
        async with http.get(f"http://{config.metrics_listen}/metrics") as resp:
            assert 'llmgw_requests_total{model="n",outcome="ok"} 1.0' in await resp.text()
    stop.set()
    assert await asyncio.wait_for(task, 10) == 0


def test_a_bad_config_exits_2_with_the_reason(tmp_path, capsys):
    path = tmp_path / "server.yaml"
    path.write_text("router:\n  timeouts:\n    dial: five\n")
    assert main(["server", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "router.timeouts.dial" in err and str(path) in err
    assert main(["server", "--config", str(tmp_path / "missing.yaml")]) == 2


@pytest.mark.slow
def test_sigterm_under_load_loses_no_usage_row(tmp_path):
    """`llmgw server` in its own process, stopped with SIGTERM while streams run."""
    sim_port, port = free_port(), free_port()
    db = tmp_path / "llmgw.db"
    (tmp_path / "server.yaml").write_text(textwrap.dedent(f"""\
        listen: 127.0.0.1:{port}
        metrics_listen: ""
        store: {{dsn: {db}}}
        auth: {{keys_required: false}}
        models:
          - name: m
            endpoints: [{{url: "http://127.0.0.1:{sim_port}/v1"}}]
        """))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    sim = subprocess.Popen([sys.executable, "-m", "llmgw", "sim-engine", "--port", str(sim_port),
                            "--model", "m", "--tpot", "0.01"], stdout=subprocess.PIPE, env=env)
    assert b"listening on" in sim.stdout.readline()  # the engine is up before the gateway sends to it
    server = subprocess.Popen([sys.executable, "-m", "llmgw", "server", "--config", str(tmp_path / "server.yaml")],
                              env=env, stderr=subprocess.PIPE)
    try:
        async def load() -> list[str]:
            base = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as http:
                for _ in range(300):
                    try:
                        async with http.get(base + "/ready") as resp:
                            if resp.status == 200:
                                break
                    except aiohttp.ClientConnectionError:
                        pass
                    await asyncio.sleep(0.05)

                async def one() -> str:
                    body = {"model": "m", "messages": HELLO, "max_tokens": 100, "stream": True}
                    async with http.post(base + "/v1/chat/completions", json=body) as resp:
                        await resp.read()
                        return resp.headers["x-request-id"]

                tasks = [asyncio.create_task(one()) for _ in range(20)]
                await asyncio.sleep(0.3)
                server.send_signal(signal.SIGTERM)
                return await asyncio.gather(*tasks)

        ids = asyncio.run(load())
        assert server.wait(30) == 0, server.stderr.read().decode()[-2000:]
    finally:
        for p in (server, sim):
            if p.poll() is None:
                p.kill()
                p.wait()

    async def check():
        store = await open_store(str(db))
        try:
            return [await store.get_usage(i) for i in ids]
        finally:
            await store.close()

    rows = asyncio.run(check())
    assert all(r is not None for r in rows), "a request answered before SIGTERM has no usage row"
    assert all(r.outcome == "ok" and r.completion_tokens == 100 for r in rows)
