"""`llmgw up`: start a whole cluster on this machine: control plane, agent, a model answering."""

from __future__ import annotations

from llmgw.cli.common import not_built

HELP = "Start a whole cluster on this machine: control plane, agent, a model answering."


def register(sub) -> None:
    parser = sub.add_parser("up", help=HELP, description=HELP)
    parser.set_defaults(handler=not_built("up", "issue #4 (the cluster)"))
