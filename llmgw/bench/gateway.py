"""`llmgw bench gateway`: what llmgw costs per request, beside the engine alone and LiteLLM.

A sim engine answers (at once by default), `llmgw server` stands in front of
it, and optionally LiteLLM's proxy does too, each its own process. The same
load from the same generator goes to each target in turn, round after round
with the order rotated, so a machine that drifts (a noisy neighbour, a CPU
that warms up) touches every target alike.

Closed loop (`concurrency`) finds the most requests/s; open loop (`rate`)
offers a fixed rate below capacity, where the latency llmgw adds is the
number that matters. wrk drives closed-loop runs that do not stream; the
Python client drives the rest and measures streams (time to the first event,
gaps between events).
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from pathlib import Path

import attrs

from llmgw.bench import client, procs, wrk
from llmgw.bench.stats import Outcome, describe_machine, latency_summary, machine, ms, percentile, ratio
from llmgw.bench.workloads import chat_body, words

MODEL = "bench"
TARGETS = ("direct", "llmgw", "litellm")


class BenchError(RuntimeError):
    """The benchmark could not run as asked; the message says why."""


@attrs.frozen
class GatewayBench:
    """What to run: the load's shape and size, the engine's latency, the targets."""

    requests: int | None = None  # per target, over all rounds
    duration: float | None = None  # seconds per target, over all rounds
    rate: float | None = None  # open loop: requests/s offered; None: closed loop
    concurrency: int = 50  # closed loop: requests in flight
    stream: bool = False
    prompt_tokens: int = 64
    answer_tokens: int = 16
    keys: bool = True
    ttft: float = 0.0  # the engine's time to first token, seconds
    tpot: float = 0.0  # and per further token
    rounds: int = 3
    litellm: str | None = None  # the `litellm` command; None: LiteLLM is not measured
    client: str = "auto"  # auto, wrk or python
    warmup: int = 200  # requests per target before measuring
    workers: int = 1  # more than 1: also llmgw with that many workers, their limits shared in a Redis

    def __attrs_post_init__(self) -> None:
        if self.requests is not None and self.duration is not None:
            raise BenchError("give --requests or --duration, not both")
        if self.rate is not None and self.rate <= 0:
            raise BenchError("--rate: requests per second must be more than 0")
        if self.workers < 1:
            raise BenchError("--workers must be at least 1")
        if self.concurrency < 1 or self.rounds < 1:
            raise BenchError("--concurrency and --rounds must be at least 1")
        if self.client not in ("auto", "wrk", "python"):
            raise BenchError("--client: auto, wrk or python")
        if self.client == "wrk" and (self.stream or self.rate is not None):
            raise BenchError("--client wrk: wrk measures neither streams nor a fixed rate; use the Python client")

    @property
    def total_requests(self) -> int | None:
        if self.requests is None and self.duration is None:
            return 2000
        return self.requests

    def share(self, round_index: int) -> tuple[int | None, float | None]:
        """Requests or seconds one target gets in one round."""
        total = self.total_requests
        if total is not None:
            base, extra = divmod(total, self.rounds)
            return base + (1 if round_index < extra else 0), None
        return None, self.duration / self.rounds


def choose_generator(bench: GatewayBench) -> tuple[str, list[str]]:
    """wrk or python, and a note when the choice was forced."""
    wants_wrk = bench.rate is None and not bench.stream and bench.client in ("auto", "wrk")
    if not wants_wrk:
        return "python", []
    if wrk.wrk_path() is not None:
        return "wrk", []
    if bench.client == "wrk":
        raise BenchError("--client wrk: wrk is not installed (apt-get install wrk)")
    return "python", [("wrk is not installed, so the Python client drives the closed loop; it may be "
                       "the limit itself (see client_cpu_s). apt-get install wrk for raw requests/s.")]


@attrs.define
class _Target:
    name: str
    url: str  # base, without /v1
    headers: dict
    child: procs.Child | None  # the proxy process, measured; None for the engine itself
    outcome: Outcome = attrs.Factory(Outcome)
    cpu_s: float = 0.0
    engine_cpu_s: float = 0.0
    rss_before: float | None = None
    rss_after: float | None = None


async def run(bench: GatewayBench, say: Callable[[str], None] = lambda _: None) -> dict:
    """Run the benchmark; the report as a JSON-ready dict."""
    generator, notes = choose_generator(bench)
    host = machine()
    body = chat_body(MODEL, [{"role": "user", "content": words(random.Random(1), bench.prompt_tokens)}],
                     max_tokens=bench.answer_tokens, stream=bench.stream)
    children: list[procs.Child] = []
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-") as tmp, procs.quiet_llmgw_logs():
        workdir = Path(tmp)
        try:
            say(f"starting the sim engine (ttft {bench.ttft} s, tpot {bench.tpot} s)")
            engine = await procs.start_sim_engine(workdir, model=MODEL, ttft=bench.ttft, tpot=bench.tpot)
            children.append(engine)
            say(f"starting llmgw server (keys {'on' if bench.keys else 'off'})")
            gateway, secret = await procs.start_gateway(workdir, engine_url=engine.url, model=MODEL,
                                                         keys=bench.keys, concurrency=bench.concurrency)
            children.append(gateway)
            targets = [_Target("direct", engine.url, {}, None),
                       _Target("llmgw", gateway.url, _bearer(secret), gateway)]
            if bench.workers > 1:  # workers: the same gateway in W processes on one port, limits in a Redis
                say(f"starting redis-server and llmgw server with {bench.workers} workers")
                redis, redis_url = await procs.start_redis(workdir)
                children.append(redis)
                many, many_secret = await procs.start_gateway(
                    workdir / "workers", engine_url=engine.url, model=MODEL, keys=bench.keys,
                    concurrency=bench.concurrency, workers=bench.workers, limits_store=redis_url)
                children.append(many)
                targets.append(_Target(f"llmgw-{bench.workers}w", many.url, _bearer(many_secret), many))
            if bench.litellm:
                say("starting LiteLLM's proxy (this takes a while)")
                proxy, master = await procs.start_litellm(bench.litellm, workdir, engine_url=engine.url,
                                                          model=MODEL, keys=bench.keys)
                children.append(proxy)
                targets.append(_Target("litellm", proxy.url, _bearer(master), proxy))
            for target in targets:
                await _warm_up(bench, target, body)
                if target.child is not None:
                    target.rss_before = target.child.rss_mb()
            for r in range(bench.rounds):
                order = targets[r % len(targets):] + targets[:r % len(targets)]
                for target in order:
                    count, seconds = bench.share(r)
                    say(f"round {r + 1}/{bench.rounds}: {target.name}")
                    await _measure(bench, generator, target, body, engine, count, seconds)
            for target in targets:
                if target.child is not None:
                    target.rss_after = target.child.rss_mb()
        finally:
            for child in reversed(children):
                await child.stop()
    return _report(bench, generator, notes, targets, host)


def _bearer(secret: str | None) -> dict:
    return {"Authorization": f"Bearer {secret}"} if secret else {}


def _call(target: _Target, body: bytes, stream: bool) -> client.Call:
    headers = {"Content-Type": "application/json", **target.headers}
    return client.Call(target.url + "/v1/chat/completions", body, headers, stream)


async def _warm_up(bench: GatewayBench, target: _Target, body: bytes) -> None:
    if not bench.warmup:
        return
    workers = min(bench.concurrency, 16)
    async with client.session_for(workers) as http:
        out = await client.closed_loop(http, client.repeat(_call(target, body, bench.stream), bench.warmup),
                                        workers)
    if out.ok == 0:
        raise BenchError(f"{target.name}: no request succeeded in the warm-up ({dict(out.error_kinds)})")


async def _measure(bench: GatewayBench, generator: str, target: _Target, body: bytes, engine: procs.Child,
                   count: int | None, seconds: float | None) -> None:
    cpu0 = target.child.cpu_seconds() if target.child else 0.0
    engine0 = engine.cpu_seconds()
    call = _call(target, body, bench.stream)
    if generator == "wrk":
        out = await wrk.run(call.url, body, target.headers, connections=bench.concurrency,
                            requests=count, duration=seconds)
    else:
        connections = 0 if bench.rate is not None else bench.concurrency
        async with client.session_for(connections) as http:
            if bench.rate is not None:
                out = await client.open_loop(http, client.repeat(call, count), bench.rate, duration=seconds)
            else:
                out = await client.closed_loop(http, client.repeat(call, count), bench.concurrency,
                                               duration=seconds)
    if target.child is not None:
        target.cpu_s += target.child.cpu_seconds() - cpu0
    target.engine_cpu_s += engine.cpu_seconds() - engine0
    target.outcome.merge(out)


def _report(bench: GatewayBench, generator: str, notes: list[str], targets: list[_Target], host: dict) -> dict:
    results: dict[str, dict] = {}
    direct = targets[0].outcome
    for target in targets:
        out = target.outcome
        summary = latency_summary(out)
        summary["client_cpu_s"] = round(out.client_cpu, 2)
        summary["engine_cpu_ms_per_req"] = ms(target.engine_cpu_s / out.ok, 3) if out.ok else None
        if bench.rate is not None:
            summary["client_late_ms"] = ms(out.late)
        if target.child is not None:
            summary.update({
                "added_p50_ms": _added(out, direct, 50),
                "added_p99_ms": _added(out, direct, 99),
                "rps_vs_direct": ratio(out.rps, direct.rps),
                "cpu_ms_per_req": ms(target.cpu_s / out.ok, 3) if out.ok else None,
                "rss_mb_before": target.rss_before,
                "rss_mb_after": target.rss_after,
            })
            if out.ttfts and direct.ttfts:
                summary["added_ttft_p50_ms"] = ms(percentile(out.ttfts, 50) - percentile(direct.ttfts, 50))
        results[target.name] = summary
        if out.errors:
            notes.append(f"{target.name}: {out.errors} of {out.ok + out.errors} requests failed, so its "
                         f"requests/s is not at 100% success: lower --concurrency or --rate")
    many = f"llmgw-{bench.workers}w"
    if many in results:  # workers: what W processes bought over one
        results[many]["rps_vs_one_worker"] = ratio(results[many]["rps"], results["llmgw"]["rps"])
    if "litellm" in results:
        results["llmgw"]["rps_vs_litellm"] = ratio(results["llmgw"]["rps"], results["litellm"]["rps"])
    return {
        "bench": "gateway",
        "settings": {**attrs.asdict(bench), "requests": bench.total_requests,
                     "loop": "open" if bench.rate is not None else "closed"},
        "machine": host,
        "load_generator": generator,
        "notes": notes,
        "targets": results,
    }


def _added(out: Outcome, direct: Outcome, p: float) -> float | None:
    mine, base = percentile(out.latencies, p), percentile(direct.latencies, p)
    return None if mine is None or base is None else ms(mine - base)


# ---------------------------------------------------------------- the table


def table(report: dict) -> tuple[list[dict], list[str]]:
    """Rows and columns for the command's table."""
    stream = bool(report["settings"]["stream"])
    columns = ["target", "rps", "ok", "errors", "p50_ms", "p95_ms", "p99_ms", "added_p50_ms", "added_p99_ms"]
    if stream:
        columns += ["ttft_p50_ms", "ttft_p99_ms", "gap_p50_ms"]
    columns += ["cpu_ms_per_req", "rss_mb_before", "rss_mb_after"]
    rows = [{"target": name, **values} for name, values in report["targets"].items()]
    return rows, columns


