"""`llmgw bench`: measure llmgw against what a user would use instead (gateway, routing, placement), and its guardrails."""

from __future__ import annotations

import argparse
import sys

from llmgw.cli.common import add_json_flag, not_built, print_json, print_table

HELP = "Measure llmgw against what a user would use instead (gateway, routing, placement), and its guardrails."
#: Benchmarks still to come, each answering "not built yet" until it lands.
LATER: dict[str, str] = {}


def register(sub) -> None:
    parser = sub.add_parser("bench", help=HELP, description=HELP)
    benches = parser.add_subparsers(dest="bench_command", metavar="BENCHMARK")
    parser.set_defaults(handler=_usage(parser))

    guard = benches.add_parser(
        "guard", help="Precision and recall of the guard detectors per kind, and the latency they add.",
        description="Generate a labelled corpus (texts holding each kind, plain and disguised, and look-alikes "
        "that are not), report precision and recall per kind, and the time the guardrails add to a chat "
        "request (input and answer checked whole), p50 and p95.",
    )
    guard.add_argument("--per-kind", type=int, default=40, metavar="N",
                       help="texts holding each kind, and as many look-alikes (default 40)")
    guard.add_argument("--requests", type=int, default=300, metavar="N",
                       help="chat requests timed through the guardrails (default 300; 0 skips timing)")
    guard.add_argument("--seed", type=int, default=7, help="the corpus's seed: the same seed, the same corpus")
    add_json_flag(guard)
    guard.set_defaults(handler=run_guard)
    _register_gateway(benches)
    _register_routing(benches)
    _register_placement(benches)

    for name, text in LATER.items():
        later = benches.add_parser(name, help=text, description=text)
        later.set_defaults(handler=not_built(f"bench {name}", "issue #9 (benchmarks)"))


def _usage(parser: argparse.ArgumentParser):
    def handler(args: argparse.Namespace) -> int:
        parser.print_usage(sys.stderr)
        names = ", ".join(["guard", "gateway", "routing", "placement", *LATER])
        print(f"llmgw bench: name a benchmark: {names}", file=sys.stderr)
        return 2

    return handler


def run_guard(args: argparse.Namespace) -> int:
    from llmgw.bench.guard import run
    from llmgw.cli.main import UsageError

    if args.per_kind < 1 or args.requests < 0:
        raise UsageError("--per-kind must be 1 or more and --requests 0 or more")
    result = run(per_kind=args.per_kind, requests=args.requests, seed=args.seed)
    if args.json:
        print_json(result)
        return 0
    rows = [{"kind": kind, "precision": _num(c["precision"]), "recall": _num(c["recall"]),
             "tp": c["tp"], "fp": c["fp"], "fn": c["fn"]} for kind, c in result["kinds"].items()]
    print(f"{result['samples']} texts (seed {result['seed']}), detectors: {', '.join(result['detectors'])}")
    print_table(rows, ["kind", "precision", "recall", "tp", "fp", "fn"])
    print(f"\nscanning: {result['scan_ms_per_sample']} ms per text")
    added = result["added_latency_ms"]
    if added:
        print(f"added per chat request ({result['requests']} requests, no cache):")
        print_table([{"stage": stage, "p50_ms": v["p50"], "p95_ms": v["p95"]} for stage, v in added.items()],
                    ["stage", "p50_ms", "p95_ms"])
    return 0


def _num(value) -> str:
    return "-" if value is None else f"{value:.3f}"


# ---------------------------------------------------------------- gateway and routing (issue #9)


def _say(message: str) -> None:
    print(f"llmgw bench: {message}", file=sys.stderr, flush=True)


