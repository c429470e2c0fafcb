"""`llmgw agent`: run the node agent: find the hardware, supervise engines, fetch weights, report to the control planes."""

from __future__ import annotations

from llmgw.cli.common import not_built

HELP = "Run the node agent: find the hardware, supervise engines, fetch weights, report to the control planes."


def register(sub) -> None:
    parser = sub.add_parser("agent", help=HELP, description=HELP)
    parser.set_defaults(handler=not_built("agent", "issue #4 (the cluster)"))
