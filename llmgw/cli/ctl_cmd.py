"""`llmgw ctl`: drive a running control plane through its admin API (every operation, --json)."""

from __future__ import annotations

from llmgw.cli.common import not_built

HELP = "Drive a running control plane through its admin API (every operation, --json)."


def register(sub) -> None:
    parser = sub.add_parser("ctl", help=HELP, description=HELP)
    parser.set_defaults(handler=not_built("ctl", "issue #5 (the admin API)"))
