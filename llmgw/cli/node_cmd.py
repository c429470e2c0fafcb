"""`llmgw node add [user@]host`: make a machine a node over SSH, from a control plane."""

from __future__ import annotations

import argparse
import sys
import time

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
    add_client_arguments(p, json_flag=False)
    p.set_defaults(handler=run_add)


def run_add(args: argparse.Namespace) -> int:
    from llmgw.nodes.ssh_add import AddError, SshNodeAdder, parse_target, pyz_to_copy

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        client = AdminClient.from_args(args)
        target = parse_target(args.target, args.port)
        adder = SshNodeAdder(target, identity=args.identity, ssh_options=args.ssh_option, say=say)
        probe = adder.check()
        name = args.name or probe.hostname.split(".")[0]
        if not name:
            raise AddError(f"{target.host} did not say its host name; give one with --name")
        pyz = pyz_to_copy(say)
        code = client.post("/nodes/join-codes", {"ttl": "15m", "name": name})
        say(f"made join code {code['id']} for node {name} (works once, 15 minutes)")
        adder.install(probe, pyz, code["code"], name=name, root=args.root, timeout=args.timeout + 60)
        node = _wait_ready(client, name, args.timeout, say)
    except (AddError, CtlError) as exc:
        message = exc.message if isinstance(exc, CtlError) else str(exc)
        print(f"llmgw node add: {message}", file=sys.stderr, flush=True)
        return 1
    gpus = node.get("gpus") or []
    say(f"node {name} is ready: {node.get('cores', 0)} cores, {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}, "
        f"{node.get('memory_total_bytes', 0) / 2**30:.1f} GiB memory")
    return 0


def _wait_ready(client: AdminClient, name: str, timeout: float, say) -> dict:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            node = client.get(f"/nodes/{quote(name)}")
        except CtlError as exc:
            last = exc.message
        else:
            if node.get("state") == "ready" and node.get("cores", 0) > 0:
                return node
            last = f"state {node.get('state')}"
        time.sleep(0.5)
    raise CtlError(f"node {name} joined but the control plane has not seen it ready with its hardware within "
                   f"{timeout:g} s ({last}); `llmgw ctl node logs {name}` or its agent log says why", 1)
