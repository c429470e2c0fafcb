"""`llmgw bench gateway --gateways N --workers W`: llmgw scaled out, beside one process, under the same load.

The setups measured side by side, each against the same sim engine:

- ``llmgw``: one process, limits counted in its memory, its own SQLite store (as `llmgw bench gateway`);
- ``llmgw-Ng``: N control planes on one PostgreSQL store (one leads, the others serve as standbys), their
  limits counted in one Redis, the load spread over them (when N > 1);
- ``llmgw-NgWw``: the same N, each with W worker processes on its port (when W > 1).

Every gateway of the scaled setups is a control plane (`control.enabled`), all of them in one cluster on one
store, as an operator runs them behind a load balancer (docs/scaling.md); the model is served by the sim
engine as a static endpoint, so no agent is needed and every gateway routes to it alike. The load generator
spreads the load evenly over the gateways (a share of the connections each, or round-robin requests), as a
load balancer would; a gateway's workers share its port, and the kernel spreads connections over them.

What each setup cost is read from /proc for every process of it (workers included): requests/s, latency,
CPU milliseconds a request, memory; and ratios to the one process.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import attrs
from ruamel.yaml import YAML

from llmgw.bench import client, gateway, procs, wrk
from llmgw.bench.gateway import MODEL, BenchError, GatewayBench
from llmgw.bench.postgres import start_postgres
from llmgw.bench.stats import Outcome, machine, ratio
from llmgw.bench.workloads import chat_body, words
from llmgw.store.state_dir import STATE_DIR_ENV


@attrs.define
class _Spread(gateway._Target):
    """A scaled setup: its gateways (each a process and its workers) and the URL of each."""

    urls: list[str] = attrs.Factory(list)
    gateways: list[procs.Child] = attrs.Factory(list)
    count: int = 1
    workers: int = 1

    def cpu_seconds(self) -> float:
        return sum(child.cpu_seconds() for child in self.gateways)

    def rss_mb(self) -> float | None:
        values = [child.rss_mb() for child in self.gateways]
        return None if None in values else round(sum(values), 1)


def setups(gateways: int, workers: int) -> list[tuple[int, int]]:
    """The scaled setups (gateways, workers each) measured beside one process."""
    if gateways < 1 or workers < 1:
        raise BenchError("--gateways and --workers must be at least 1")
    if gateways == 1 and workers == 1:
        raise BenchError("--gateways 1 --workers 1 is the one process itself: give more gateways or workers")
    out = []
    if gateways > 1:
        out.append((gateways, 1))
    if workers > 1:
        out.append((gateways, workers))
    return out


def setup_name(gateways: int, workers: int) -> str:
    return f"llmgw-{gateways}g" + (f"{workers}w" if workers > 1 else "")


def split(total: int | None, parts: int) -> list[int | None]:
    """`total` in `parts` nearly equal shares (None: each part unbounded)."""
    if total is None:
        return [None] * parts
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def concurrent(outcomes: list[Outcome]) -> Outcome:
    """Outcomes of loads that ran at the same time, as one: counts and latencies summed, the wall time the
    longest of them (Outcome.merge adds the times of loads that ran one after another)."""
    out = Outcome()
    for part in outcomes:
        elapsed = max(out.elapsed, part.elapsed)
        out.merge(part)
        out.elapsed = elapsed
    return out


async def run(bench: GatewayBench, gateways: int, *, store: str | None = None,
              say: Callable[[str], None] = lambda _: None) -> dict:
    """Run the benchmark: the engine, one process and each scaled setup; the report as a JSON-ready dict."""
    scaled = setups(gateways, bench.workers)
    store_given = store is not None
    generator, notes = gateway.choose_generator(bench)
    host = machine()
    body = chat_body(MODEL, [{"role": "user", "content": words(random.Random(1), bench.prompt_tokens)}],
                     max_tokens=bench.answer_tokens, stream=bench.stream)
    children: list[procs.Child] = []
    targets: list[gateway._Target] = []
    key_id = None
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-") as tmp, procs.quiet_llmgw_logs():
        workdir = Path(tmp)
        try:
            say(f"starting the sim engine (ttft {bench.ttft} s, tpot {bench.tpot} s)")
            engine = await procs.start_sim_engine(workdir, model=MODEL, ttft=bench.ttft, tpot=bench.tpot)
            children.append(engine)
            say("starting llmgw server: one process, limits in memory")
            one, secret = await procs.start_gateway(workdir / "one", engine_url=engine.url, model=MODEL,
                                                    keys=bench.keys, concurrency=bench.concurrency)
            children.append(one)
            targets += [gateway._Target("direct", engine.url, {}, None),
                        gateway._Target("llmgw", one.url, gateway._bearer(secret), one)]
            if store is None:
                say("starting a throw-away PostgreSQL for the control planes' store")
                postgres, store = await start_postgres(workdir)
                children.append(postgres)
            say("starting redis-server: the limits every gateway and worker counts in")
            redis, redis_url = await procs.start_redis(workdir)
            children.append(redis)
            shared_secret, key_id = await bench_key(store) if bench.keys else (None, None)
            for count, workers in scaled:
                name = setup_name(count, workers)
                say(f"starting {name}: {count} control planes with {workers} worker(s) each")
                target = _Spread(name, "", gateway._bearer(shared_secret), None, count=count, workers=workers)
                for index in range(count):
                    child = await start_control_plane(
                        workdir / name / str(index), dsn=store, redis_url=redis_url, engine_url=engine.url,
                        keys=bench.keys, concurrency=bench.concurrency, workers=workers)
                    children.append(child)
                    target.gateways.append(child)
                    target.urls.append(child.url)
                target.child = target.gateways[0]
                target.url = target.urls[0]
                targets.append(target)
            for target in targets:
                await _warm_up(bench, target, body)
                target.rss_before = _rss(target)
            for r in range(bench.rounds):
                order = targets[r % len(targets):] + targets[:r % len(targets)]
                for target in order:
                    count, seconds = bench.share(r)
                    say(f"round {r + 1}/{bench.rounds}: {target.name}")
                    if isinstance(target, _Spread):
                        await _measure_spread(bench, generator, target, body, engine, count, seconds)
                    else:
                        await gateway._measure(bench, generator, target, body, engine, count, seconds)
            for target in targets:
                target.rss_after = _rss(target)
        finally:
            for child in reversed(children):
                await child.stop()
    if store_given and key_id is not None:
        await revoke(store, key_id)
    return report(bench, gateways, generator, notes, targets, host, store_given=store_given)


def _rss(target: gateway._Target) -> float | None:
    if isinstance(target, _Spread):
        return target.rss_mb()
    return target.child.rss_mb() if target.child is not None else None


# ---------------------------------------------------------------- the scaled gateways

#: The project the benchmark's key is in, made in the store when it is not there (a given store keeps it).
BENCH_PROJECT = "bench/load"


async def bench_key(dsn: str) -> tuple[str, str]:
    """A key of project bench/load (made when missing) whose limits and budget never refuse, so the key
    look-up, the limit checks and the budget hold all run on every request: (its secret, its id). A new key
    each run, so a store given with --store can be used again."""
    from llmgw.auth.tenancy import NotFound, Tenancy
    from llmgw.store import open_store

    store = await open_store(dsn)
    try:
        tenancy = Tenancy(store, actor="llmgw bench")
        for path, project in (("bench", False), (BENCH_PROJECT, True)):
            try:
                await tenancy.find(path)
            except NotFound:
                await tenancy.create(path, project=project)
        issued = await tenancy.create_key(project=BENCH_PROJECT, name=f"bench-{int(time.time())}", models=[MODEL])
        await tenancy.set_limits(await tenancy.scope(f"project:{BENCH_PROJECT}"), rpm=10**9, tpm=10**12,
                                 budget_micros=10**15, budget_period="month")
        return issued.secret, issued.key.id
    finally:
        await store.close()


async def revoke(dsn: str, key_id: str) -> None:
    """The run's key revoked: a store given with --store keeps no usable key of the benchmark's."""
    from llmgw.auth.tenancy import Tenancy
    from llmgw.store import open_store

    store = await open_store(dsn)
    try:
        await Tenancy(store, actor="llmgw bench").revoke_key(key_id)
    finally:
        await store.close()



def control_plane_yaml(*, listen: str, workdir: Path, dsn: str, redis_url: str, engine_url: str, keys: bool,
                       concurrency: int, workers: int) -> dict:
    """server.yaml of one gateway of a scaled setup: a control plane on the shared store, its limits in the
    shared Redis, W workers; the sim engine as a static endpoint."""
    config = procs.server_yaml(listen=listen, db=workdir / "unused.db", engine_url=engine_url, model=MODEL,
                               keys=keys, concurrency=concurrency)
    config.update({
        "store": {"dsn": dsn},
        # one cluster: one admin token and one key-hash secret beside it, as every control plane on a store needs
        "admin_token_file": str(workdir.parent.parent / "cluster" / "admin-token"),
        "control": {"enabled": True},
        "agent_listen": f"127.0.0.1:{procs.free_port()}",
        "agent_insecure": True,
        "limits": {"store": redis_url},
        "workers": workers,
    })
    return config


async def start_control_plane(workdir: Path, *, dsn: str, redis_url: str, engine_url: str, keys: bool,
                              concurrency: int, workers: int) -> procs.Child:
    """One `llmgw server` of a scaled setup, every worker of it listening before this returns."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir.parent.parent / "cluster").mkdir(exist_ok=True)
    for attempt in range(3):  # another process may take the free port first
        port = procs.free_port()
        config = workdir / "server.yaml"
        with open(config, "w") as f:
            YAML(typ="safe", pure=True).dump(control_plane_yaml(
                listen=f"127.0.0.1:{port}", workdir=workdir, dsn=dsn, redis_url=redis_url, engine_url=engine_url,
                keys=keys, concurrency=concurrency, workers=workers), f)
        argv = [*procs.self_command(), "--log-level", "info", "server", "--config", str(config)]
        state = workdir / "state"  # its own usage journal and instance id, not this machine's /var/lib/llmgw
        state.mkdir(exist_ok=True)
        child = await procs._spawn("llmgw-server", argv, workdir, f"http://127.0.0.1:{port}",
                                   env={STATE_DIR_ENV: str(state)})
        try:
            await procs.wait_ready(child, "/ready", timeout=60)
            deadline = time.monotonic() + 60
            while child.log.read_text(errors="replace").count("client API listening") < workers:
                if time.monotonic() > deadline:
                    raise procs.StartFailed(f"not every one of {workers} workers listened within 60 s:\n"
                                            f"{child.log_tail()}")
                await asyncio.sleep(0.2)
            return child
        except procs.StartFailed:
            await child.stop()
            if attempt == 2 or "cannot listen" not in child.log_tail():
                raise
    raise AssertionError("unreachable")


