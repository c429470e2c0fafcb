"""`llmgw ctl node logs NODE [--lines N] [--replica ID]`: a node's agent log, or a replica's engine log.

The leader asks the node's agent for the last lines (GET /nodes/{node}/logs);
they are printed oldest first, so the newest is at the bottom, errors in red
and warnings in yellow when standard output is a terminal (and NO_COLOR is
not set); `--json` prints the API's answer, each line with its level.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, TextIO

from llmgw.cli.common import print_json
from llmgw.cli.ctl_client import AdminClient, quote, register_leaf

__all__ = ["register_node_logs", "run_node_logs"]

_COLOURS = {"error": "\x1b[31m", "warning": "\x1b[33m"}
_RESET = "\x1b[0m"


def register_node_logs(cmds: Any) -> None:
    """`logs` under `ctl node`."""
    p = cmds.add_parser("logs", help="Print a node's agent log, or a replica's engine log there.",
                        description="Print the last lines of a node's agent log, newest at the bottom; with "
                        "--replica, that replica's engine log on the node. The leader asks the node's agent, "
                        "which must be connected. Errors are red and warnings yellow on a terminal.")
    p.add_argument("node", metavar="NODE")
    p.add_argument("--lines", "-n", type=int, default=200, metavar="N",
                   help="how many of the last lines, 1 to 5000 (default 200)")
    p.add_argument("--replica", metavar="ID", default="",
                   help="a replica's engine log instead of the agent's (`llmgw ctl replicas` lists them)")
    register_leaf(p, run_node_logs, actor_flag=False)


def run_node_logs(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.get(f"/nodes/{quote(args.node)}/logs", lines=args.lines, replica=args.replica or None)
    if args.json:
        print_json(answer)
        return 0
    print_lines(answer["lines"], sys.stdout, colour=_colour_wanted(sys.stdout))
    if not answer["lines"]:
        what = f"replica {args.replica}'s log" if args.replica else "the agent's log"
        print(f"{args.node}: {what} is empty", file=sys.stderr)
    return 0


def print_lines(lines: list[dict[str, Any]], out: TextIO, *, colour: bool) -> None:
    for line in lines:
        start = _COLOURS.get(line.get("level", "")) if colour else None
        out.write(f"{start}{line['text']}{_RESET}\n" if start else f"{line['text']}\n")


def _colour_wanted(out: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False
