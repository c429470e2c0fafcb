"""`llmgw bench routing`: how much llmgw's replica choice saves, beside simpler choices.

K sim engines with prefix caches (`llmgw sim-engine` processes) serve one
model behind an llmgw gateway that runs in this process, so that its choice
can be switched (`Chooser.set_policy`). A workload (llmgw.bench.workloads) is replayed once per
policy, each time on fresh engines with cold caches and the same requests in
the same order:

| policy | how a replica is chosen |
|---|---|
| llmgw | the router as shipped: session, then prefix affinity, then least outstanding |
| prefix | prefix affinity, then least outstanding (no session affinity) |
| session | session affinity, then least outstanding |
| least_load | least outstanding only |
| round_robin | each replica in turn, blind to load and prompts |
| random | any replica |

The hit rate is the engines' own: `vllm:prefix_cache_hits_total` over
`vllm:prefix_cache_queries_total` (prompt tokens), summed over the replicas.
Time to first token is measured at the client, through the gateway.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import attrs
from aiohttp import web

from llmgw.bench import client, procs
from llmgw.bench.stats import Outcome, describe_machine, latency_summary, machine, ratio
from llmgw.bench.workloads import MultiTurn, SharedPrefix, chat_body

MODEL = "bench"
WORKLOADS = ("shared-prefix", "multi-turn")
#: policy -> (session affinity, prefix affinity, the chooser's policy)
POLICIES: dict[str, tuple[bool, bool, str]] = {
    "llmgw": (True, True, "affinity"),
    "prefix": (False, True, "affinity"),
    "session": (True, False, "affinity"),
    "least_load": (False, False, "affinity"),
    "round_robin": (False, False, "round_robin"),
    "random": (False, False, "random"),
}
DEFAULT_POLICIES = ("llmgw", "least_load", "round_robin", "random")
BASELINE = "round_robin"


class RoutingBenchError(ValueError):
    """Settings that cannot run; the message names the option."""


@attrs.frozen
class RoutingBench:
    workload: str = "shared-prefix"
    policies: tuple[str, ...] = DEFAULT_POLICIES
    replicas: int = 4
    concurrency: int = 8  # closed loop: requests (shared prefix) or conversations (multi-turn) at once
    rate: float | None = None  # shared prefix only: open loop at this many requests/s
    # the engines
    ttft: float = 0.02
    prefill_per_token: float = 0.0002
    tpot: float = 0.01
    block_size: int = 16
    kv_cache_blocks: int = 600
    # the workloads
    shared: SharedPrefix = attrs.Factory(SharedPrefix)
    chat: MultiTurn = attrs.Factory(MultiTurn)
    seed: int = 7

    def __attrs_post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise RoutingBenchError(f"--workload: one of {', '.join(WORKLOADS)}, got {self.workload!r}")
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown or not self.policies:
            raise RoutingBenchError(f"--policies: name some of {', '.join(POLICIES)}; unknown: {', '.join(unknown)}")
        if self.replicas < 2:
            raise RoutingBenchError("--replicas: routing needs at least 2")
        if self.concurrency < 1:
            raise RoutingBenchError("--concurrency must be at least 1")
        if self.rate is not None and (self.rate <= 0 or self.workload != "shared-prefix"):
            raise RoutingBenchError("--rate: more than 0, and for the shared-prefix workload only")


async def run(bench: RoutingBench, say: Callable[[str], None] = lambda _: None) -> dict:
    """Replay the workload under each policy; the report as a JSON-ready dict."""
    results = {}
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-routing-") as tmp, procs.quiet_llmgw_logs():
        for policy in bench.policies:
            say(f"{bench.workload}: {policy}")
            results[policy] = await _run_policy(bench, policy, Path(tmp) / policy)
    return _report(bench, results)


async def _run_policy(bench: RoutingBench, policy: str, workdir: Path) -> dict:
    workdir.mkdir(parents=True)
    engines: list[procs.Child] = []
    runner = None
    try:
        started = await asyncio.gather(*(procs.start_sim_engine(
            workdir, model=MODEL, ttft=bench.ttft, tpot=bench.tpot, prefill_per_token=bench.prefill_per_token,
            max_num_seqs=1024, name=f"sim-engine-{i}",
            extra=("--seed", str(i), "--block-size", str(bench.block_size),
                   "--kv-cache-blocks", str(bench.kv_cache_blocks))) for i in range(bench.replicas)),
            return_exceptions=True)
        engines = [e for e in started if isinstance(e, procs.Child)]
        failed = [e for e in started if isinstance(e, BaseException)]
        if failed:
            raise failed[0]
        runner, url = await _start_gateway(bench, policy, [e.url for e in engines], workdir)
        async with client.session_for(0) as http:
            before = [await _engine_counts(http, e.url) for e in engines]
            out = await _replay(bench, http, url)
            after = [await _engine_counts(http, e.url) for e in engines]
    finally:
        if runner is not None:
            await runner.cleanup()
        for engine in engines:
            await engine.stop()
    return _policy_result(out, before, after)


async def _start_gateway(bench: RoutingBench, policy: str, engine_urls: list[str],
                         workdir: Path) -> tuple[web.AppRunner, str]:
    from llmgw.config import parse_server_config
    from llmgw.router.gateway import GATEWAY
    from llmgw.server import make_gateway_app

    session, prefix, choice = POLICIES[policy]
    config = parse_server_config({
        "store": {"dsn": str(workdir / "llmgw.db")},
        "auth": {"keys_required": False},
        "control": {"enabled": False},
        "router": {"affinity": {"session": session, "prefix": prefix}, "scrape_interval": "1s"},
        "admission": {"queue_depth": 100_000},
        "models": [{"name": MODEL, "concurrency": 1024,
                    "endpoints": [{"url": u + "/v1"} for u in engine_urls]}],
    })
    app = make_gateway_app(config)
    app[GATEWAY].chooser.set_policy(choice, seed=bench.seed)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/v1/chat/completions"


async def _replay(bench: RoutingBench, http: aiohttp.ClientSession, url: str) -> Outcome:
    headers = {"Content-Type": "application/json"}
    if bench.workload == "shared-prefix":
        wl = bench.shared
        calls = iter([client.Call(url, chat_body(MODEL, messages, max_tokens=wl.answer_tokens, stream=True),
                                  headers, stream=True) for _, messages in wl.requests_in_order()])

        def next_call() -> client.Call | None:
            return next(calls, None)

        if bench.rate is not None:
            return await client.open_loop(http, next_call, bench.rate, parse=True)
        return await client.closed_loop(http, next_call, bench.concurrency, parse=True)
    return await _multi_turn(bench.chat, bench.concurrency, http, url, headers)


async def _multi_turn(wl: MultiTurn, concurrency: int, http: aiohttp.ClientSession, url: str,
                      headers: dict) -> Outcome:
    """`concurrency` conversations at a time, each sending its turns one after another."""
    out = Outcome()
    gate = asyncio.Semaphore(concurrency)
    cpu0, t0 = time.process_time(), time.perf_counter()

    async def conversation(c: int) -> None:
        async with gate:
            messages = wl.opening(c)
            for turn in range(wl.turns):
                messages.append(wl.user_message(c, turn))
                body = chat_body(MODEL, messages, max_tokens=wl.answer_tokens, stream=True, user=f"conversation-{c}")
                answer = await client.send(http, client.Call(url, body, headers, stream=True), out,
                                           parse=True, keep_text=True)
                if answer is None:
                    return  # a conversation whose turn failed goes no further
                messages.append({"role": "assistant", "content": answer.text})

    await asyncio.gather(*(conversation(c) for c in range(wl.conversations)))
    out.elapsed = time.perf_counter() - t0
    out.client_cpu = time.process_time() - cpu0
    return out


# ---------------------------------------------------------------- the engines' metrics

_COUNTERS = {
    "vllm:prefix_cache_hits_total": "hits",
    "vllm:prefix_cache_queries_total": "queries",
    "vllm:request_success_total": "requests",
}


async def _engine_counts(http: aiohttp.ClientSession, base: str) -> dict[str, float]:
    """The prefix cache's counters and finished requests, read from the engine's /metrics."""
    async with http.get(base + "/metrics") as resp:
        text = await resp.text()
    return parse_counters(text)


def parse_counters(text: str) -> dict[str, float]:
    counts = dict.fromkeys(_COUNTERS.values(), 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in _COUNTERS:
            counts[_COUNTERS[name]] += float(line.rsplit(" ", 1)[1])
    return counts


def _policy_result(out: Outcome, before: list[dict], after: list[dict]) -> dict:
    delta = [{k: a[k] - b[k] for k in a} for a, b in zip(after, before)]
    hits, queries = sum(d["hits"] for d in delta), sum(d["queries"] for d in delta)
    summary = latency_summary(out)
    summary.update({
        "hit_rate": round(hits / queries, 4) if queries else 0.0,
        "tokens_per_s": round(out.tokens / out.elapsed, 1) if out.elapsed else 0.0,
        "per_replica": [int(d["requests"]) for d in delta],
        "client_cpu_s": round(out.client_cpu, 2),
    })
    return summary


def _report(bench: RoutingBench, results: dict[str, dict]) -> dict:
    base = results.get(BASELINE)
    if base is not None:
        for values in results.values():
            values["vs_round_robin"] = {
                "hit_rate": ratio(values["hit_rate"], base["hit_rate"]),
                "ttft_mean": ratio(values.get("ttft_mean_ms"), base.get("ttft_mean_ms")),
                "ttft_p90": ratio(values.get("ttft_p90_ms"), base.get("ttft_p90_ms")),
                "ttft_p95": ratio(values.get("ttft_p95_ms"), base.get("ttft_p95_ms")),
                "tokens_per_s": ratio(values["tokens_per_s"], base["tokens_per_s"]),
            }
    workload = attrs.asdict(bench.shared if bench.workload == "shared-prefix" else bench.chat)
    if bench.workload == "shared-prefix":
        workload["working_set_blocks"] = bench.shared.working_set_blocks(bench.block_size)
    settings = {k: v for k, v in attrs.asdict(bench).items() if k not in ("shared", "chat")}
    return {
        "bench": "routing",
        "workload": bench.workload,
        "settings": {**settings, "workload": workload, "loop": "open" if bench.rate else "closed"},
        "machine": machine(),
        "policies": results,
    }


def table(report: dict) -> tuple[list[dict], list[str]]:
    """Rows and columns for the command's table: one row per policy, ratios to round robin."""
    rows = []
    for policy, v in report["policies"].items():
        vs = v.get("vs_round_robin") or {}
        rows.append({
            "policy": policy, "ok": v["ok"], "errors": v["errors"], "hit_rate": f"{v['hit_rate']:.3f}",
            "ttft_mean_ms": v.get("ttft_mean_ms"), "ttft_p50_ms": v.get("ttft_p50_ms"),
            "ttft_p90_ms": v.get("ttft_p90_ms"), "ttft_p95_ms": v.get("ttft_p95_ms"),
            "tokens_per_s": v["tokens_per_s"], "hit_x": _x(vs.get("hit_rate")),
            "ttft_mean_x": _x(vs.get("ttft_mean")), "ttft_p90_x": _x(vs.get("ttft_p90")),
            "ttft_p95_x": _x(vs.get("ttft_p95")),
            "tput_x": _x(vs.get("tokens_per_s")), "per_replica": "/".join(map(str, v["per_replica"])),
        })
    columns = ["policy", "ok", "errors", "hit_rate", "ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p95_ms",
               "tokens_per_s", "per_replica"]
    if BASELINE in report["policies"]:
        columns += ["hit_x", "ttft_mean_x", "ttft_p90_x", "ttft_p95_x", "tput_x"]
    return rows, columns


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"  # "-": round robin's own value was 0