# ---------------------------------------------------------------- load spread over the gateways


def _calls(target: _Spread, body: bytes, stream: bool, count: int | None) -> Callable[[], client.Call | None]:
    """Round-robin over the setup's gateways, `count` calls in all (None: for ever)."""
    rotation = itertools.cycle([gateway._call(attrs.evolve(target, url=url), body, stream) for url in target.urls])
    left = [count]

    def next_call() -> client.Call | None:
        if left[0] is not None:
            if left[0] <= 0:
                return None
            left[0] -= 1
        return next(rotation)

    return next_call


async def _warm_up(bench: GatewayBench, target: gateway._Target, body: bytes) -> None:
    if not isinstance(target, _Spread):
        await gateway._warm_up(bench, target, body)
        return
    if not bench.warmup:
        return
    workers = min(bench.concurrency, 16)
    async with client.session_for(workers) as http:
        out = await client.closed_loop(http, _calls(target, body, bench.stream, bench.warmup), workers)
    if out.ok == 0:
        raise BenchError(f"{target.name}: no request succeeded in the warm-up ({dict(out.error_kinds)})")


async def _measure_spread(bench: GatewayBench, generator: str, target: _Spread, body: bytes, engine: procs.Child,
                          count: int | None, seconds: float | None) -> None:
    cpu0, engine0 = target.cpu_seconds(), engine.cpu_seconds()
    if generator == "wrk":  # a wrk per gateway at once, each with its share of the connections and requests
        connections = split(bench.concurrency, len(target.urls))
        requests = split(count, len(target.urls))
        runs = [wrk.run(url + "/v1/chat/completions", body, target.headers, connections=max(1, c), requests=n,
                        duration=seconds) for url, c, n in zip(target.urls, connections, requests)]
        out = concurrent(list(await asyncio.gather(*runs)))
    else:
        connections = 0 if bench.rate is not None else bench.concurrency
        calls = _calls(target, body, bench.stream, count)
        async with client.session_for(connections) as http:
            if bench.rate is not None:
                out = await client.open_loop(http, calls, bench.rate, duration=seconds)
            else:
                out = await client.closed_loop(http, calls, bench.concurrency, duration=seconds)
    target.cpu_s += target.cpu_seconds() - cpu0
    target.engine_cpu_s += engine.cpu_seconds() - engine0
    target.outcome.merge(out)


