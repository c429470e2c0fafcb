"""`llmgw docs`: read the manual built into llmgw: list the pages, or show one."""

from __future__ import annotations

from llmgw.cli.common import not_built

HELP = "Read the manual built into llmgw: list the pages, or show one."


def register(sub) -> None:
    parser = sub.add_parser("docs", help=HELP, description=HELP)
    parser.set_defaults(handler=not_built("docs", "issue #6 (the manual)"))