def headline(report: dict) -> list[str]:
    s = report["settings"]
    w = s["workload"]
    if report["workload"] == "shared-prefix":
        shape = (f"{w['requests']} requests in {w['groups']} groups sharing {w['system_tokens']}-token system "
                 f"prompts ({w['working_set_blocks']} KV blocks in all)")
    else:
        shape = (f"{w['conversations']} conversations of {w['turns']} turns, {w['user_tokens']} tokens a message, "
                 f"{w['answer_tokens']} an answer")
    load = f"open loop at {s['rate']:g} requests/s" if s["rate"] else f"{s['concurrency']} at a time"
    lines = [f"{report['workload']}: {shape}; {load}",
             (f"{s['replicas']} sim replicas, each a prefix cache of {s['kv_cache_blocks']} blocks of "
              f"{s['block_size']} tokens; prefill {s['prefill_per_token'] * 1000:g} ms a token not cached"),
             describe_machine(report["machine"])]
    if BASELINE in report["policies"]:
        lines.append("_x columns: that policy over round robin (hit rate and throughput: higher is better; "
                     "TTFT: lower is better)")
    for policy, v in report["policies"].items():
        if v["errors"]:
            lines.append(f"{policy}: {v['errors']} requests failed ({v.get('error_kinds')})")
    return lines
