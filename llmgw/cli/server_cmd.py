"""`llmgw server`: run a control plane: the client API, the admin API, the scheduler and the agent endpoint."""

from __future__ import annotations

from llmgw.cli.common import not_built

HELP = "Run a control plane: the client API, the admin API, the scheduler and the agent endpoint."


def register(sub) -> None:
    parser = sub.add_parser("server", help=HELP, description=HELP)
    parser.set_defaults(handler=not_built("server", "issue #4 (the cluster)"))
