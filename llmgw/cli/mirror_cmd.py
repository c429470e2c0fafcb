"""`llmgw mirror`: keep model files for the whole cluster: serve, add, list, verify, remove, import."""

from __future__ import annotations

from llmgw.cli.common import not_built

HELP = "Keep model files for the whole cluster: serve, add, list, verify, remove, import."


def register(sub) -> None:
    parser = sub.add_parser("mirror", help=HELP, description=HELP)
    parser.set_defaults(handler=not_built("mirror", "issue #10 (the mirror)"))
