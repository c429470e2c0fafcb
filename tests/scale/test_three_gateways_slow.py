"""Three gateways as an operator scales out: two `llmgw server` control planes on one PostgreSQL, one of them (the
leader, or the standby) with `workers: 2`, both counting limits in one Redis (`limits.store`), one `llmgw agent`
running a sim engine; clients through the official openai SDK (async), round-robin over the three, each request on
a connection of its own (so the kernel spreads the two-worker server's share over both of its workers, as it does a
load balancer's).

A project's budget for N requests holds against 10×N at once across all three; an RPM of 60 lets exactly 60 of
100 through across all three; what a user sees is asserted (200s and 429s, the usage rows in the store, the
spend the admin API reports), and that each of the three served some."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import openai
import pytest

from llmgw.auth.tenancy import NotFound, Tenancy
from llmgw.store import open_store
from llmgw.store.state_dir import STATE_DIR_ENV
from llmgw.up.procs import descendants

from control.test_failover_slow import free_port, get, wait_until
from tests.processes import end_processes

pytestmark = pytest.mark.slow

N = 6  # the budget pays for N requests
MAX_TOKENS = 10  # each answer: the sim engine runs to max_tokens, and only output is priced, 1 micro-dollar a token
COST = MAX_TOKENS  # so a request costs exactly what its hold was: the budget admits exactly N
HELLO = [{"role": "user", "content": "hello"}]


def _metrics_pair() -> int:
    """A free port whose next one is free too: worker I's metrics are on metrics_listen's port + I."""
    import socket

    while True:
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue


def write_server(path: Path, dsn: str, redis_url: str, *, workers: int = 1) -> dict[str, int]:
    ports = {k: free_port() for k in ("client", "admin", "agent")} | {"metrics": _metrics_pair()}
    path.write_text(json.dumps({  # JSON is YAML
        "listen": f"127.0.0.1:{ports['client']}",
        "admin_listen": f"127.0.0.1:{ports['admin']}",
        "admin_token_file": str(path.parent / "admin-token"),  # one token for both, as one cluster
        "metrics_listen": f"127.0.0.1:{ports['metrics']}",
        "agent_listen": f"127.0.0.1:{ports['agent']}",
        "agent_insecure": True,
        "store": {"dsn": dsn},
        "auth": {"keys_required": True},
        "control": {"reconcile_interval": "1s", "lease_ttl": "3s"},
        "limits": {"store": redis_url, "on_store_down": "refuse"},
        "prices": {"default": {"input": 0, "output": 1}},
        "accounting": {"flush_interval": "200ms"},
        "workers": workers,
        "models": [{"name": "m", "engine": "sim", "profiles": [{"name": "cpu"}], "scaling": {"min": 1, "max": 1},
                    "concurrency": 128}],
    }))
    return ports


async def make_project(dsn: str, name: str, **limits) -> tuple[str, str]:
    """A project under org acme with those limits, and a key of it: (the project's path, the key's secret)."""
    store = await open_store(dsn)
    try:
        t = Tenancy(store, actor="tester")
        try:
            await t.find("acme")
        except NotFound:  # the first project's
            await t.create("acme")
        await t.create(f"acme/{name}", project=True)
        issued = await t.create_key(project=f"acme/{name}")
        await t.set_limits(await t.scope(f"acme/{name}"), **limits)
        return f"acme/{name}", issued.secret
    finally:
        await store.close()


async def round_robin(urls: list[str], secret: str, n: int) -> list:
    """n requests at once, request i to urls[i % len(urls)], each on a client (a connection) of its own, opened
    (GET /health) before any is sent, so they all arrive within the same moment rather than over the seconds
    opening 100 connections takes on a busy machine (an RPM's bucket refills one request a second): each
    answer's raw response, or the error the SDK raised."""
    https = [openai.DefaultAsyncHttpxClient(timeout=60) for _ in range(n)]
    try:
        await asyncio.gather(*(http.get(urls[i % len(urls)] + "/health") for i, http in enumerate(https)))
        clients = [openai.AsyncOpenAI(base_url=urls[i % len(urls)] + "/v1", api_key=secret, max_retries=0,
                                      http_client=http) for i, http in enumerate(https)]

        async def one(client: openai.AsyncOpenAI):
            try:
                return await client.chat.completions.with_raw_response.create(
                    model="m", messages=HELLO, max_tokens=MAX_TOKENS)
            except openai.APIStatusError as exc:
                return exc

        return await asyncio.gather(*(one(c) for c in clients))
    finally:
        await asyncio.gather(*(http.aclose() for http in https))


def requests_seen(metrics_port: int) -> float:
    """The requests for model m one process counted (llmgw_requests_total, every outcome)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(v) for v in re.findall(r'^llmgw_requests_total\{[^}]*model="m"[^}]*\} (\S+)$', text, re.M))


def usage_of(ports: dict[str, int], token: str, project: str | None) -> dict:
    """GET /api/v1/usage by project, all time: the row of `project` (requests, cost …)."""
    request = urllib.request.Request(f"http://127.0.0.1:{ports['admin']}/api/v1/usage?by=project&period=total",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        report = json.load(resp)
    if project is None:
        return report
    rows = [r for r in report["rows"] if r["label"] == project]
    return rows[0] if rows else {}


async def usage_rows(dsn: str, ids: list[str]) -> int:
    store = await open_store(dsn)
    try:
        return sum([await store.get_usage(i) is not None for i in ids])
    finally:
        await store.close()


@pytest.mark.parametrize("two_workers", ["leader", "standby"])
def test_three_gateways_share_one_budget_and_one_rpm(tmp_path, postgres_server, redis_server, two_workers):
    dsn = postgres_server.dsn(postgres_server.create_database())
    workers = {"a": 2 if two_workers == "leader" else 1, "b": 2 if two_workers == "standby" else 1}
    a_ports = write_server(tmp_path / "a.yaml", dsn, redis_server.url, workers=workers["a"])
    b_ports = write_server(tmp_path / "b.yaml", dsn, redis_server.url, workers=workers["b"])
    (tmp_path / "agent.yaml").write_text(json.dumps({
        "node_id": "node-1", "insecure": True, "engine_host": "127.0.0.1", "engine_user": "",
        "control_planes": [f"127.0.0.1:{a_ports['agent']}", f"127.0.0.1:{b_ports['agent']}"],
        "state_dir": str(tmp_path / "agent"), "weights_dir": str(tmp_path / "agent" / "w"),
        "engines_dir": str(tmp_path / "agent" / "e"),
    }))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    def start(*args: str, log: str) -> subprocess.Popen:
        state = tmp_path / f"{log}.state"  # each control plane its own usage journal (LLMGW_STATE_DIR)
        state.mkdir()
        return subprocess.Popen([sys.executable, "-m", "llmgw", *args], env={**env, STATE_DIR_ENV: str(state)},
                                stdout=open(tmp_path / log, "wb"), stderr=subprocess.STDOUT)

    def logs() -> str:
        return "\n".join(f"--- {n}\n" + (tmp_path / n).read_text(errors="replace")[-3000:]
                         for n in ("a.log", "b.log", "agent.log") if (tmp_path / n).exists())

    a_url, b_url = f"http://127.0.0.1:{a_ports['client']}", f"http://127.0.0.1:{b_ports['client']}"
    many = "a" if two_workers == "leader" else "b"  # the control plane with two workers (on one port)
    many_url = a_url if many == "a" else b_url
    gateways = [a_url, b_url, many_url]  # three gateways: one control plane's two workers, and the other
    processes = [(f"{name.upper()} worker {i}", ports["metrics"] + i)
                 for name, ports in (("a", a_ports), ("b", b_ports)) for i in range(workers[name])]

    def plane(i: int) -> str:  # which control plane request i of a round-robin went to
        return "A" if gateways[i % 3] == a_url else "B"
    procs: list[subprocess.Popen] = []
    engines: list[int] = []
    try:
        a = start("server", "--config", str(tmp_path / "a.yaml"), log="a.log")
        procs.append(a)
        wait_until(lambda: get(f"{a_url}/leader")[0] == 200, 60, "A leading")
        b = start("server", "--config", str(tmp_path / "b.yaml"), log="b.log")
        procs.append(b)
        wait_until(lambda: get(f"{b_url}/leader")[0] == 503, 60, "B up as a standby")
        wait_until(lambda: (tmp_path / f"{many}.log").read_text().count("client API listening") >= 2, 60,
                   "both workers listening")
        budget_project, budget_key = asyncio.run(make_project(dsn, "budgeted", budget_micros=N * COST,
                                                              budget_period="day", rpm=100_000))
        rpm_project, rpm_key = asyncio.run(make_project(dsn, "paced", rpm=60))
        agent = start("agent", "--config", str(tmp_path / "agent.yaml"), log="agent.log")
        procs.append(agent)

        def all_answer() -> bool:  # through each gateway, with a key of a third project nothing limits
            answers = asyncio.run(round_robin([a_url, b_url], warm_key, 2))
            return all(not isinstance(r, Exception) for r in answers)

        _, warm_key = asyncio.run(make_project(dsn, "warm"))
        try:
            wait_until(all_answer, 120, "an answer through each control plane")
            wait_until(lambda: all(not isinstance(r, Exception)
                                   for r in asyncio.run(round_robin([many_url] * 8, warm_key, 8))),
                       30, "every worker answering")
        except AssertionError:
            raise AssertionError(logs()) from None
        before = [requests_seen(port) for _, port in processes]

        # The budget for N requests, 10×N at once across the three: exactly N answered, the rest refused.
        answers = asyncio.run(round_robin(gateways, budget_key, 10 * N))
        ok = [r for r in answers if not isinstance(r, Exception)]
        refused = [r for r in answers if isinstance(r, openai.RateLimitError)]
        assert len(ok) == N and len(refused) == 9 * N, ([getattr(r, "message", "ok") for r in answers][:10], logs())
        assert all("budget" in r.message for r in refused), {r.message for r in refused}
        assert all(r.parse().usage.completion_tokens == MAX_TOKENS for r in ok)
        refused_by = {plane(i) for i, r in enumerate(answers) if isinstance(r, openai.RateLimitError)}
        assert refused_by == {"A", "B"}  # both control planes refuse on the one budget
        served_by = {plane(i) for i, r in enumerate(answers) if not isinstance(r, Exception)}
        print(f"\ntwo workers on the {two_workers}: budget for {N}: {len(ok)} answered (through "
              f"{' and '.join(sorted(served_by))}), {len(refused)} refused with 429")
        # The usage rows of every answered request are in the store; the admin API's spend is within the budget.
        ids = [r.headers["x-llmgw-request-id"] for r in ok]
        wait_until(lambda: asyncio.run(usage_rows(dsn, ids)) == N, 20, "every answered request's usage row")
        token = (tmp_path / "admin-token").read_text().strip()
        try:
            wait_until(lambda: usage_of(a_ports, token, budget_project).get("requests") == 10 * N, 20,
                       "the admin API counting every request, refused ones as errors")
        except AssertionError:
            raise AssertionError(usage_of(a_ports, token, None)) from None
        row = usage_of(b_ports, token, budget_project)  # either control plane says the same
        print(f"the admin API's usage of {budget_project}: {row}")
        assert row["requests"] == 10 * N and row["errors"] == 9 * N and row["completion_tokens"] == N * MAX_TOKENS
        assert row["cost_micros"] == N * COST  # the whole budget, not a micro-dollar more

        # An RPM of 60, 100 at once across the three: exactly 60 answered.
        answers = asyncio.run(round_robin(gateways, rpm_key, 100))
        ok = [r for r in answers if not isinstance(r, Exception)]
        refused = [r for r in answers if isinstance(r, openai.RateLimitError)]
        assert len(ok) == 60 and len(refused) == 40, ([getattr(r, "message", "ok") for r in answers][:10], logs())
        assert "limit of 60 requests a minute" in refused[0].message
        through = {name: sum(1 for i, r in enumerate(answers) if plane(i) == name and r in ok) for name in ("A", "B")}
        print(f"RPM of 60: answered through A {through['A']}, through B {through['B']}")
        assert through["A"] > 0 and through["B"] > 0  # the 60 counted across both control planes
        assert all(float(r.response.headers["retry-after"]) >= 1 for r in refused)
        ids = [r.headers["x-llmgw-request-id"] for r in ok]
        wait_until(lambda: asyncio.run(usage_rows(dsn, ids)) == 60, 20, "the 60 usage rows")

        # Each of the three gateways (both workers of one control plane, and the other) took some of the 160.
        took = [int(requests_seen(port) - seen) for (_, port), seen in zip(processes, before)]
        print("requests taken: " + ", ".join(f"{name} {n}" for (name, _), n in zip(processes, took)))
        assert sum(took) == 10 * N + 100 and min(took) > 0, took
        # each control plane kept its own state folder (its instance id), not this machine's /var/lib/llmgw
        assert (tmp_path / "a.log.state" / "control-plane.id").exists()
        assert (tmp_path / "b.log.state" / "control-plane.id").exists()
        engines = descendants(agent.pid)
    finally:
        end_processes(procs, engines, wait=30)