def _register_gateway(benches) -> None:
    text = ("Requests/s and added latency through llmgw server, beside the engine alone and LiteLLM's proxy: "
            "a sim engine and each gateway in its own process, the same load at each, rounds interleaved.")
    p = benches.add_parser("gateway", help="What llmgw adds per request, beside the bare engine and LiteLLM.",
                           description=text)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--requests", type=int, metavar="N", help="requests per target over all rounds (default 2000)")
    size.add_argument("--duration", type=float, metavar="SECONDS", help="seconds per target over all rounds")
    p.add_argument("--rate", type=float, metavar="R",
                   help="open loop: offer R requests/s whatever the answers do (default: closed loop)")
    p.add_argument("--concurrency", type=int, default=50, metavar="C",
                   help="closed loop: requests in flight (default 50)")
    p.add_argument("--stream", action="store_true", help="streamed answers: time to first token and gaps too")
    p.add_argument("--prompt-tokens", type=int, default=64, metavar="N", help="prompt size (default 64)")
    p.add_argument("--answer-tokens", type=int, default=16, metavar="N", help="answer size (default 16)")
    p.add_argument("--keys", action=argparse.BooleanOptionalAction, default=True,
                   help="a key (and limits and a budget) on every request to llmgw (default on)")
    p.add_argument("--ttft", type=float, default=0.0, metavar="SECONDS", help="the engine's time to first token (default 0)")
    p.add_argument("--tpot", type=float, default=0.0, metavar="SECONDS", help="the engine's time per further token (default 0)")
    p.add_argument("--rounds", type=int, default=3, metavar="N", help="rounds, each target once a round (default 3)")
    p.add_argument("--litellm", metavar="PATH", help="the `litellm` command of an installed LiteLLM proxy, to measure it too")
    p.add_argument("--client", choices=("auto", "wrk", "python"), default="auto",
                   help="load generator: wrk for closed loops without streams when installed (auto), or always the Python client")
    p.add_argument("--warmup", type=int, default=200, metavar="N", help="requests to each target before measuring (default 200)")
    p.add_argument("--workers", type=int, default=1, metavar="W",
                   help="also measure llmgw with W worker processes on one port, their limits in a redis-server "
                        "it starts (needs redis-server; default 1: not measured)")
    p.add_argument("--gateways", type=int, default=1, metavar="N",  # scaled: llmgw.bench.gateway_scaled
                   help="also measure llmgw as N control planes on one PostgreSQL store, the load spread over them "
                        "(with --workers W: N x W processes too), their limits in a redis-server it starts, beside "
                        "one process (default 1: not measured)")
    p.add_argument("--store", metavar="DSN",  # scaled: llmgw.bench.gateway_scaled
                   help="with --gateways: the PostgreSQL the control planes share (default: a throw-away one from "
                        "Debian's postgresql binaries)")
    add_json_flag(p)
    p.set_defaults(handler=run_gateway)


def run_gateway(args: argparse.Namespace):
    from llmgw.bench import gateway
    from llmgw.bench.procs import StartFailed
    from llmgw.cli.main import UsageError

    try:
        bench = gateway.GatewayBench(
            requests=args.requests, duration=args.duration, rate=args.rate, concurrency=args.concurrency,
            stream=args.stream, prompt_tokens=args.prompt_tokens, answer_tokens=args.answer_tokens, keys=args.keys,
            ttft=args.ttft, tpot=args.tpot, rounds=args.rounds, litellm=args.litellm, client=args.client,
            warmup=args.warmup, workers=args.workers)
    except gateway.BenchError as exc:
        raise UsageError(str(exc)) from None

    scaled = None  # --gateways: llmgw.bench.gateway_scaled
    if args.gateways != 1 or args.store:
        from llmgw.bench import gateway_scaled as scaled

        try:
            scaled.setups(args.gateways, args.workers)
        except gateway.BenchError as exc:
            raise UsageError(str(exc)) from None

    async def main() -> int:
        try:
            report = (await scaled.run(bench, args.gateways, store=args.store, say=_say) if scaled
                      else await gateway.run(bench, _say))
        except (gateway.BenchError, StartFailed, OSError) as exc:
            print(f"llmgw bench gateway: {exc}", file=sys.stderr)
            return 1
        if args.json:
            print_json(report)
        else:
            rows, columns = (scaled or gateway).table(report)
            print_table(rows, columns)
            print("\n" + "\n".join((scaled or gateway).headline(report)))
        return 0

    return main()


def _register_routing(benches) -> None:
    from llmgw.bench.routing import DEFAULT_POLICIES, POLICIES, WORKLOADS

    text = ("Prefix-cache hit rate, time to first token and throughput of K sim replicas behind llmgw, under "
            "llmgw's replica choice and under round robin, random and least load, replaying one workload: "
            "shared prefix (groups of users sharing a system prompt) or multi-turn chat.")
    p = benches.add_parser("routing", help="llmgw's replica choice against round robin: cache hits, TTFT.",
                           description=text)
    p.add_argument("--workload", choices=WORKLOADS, default="shared-prefix", help="what to replay (default shared-prefix)")
    p.add_argument("--policies", default=",".join(DEFAULT_POLICIES), metavar="LIST",
                   help=f"comma-separated, of {', '.join(POLICIES)} (default {','.join(DEFAULT_POLICIES)})")
    p.add_argument("--replicas", type=int, default=4, metavar="K", help="sim replicas (default 4)")
    p.add_argument("--concurrency", type=int, default=8, metavar="C",
                   help="requests (shared prefix) or conversations (multi-turn) at once (default 8)")
    p.add_argument("--rate", type=float, metavar="R", help="shared prefix: open loop at R requests/s instead")
    p.add_argument("--requests", type=int, metavar="N", help="shared prefix: requests (default 600)")
    p.add_argument("--groups", type=int, metavar="N", help="shared prefix: groups of users (default 16)")
    p.add_argument("--system-tokens", type=int, metavar="N",
                   help="system prompt size (default 1000 shared prefix, 200 multi-turn)")
    p.add_argument("--question-tokens", type=int, metavar="N", help="shared prefix: question size (default 50)")
    p.add_argument("--answer-tokens", type=int, metavar="N", help="answer size (default 16 shared prefix, 32 multi-turn)")
    p.add_argument("--conversations", type=int, metavar="N", help="multi-turn: conversations (default 48)")
    p.add_argument("--turns", type=int, metavar="N", help="multi-turn: turns each (default 6)")
    p.add_argument("--user-tokens", type=int, metavar="N", help="multi-turn: user message size (default 120)")
    p.add_argument("--ttft", type=float, default=0.02, metavar="SECONDS", help="engines' base time to first token (default 0.02)")
    p.add_argument("--prefill-per-token", type=float, default=0.0002, metavar="SECONDS",
                   help="engines' prefill time per prompt token not cached (default 0.0002)")
    p.add_argument("--tpot", type=float, default=0.01, metavar="SECONDS", help="engines' time per further token (default 0.01)")
    p.add_argument("--kv-cache-blocks", type=int, default=600, metavar="N",
                   help="each replica's prefix cache, in blocks of 16 tokens (default 600)")
    p.add_argument("--seed", type=int, default=7, help="the workload's seed: the same seed, the same requests")
    add_json_flag(p)
    p.set_defaults(handler=run_routing)


