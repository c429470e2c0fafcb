"""`llmgw keys`: manage API keys: create, list, revoke, rotate, limits (against the store)."""

from __future__ import annotations

from llmgw.cli.common import not_built

HELP = "Manage API keys: create, list, revoke, rotate, limits (against the store)."


def register(sub) -> None:
    parser = sub.add_parser("keys", help=HELP, description=HELP)
    parser.set_defaults(handler=not_built("keys", "issue #3 (the gateway)"))
