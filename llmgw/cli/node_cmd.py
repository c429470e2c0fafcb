"""`llmgw node add [user@]host`: make a machine a node over SSH, from a control plane."""

from __future__ import annotations

import argparse
import sys

from llmgw.cli.ctl_client import AdminClient, CtlError, add_client_arguments, quote

HELP = "Add a machine as a node over SSH: checks it, copies this file there and joins it with a fresh code."


def register(sub) -> None:
    parser = sub.add_parser("node", help=HELP, description=HELP)
    cmds = parser.add_subparsers(dest="node_command", metavar="COMMAND")
    from llmgw.cli.ctl_client import usage_of

    parser.set_defaults(handler=usage_of(parser, "node"))
    p = cmds.add_parser("add", help=HELP, description=(
        "Add a machine as a node over SSH (the system's ssh, in batch mode: your keys, ssh agent and "
        "~/.ssh/config apply). It checks the machine first: reachable, root or sudo without a password, Linux "
        "on this file's architecture, a Python 3.10 to 3.13, systemd or not (without it the agent is started "
        "directly). Then it copies this llmgw.pyz there, runs `llmgw join` with a fresh join code (the node's "
        "key is made on the node), removes the copy, and waits until the node has registered and reported "
        "its hardware. Run it where the admin API is reachable (the control plane)."))
    p.add_argument("target", metavar="[USER@]HOST", help="the machine, as ssh takes it")
    p.add_argument("--port", type=int, default=22, help="its SSH port (default %(default)s)")
    p.add_argument("--identity", "-i", metavar="FILE", help="the SSH private key to log in with")
    p.add_argument("--name", default="", metavar="NODE", help="the node's name (default: its short host name)")
    p.add_argument("--root", default="/", metavar="DIR",
                   help="install under DIR on the machine instead of / (default /)")
    p.add_argument("--ssh-option", "-o", action="append", default=[], metavar="OPTION",
                   help="an ssh option, as ssh -o takes it (repeat for each), like ProxyJump=bastion")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                   help="how long to wait for the node to register and report its hardware (default %(default)g)")
    p.add_argument("--no-firewall", dest="firewall", action="store_false",
                   help="join with --no-firewall: no firewall table is written or applied on the node")
    p.add_argument("--dry-run", action="store_true",
                   help="check the machine, then run join's dry run there: it prints the files and firewall "
                        "rules it would write and writes nothing (the join code made for it is revoked)")
    add_client_arguments(p, json_flag=False)
    p.set_defaults(handler=run_add)


def run_add(args: argparse.Namespace) -> int:
    from llmgw.nodes.ssh_add import AddError, add_node

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        client = AdminClient.from_args(args)

        def get_node(name: str) -> dict | None:
            try:
                return client.get(f"/nodes/{quote(name)}")
            except CtlError:  # not registered yet, or a moment without the API: asked again
                return None

        add_node(args.target, port=args.port, identity=args.identity, ssh_options=args.ssh_option, name=args.name,
                 root=args.root, timeout=args.timeout, say=say, firewall=args.firewall, dry_run=args.dry_run,
                 revoke_code=lambda code_id: client.request("DELETE", f"/nodes/join-codes/{quote(code_id)}"),
                 make_code=lambda name: client.post("/nodes/join-codes", {"ttl": "15m", "name": name}),
                 get_node=get_node)
    except (AddError, CtlError) as exc:
        message = exc.message if isinstance(exc, CtlError) else str(exc)
        print(f"llmgw node add: {message}", file=sys.stderr, flush=True)
        return 1
    return 0
