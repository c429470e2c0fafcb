"""`llmgw console`: open the operator's terminal console over the admin API."""

from __future__ import annotations

from llmgw.cli.common import not_built

HELP = "Open the operator's terminal console over the admin API."


def register(sub) -> None:
    parser = sub.add_parser("console", help=HELP, description=HELP)
    parser.set_defaults(handler=not_built("console", "issue #6 (the console)"))
