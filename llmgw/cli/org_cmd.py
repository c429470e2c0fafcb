"""`llmgw org`: manage organizations, teams and projects (against the store)."""

from __future__ import annotations

from llmgw.cli.common import not_built

HELP = "Manage organizations, teams and projects (against the store)."


def register(sub) -> None:
    parser = sub.add_parser("org", help=HELP, description=HELP)
    parser.set_defaults(handler=not_built("org", "issue #3 (the gateway)"))