# ---------------------------------------------------------------- the report


def report(bench: GatewayBench, gateways: int, generator: str, notes: list[str], targets: list[gateway._Target],
           host: dict, *, store_given: bool) -> dict:
    """gateway's report, with each scaled setup's shape and its ratios to the one process."""
    out = gateway._report(bench, generator, notes, targets, host)
    out["settings"]["gateways"] = gateways
    out["settings"]["store"] = "given" if store_given else "throw-away PostgreSQL"
    one = out["targets"]["llmgw"]
    for target in targets:
        if isinstance(target, _Spread):
            row = out["targets"][target.name]
            row.update({
                "gateways": target.count,
                "workers": target.workers,
                "rps_vs_one_process": ratio(row["rps"], one["rps"]),
                "cpu_vs_one_process": ratio(row["cpu_ms_per_req"], one["cpu_ms_per_req"]),
            })
    return out


def table(report: dict) -> tuple[list[dict], list[str]]:
    rows, columns = gateway.table(report)
    columns = columns[:1] + ["gateways", "workers"] + columns[1:2] + ["rps_vs_one_process"] + columns[2:] \
        + ["cpu_vs_one_process"]
    for row in rows:
        if row["target"] == "llmgw":
            row.update(gateways=1, workers=1, rps_vs_one_process=1.0, cpu_vs_one_process=1.0)
    return rows, columns


def headline(report: dict) -> list[str]:
    lines = gateway.headline(report)
    t = report["targets"]
    cpus = report["machine"].get("cpus", "?")
    scaled = [(name, row) for name, row in t.items() if "rps_vs_one_process" in row]
    for at, (name, row) in enumerate(scaled, start=2):
        lines.insert(at, f"{name} ({row['gateways']} control planes x {row['workers']} worker(s), one "
                         f"PostgreSQL, limits in one Redis): {row['rps_vs_one_process']}x one process's "
                         f"requests/s at {row['cpu_vs_one_process']}x its CPU a request, on {cpus} CPUs")
    return lines