def headline(report: dict) -> list[str]:
    """The sentences printed under the table."""
    s = report["settings"]
    load = (f"open loop at {s['rate']:g} requests/s" if s["loop"] == "open"
            else f"closed loop, {s['concurrency']} in flight")
    size = f"{s['requests']} requests" if s["requests"] is not None else f"{s['duration']:g} s"
    lines = [(f"{load}; {size} per target in {s['rounds']} interleaved rounds; load from "
              f"{report['load_generator']}; keys {'on' if s['keys'] else 'off'}; {describe_machine(report['machine'])}")]
    t = report["targets"]
    if "llmgw" in t:
        lines.append(f"llmgw: {t['llmgw']['rps_vs_direct']}x the engine's requests/s, "
                     f"+{t['llmgw']['added_p50_ms']} ms at p50, +{t['llmgw']['added_p99_ms']} ms at p99")
    if "litellm" in t:
        lines.append(f"llmgw: {t['llmgw'].get('rps_vs_litellm')}x LiteLLM's requests/s")
    many = f"llmgw-{s['workers']}w"
    if many in t:
        lines.append(f"llmgw with {s['workers']} workers (limits in Redis): {t[many]['rps_vs_one_worker']}x one "
                     f"worker's requests/s, on {report['machine'].get('cpus', '?')} CPUs")
    return lines + list(report["notes"])
