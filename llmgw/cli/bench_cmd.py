"""`llmgw bench`: measure llmgw against what a user would use instead (gateway, routing, placement), and its guardrails."""

from __future__ import annotations

import argparse
import sys

from llmgw.cli.common import add_json_flag, not_built, print_json, print_table

HELP = "Measure llmgw against what a user would use instead (gateway, routing, placement), and its guardrails."
#: Benchmarks still to come, each answering "not built yet" until it lands.
LATER = {
    "gateway": "Overhead and throughput of the gateway against a bare engine.",
    "routing": "Replica choice against round robin: cache hits, time to first token.",
    "placement": "Placement against first fit: cards used, models placed.",
}


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

    for name, text in LATER.items():
        later = benches.add_parser(name, help=text, description=text)
        later.set_defaults(handler=not_built(f"bench {name}", "issue #9 (benchmarks)"))


def _usage(parser: argparse.ArgumentParser):
    def handler(args: argparse.Namespace) -> int:
        parser.print_usage(sys.stderr)
        print(f"llmgw bench: name a benchmark: guard, {', '.join(LATER)}", file=sys.stderr)
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
