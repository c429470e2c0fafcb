"""`llmgw join CODE`: make this machine a node of the cluster the join code is from."""

from __future__ import annotations

import argparse
import sys

HELP = "Make this machine a node with a join code from `llmgw ctl node join-code`."


def register(sub) -> None:
    parser = sub.add_parser("join", help=HELP, description=HELP + (
        " Checks the control plane's CA against the code, makes this node's key here (it never leaves the "
        "machine), gets its certificate, writes agent.yaml and the certificate files, starts the agent and "
        "waits until it has registered. It writes the node's firewall table (the engines' ports open to the "
        "control planes only) and applies it with nft -f on the machine itself (not under --root) where nft "
        "is installed. A used, expired or forged code, "
        "or one for another CA, is refused and nothing is written."))
    parser.add_argument("code", metavar="CODE", help="the code `llmgw ctl node join-code` printed")
    parser.add_argument("--name", default="", metavar="NODE",
                        help="the node's name (default: the code's, else this machine's host name)")
    parser.add_argument("--root", default="/", metavar="DIR",
                        help="install under DIR instead of / (etc/llmgw, var/lib/llmgw there; default /)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                        help="how long to wait for the agent to register (default %(default)g)")
    parser.add_argument("--no-firewall", dest="firewall", action="store_false",
                        help="write and apply no firewall table (the engines' ports stay as the machine's own "
                             "firewall has them)")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the code and the control plane's CA, print the files and firewall rules it "
                             "would write, and write nothing; the code is not used up")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from llmgw.nodes.join import JoinError, join, join_dry_run

    try:
        if args.dry_run:
            print(join_dry_run(args.code, root=args.root, name=args.name, firewall=args.firewall,
                               say=lambda line: print(line, flush=True)), end="", flush=True)
            return 0
        result = join(args.code, root=args.root, name=args.name, register_timeout=args.timeout,
                      firewall=args.firewall, say=lambda line: print(line, flush=True))
    except JoinError as exc:
        print(f"llmgw join: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"this machine is node {result.node} of the cluster", flush=True)
    return 0
