"""Real `llmgw server` processes sharing one real Redis (limits.store): two gateways on one store, and one server
with `workers: 2` on one port; clients through the official openai SDK."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import openai
import pytest

from llmgw.auth.tenancy import Tenancy
from llmgw.store import open_store

from .conftest import free_port

pytestmark = pytest.mark.slow
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def sim():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "llmgw", "sim-engine", "--port", str(port), "--model", "m",
                             "--tpot", "0.001"], stdout=subprocess.PIPE, env=ENV)
    assert b"listening on" in proc.stdout.readline()
    yield port
    proc.kill()
    proc.wait(10)


def write_config(tmp_path, name: str, port: int, sim_port: int, redis_url: str, *, metrics: str = '""',
                 on_store_down: str = "refuse", concurrency: int = 64, **extra) -> str:
    path = tmp_path / f"{name}.yaml"
    lines = "".join(f"{k}: {v}\n" for k, v in extra.items())
    path.write_text(textwrap.dedent(f"""\
        listen: 127.0.0.1:{port}
        metrics_listen: {metrics}
        admin_listen: 127.0.0.1:{free_port()}
        agent_listen: 127.0.0.1:{free_port()}
        store: {{dsn: {tmp_path / "llmgw.db"}}}
        control: {{enabled: false}}
        limits: {{store: "{redis_url}", on_store_down: {on_store_down}}}
        prices: {{default: {{input: 1, output: 1}}}}
        accounting: {{flush_interval: 200ms}}
        models:
          - name: m
            concurrency: {concurrency}
            endpoints: [{{url: "http://127.0.0.1:{sim_port}/v1"}}]
        """) + lines)
    return str(path)


async def make_key(tmp_path, **limits) -> str:
    store = await open_store(str(tmp_path / "llmgw.db"))
    try:
        t = Tenancy(store, actor="tester")
        await t.create("acme")
        await t.create("acme/app", project=True)
        issued = await t.create_key(project="acme/app")
        await t.set_limits(await t.scope("acme/app"), **limits)
        return issued.secret
    finally:
        await store.close()


def start(config: str) -> subprocess.Popen:
    """`llmgw server`, its log in LOG beside its configuration (a pipe nobody reads would fill and stop it)."""
    log = open(config + ".log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, "-m", "llmgw", "server", "--config", config], env=ENV,
                            stderr=log, stdout=log)


async def ready(port: int, secret: str, within: float = 60) -> None:
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=secret, max_retries=0)
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            try:
                await client.models.list()
                return
            except openai.APIConnectionError:
                await asyncio.sleep(0.1)
        raise AssertionError(f"no gateway on port {port} within {within} s")
    finally:
        await client.close()


async def ask(port: int, secret: str, n: int, max_tokens: int = 2) -> list:
    """n requests at once, each on a connection of its own; each answer or the error it raised."""

    async def one():
        async with openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=secret,
                                      max_retries=0) as client:
            try:
                return await client.chat.completions.create(model="m", messages=HELLO, max_tokens=max_tokens)
            except openai.APIStatusError as exc:
                return exc

    return await asyncio.gather(*(one() for _ in range(n)))


def stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(40)
        except subprocess.TimeoutExpired:
            p.kill()


def test_two_gateways_share_an_rpm_of_60_and_a_budget(tmp_path, redis_server, sim):
    secret = asyncio.run(make_key(tmp_path, rpm=60))
    ports = [free_port(), free_port()]
    procs = [start(write_config(tmp_path, f"g{i}", port, sim, redis_server.url)) for i, port in enumerate(ports)]
    try:
        for port in ports:
            asyncio.run(ready(port, secret))

        async def both():
            return [r for rs in await asyncio.gather(*(ask(port, secret, 50) for port in ports)) for r in rs]

        answers = asyncio.run(both())
        ok = [a for a in answers if not isinstance(a, Exception)]
        refused = [a for a in answers if isinstance(a, openai.RateLimitError)]
        assert len(ok) == 60 and len(refused) == 40, [type(a).__name__ for a in answers]
        assert all(float(r.response.headers["retry-after"]) >= 1 for r in refused)
        assert "limit of 60 requests a minute" in refused[0].message
        # Redis killed: refuse answers 503 in words; back, both gateways count in it again
        redis_server.kill()
        down = asyncio.run(ask(ports[0], secret, 3)) + asyncio.run(ask(ports[1], secret, 3))
        assert all(isinstance(a, openai.InternalServerError) and a.status_code == 503 for a in down), down
        assert "cannot count this request against its limits" in down[0].message
        redis_server.start()
        time.sleep(1.2)
        again = asyncio.run(both())
        assert sum(not isinstance(a, Exception) for a in again) == 60, [getattr(a, "message", "ok") for a in again][:8]
    finally:
        stop(*procs)


def test_two_workers_on_one_port_share_a_budget_and_a_killed_one_is_started_again(tmp_path, redis_server, sim):
    # every request's worst case: its prompt estimate (about 20 tokens) + 100 max tokens at 1 micro-dollar each;
    # the budget holds 5 of them, and each served one costs far less (a few tokens)
    secret = asyncio.run(make_key(tmp_path, budget_micros=600, budget_period="day", rpm=1000))
    port = free_port()
    config = write_config(tmp_path, "w", port, sim, redis_server.url, workers=2)
    server = start(config)
    try:
        asyncio.run(ready(port, secret))
        listening(config, 2)
        children = _children(server.pid)
        assert len(children) == 1, children
        import urllib.error
        import urllib.request

        statuses = set()
        for _ in range(20):  # each on a connection of its own, so both workers answer some: none says 404
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/leader", timeout=10)
            except urllib.error.HTTPError as exc:
                statuses.add((exc.code, exc.read()))
        assert len(statuses) == 1 and next(iter(statuses))[0] == 503, statuses  # worker 0's answer, from either
        assert b"control" in next(iter(statuses))[1]
        answers = asyncio.run(ask(port, secret, 50, max_tokens=100))
        ok = [a for a in answers if not isinstance(a, Exception)]
        refused = [a for a in answers if isinstance(a, openai.RateLimitError)]
        assert 1 <= len(ok) <= 5 and len(ok) + len(refused) == 50, [type(a).__name__ for a in answers]
        assert "budget" in refused[0].message
        os.kill(children[0], signal.SIGKILL)
        listening(config, 3, within=30)  # worker 0, the first worker 1, and the one started again
        restarted = _children(server.pid)
        assert len(restarted) == 1 and restarted != children, "the killed worker was not started again"
        time.sleep(2.0)
        answers = asyncio.run(ask(port, secret, 20, max_tokens=1))
        assert not [a for a in answers if isinstance(a, openai.APIConnectionError)]
    finally:
        stop(server)
    assert server.returncode == 0
    log = open(config + ".log").read()
    assert "worker exited; starting it again" in log and log.count("worker started") == 2
    assert 0 < asyncio.run(_spent_today(tmp_path)) <= 600  # what the store settled: within the budget


async def _spent_today(tmp_path) -> int:
    import datetime as dt

    store = await open_store(str(tmp_path / "llmgw.db"))
    try:
        project = await Tenancy(store, actor="tester").scope("project:acme/app")
        today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        return await store.spend_since("project", project.id, today)
    finally:
        await store.close()


def _taken(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return False
        except OSError:
            return True


def _requests_ok(port: int) -> float:
    import re
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(v) for v in re.findall(r'^llmgw_requests_total\{[^}]*model="m"[^}]*outcome="ok"[^}]*\} (\S+)$',
                                            text, re.M))


def listening(config: str, count: int, within: float = 60) -> None:
    """Wait until `count` processes of the server logged that they listen."""
    deadline = time.monotonic() + within
    while open(config + ".log").read().count("client API listening") < count:
        assert time.monotonic() < deadline, f"fewer than {count} workers listening within {within} s"
        time.sleep(0.2)


def _children(pid: int) -> list[int]:
    """The workers worker 0 started (not whatever short-lived command it may be running)."""
    out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return sorted(int(line.split()[0]) for line in out.splitlines() if "llmgw server" in line)


def test_redis_killed_local_keeps_serving_and_the_metrics_say_so(tmp_path, redis_server, sim):
    import urllib.request

    secret = asyncio.run(make_key(tmp_path, rpm=1000))
    port, metrics = free_port(), free_port()
    config = write_config(tmp_path, "local", port, sim, redis_server.url, metrics=f"127.0.0.1:{metrics}",
                          on_store_down="local")
    server = start(config)

    def scrape() -> dict[str, float]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read().decode()
        return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                if line.startswith(("llmgw_limits_store_up ", "llmgw_limits_local_total "))}

    try:
        asyncio.run(ready(port, secret))
        assert not [a for a in asyncio.run(ask(port, secret, 5)) if isinstance(a, Exception)]
        assert scrape() == {"llmgw_limits_store_up": 1.0, "llmgw_limits_local_total": 0.0}
        redis_server.kill()
        answers = asyncio.run(ask(port, secret, 10))
        assert not [a for a in answers if isinstance(a, Exception)], answers
        seen = scrape()
        assert seen["llmgw_limits_store_up"] == 0 and seen["llmgw_limits_local_total"] == 10
        redis_server.start()
        time.sleep(1.2)
        assert not [a for a in asyncio.run(ask(port, secret, 5)) if isinstance(a, Exception)]
        assert scrape()["llmgw_limits_store_up"] == 1
    finally:
        stop(server)
    log = open(config + ".log").read()
    assert log.count("limits store down") == 1 and "limits store back" in log


def test_two_workers_together_send_a_replica_no_more_than_its_concurrency(tmp_path, redis_server):
    import re
    import urllib.request

    sim_port = free_port()
    sim = subprocess.Popen([sys.executable, "-m", "llmgw", "sim-engine", "--port", str(sim_port), "--model", "m",
                            "--tpot", "0.02"], stdout=subprocess.PIPE, env=ENV)
    assert b"listening on" in sim.stdout.readline()
    secret = asyncio.run(make_key(tmp_path, rpm=10_000))
    port = free_port()
    metrics = free_port()
    while _taken(metrics + 1):
        metrics = free_port()
    config = write_config(tmp_path, "c", port, sim_port, redis_server.url, concurrency=4, workers=2,
                          metrics=f"127.0.0.1:{metrics}")
    server = start(config)
    seen: list[float] = []

    async def load_and_watch():
        async def watch():
            while True:
                text = await asyncio.to_thread(
                    lambda: urllib.request.urlopen(f"http://127.0.0.1:{sim_port}/metrics", timeout=5).read().decode())
                seen.append(sum(float(v) for v in re.findall(
                    r"^vllm:num_requests_(?:running|waiting)(?:\{[^}]*\})? (\S+)$", text, re.M)))
                await asyncio.sleep(0.05)

        watcher = asyncio.ensure_future(watch())
        try:
            return await ask(port, secret, 40, max_tokens=30)
        finally:
            watcher.cancel()

    try:
        asyncio.run(ready(port, secret))
        listening(config, 2)
        answers = asyncio.run(load_and_watch())
        assert not [a for a in answers if isinstance(a, Exception)], answers
        assert seen and max(seen) <= 4, max(seen)
        assert max(seen) >= 3  # both workers sent to it (each may send 2)
        # each worker's own metrics, worker I on metrics_listen's port + I: together, every request
        served = [_requests_ok(metrics + i) for i in (0, 1)]
        assert sum(served) == 40 and min(served) > 0, served
        children = _children(server.pid)
        assert len(children) == 1
        server.kill()  # worker 0 killed: the other sees its pipe end and stops on its own
        server.wait(10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and os.path.exists(f"/proc/{children[0]}"):
            time.sleep(0.2)
        assert not os.path.exists(f"/proc/{children[0]}"), "a worker outlived worker 0"
    finally:
        stop(server)
        sim.kill()
        sim.wait(10)
