"""`llmgw users`: manage people: create, list, roles, reset links (against the store)."""

from __future__ import annotations

from llmgw.cli.common import not_built

HELP = "Manage people: create, list, roles, reset links (against the store)."


def register(sub) -> None:
    parser = sub.add_parser("users", help=HELP, description=HELP)
    parser.set_defaults(handler=not_built("users", "issue #3 (the gateway)"))
