"""`llmgw bench`: measure llmgw against what a user would use instead (gateway, routing, placement)."""

from __future__ import annotations

from llmgw.cli.common import not_built

HELP = "Measure llmgw against what a user would use instead (gateway, routing, placement)."


def register(sub) -> None:
    parser = sub.add_parser("bench", help=HELP, description=HELP)
    parser.set_defaults(handler=not_built("bench", "issue #9 (benchmarks)"))