def run_routing(args: argparse.Namespace):
    import attrs

    from llmgw.bench import routing
    from llmgw.bench.procs import StartFailed
    from llmgw.bench.workloads import MultiTurn, SharedPrefix
    from llmgw.cli.main import UsageError

    def given(**names) -> dict:
        return {field: value for field, value in names.items() if value is not None}

    try:
        shared = attrs.evolve(SharedPrefix(seed=args.seed), **given(
            requests=args.requests, groups=args.groups, system_tokens=args.system_tokens,
            question_tokens=args.question_tokens, answer_tokens=args.answer_tokens))
        chat = attrs.evolve(MultiTurn(seed=args.seed), **given(
            conversations=args.conversations, turns=args.turns, system_tokens=args.system_tokens,
            user_tokens=args.user_tokens, answer_tokens=args.answer_tokens))
        bench = routing.RoutingBench(
            workload=args.workload, policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
            replicas=args.replicas, concurrency=args.concurrency, rate=args.rate, ttft=args.ttft,
            prefill_per_token=args.prefill_per_token, tpot=args.tpot, kv_cache_blocks=args.kv_cache_blocks,
            shared=shared, chat=chat, seed=args.seed)
    except (routing.RoutingBenchError, ValueError) as exc:
        raise UsageError(str(exc)) from None

    async def main() -> int:
        try:
            report = await routing.run(bench, _say)
        except (StartFailed, OSError) as exc:
            print(f"llmgw bench routing: {exc}", file=sys.stderr)
            return 1
        if args.json:
            print_json(report)
        else:
            rows, columns = routing.table(report)
            print_table(rows, columns)
            print("\n" + "\n".join(routing.headline(report)))
        return 0

    return main()


def _register_placement(benches) -> None:
    text = ("Time a full placement pass (through one placement round, as the reconciler makes it, and the same "
            "pass made by place() per decision) and a single decision on synthetic clusters of mixed GPU classes, "
            "for growing node counts, and compare the packing with a naive first fit.")
    p = benches.add_parser("placement", help="Placement against first fit: time per decision, packing.",
                           description=text)
    p.add_argument("--nodes", default="250,500,1000,2000", metavar="LIST",
                   help="cluster sizes, comma-separated (default 250,500,1000,2000)")
    p.add_argument("--replicas-per-node", type=float, default=2.0, metavar="R",
                   help="replicas a pass places, per node (default 2: about 70%% of the cards)")
    p.add_argument("--seed", type=int, default=7, help="the cluster's and the requests' seed")
    p.add_argument("--repeat", type=int, default=3, metavar="N",  # placement: --repeat
                   help="passes through a new round per size, the median reported (default 3)")
    add_json_flag(p)
    p.set_defaults(handler=run_placement)


def run_placement(args: argparse.Namespace) -> int:
    from llmgw.bench import placement
    from llmgw.cli.main import UsageError

    try:
        sizes = tuple(int(n) for n in args.nodes.split(",") if n.strip())
        bench = placement.PlacementBench(sizes=sizes, replicas_per_node=args.replicas_per_node, seed=args.seed,
                                         repeat=args.repeat)  # placement: --repeat
    except ValueError as exc:
        raise UsageError(str(exc) if "--" in str(exc) else f"--nodes: whole numbers, got {args.nodes!r}") from None
    report = placement.run(bench, _say)
    if args.json:
        print_json(report)
    else:
        rows, columns = placement.table(report)
        print_table(rows, columns)
        print("\n" + "\n".join(placement.headline(report)))
    return 0
