"""`llmgw join CODE`: make this machine a node of the cluster the join code is from."""

from __future__ import annotations

import argparse
import sys

HELP = "Make this machine a node with a join code from `llmgw ctl node join-code`."


def register(sub) -> None:
    parser = sub.add_parser("join", help=HELP, description=HELP + (
        " Checks the control plane's CA against the code, makes this node's key here (it never leaves the "
        "machine), gets its certificate, writes agent.yaml and the certificate files, starts the agent and "
        "waits until it has registered. A used, expired or forged code, or one for another CA, is refused "
        "and nothing is written."))
    parser.add_argument("code", metavar="CODE", help="the code `llmgw ctl node join-code` printed")
    parser.add_argument("--name", default="", metavar="NODE",
                        help="the node's name (default: the code's, else this machine's host name)")
    parser.add_argument("--root", default="/", metavar="DIR",
                        help="install under DIR instead of / (etc/llmgw, var/lib/llmgw there; default /)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                        help="how long to wait for the agent to register (default %(default)g)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from llmgw.nodes.join import JoinError, join

    try:
        result = join(args.code, root=args.root, name=args.name, register_timeout=args.timeout,
                      say=lambda line: print(line, flush=True))
    except JoinError as exc:
        print(f"llmgw join: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"this machine is node {result.node} of the cluster", flush=True)
    return 0
