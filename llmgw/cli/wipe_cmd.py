"""`llmgw wipe`: take llmgw off this machine, after listing what goes and asking for the machine's name."""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

HELP = "Take llmgw off this machine: its services, configuration, state, certificates, user and firewall table."
DESCRIPTION = (
    "List what llmgw made on this machine (services, the engines its agent left running, configuration, "
    "state, certificates, the llmgw user, the firewall table), ask for the machine's name to be typed, then "
    "stop the services and remove those things. Nothing llmgw did not make is touched."
)


def register(sub) -> None:
    p = sub.add_parser("wipe", help=HELP, description=DESCRIPTION)
    p.add_argument("--yes", "-y", action="store_true", help="do not ask; remove at once")
    p.add_argument("--root", metavar="DIR", default="/", help="the DIR `server init --root` or `join --root` used")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from llmgw.install.layout import Layout
    from llmgw.install.wipe import carry_out, plan_wipe

    layout = Layout(Path(args.root))
    plan = plan_wipe(layout)
    if plan.empty:
        print(f"llmgw wipe: nothing of llmgw's under {layout.root}; nothing to do")
        return 0
    name = socket.gethostname()
    print(f"llmgw wipe will remove from {name}{'' if layout.system else f' (under {layout.root})'}:")
    for line in plan.lines():
        print(f"  {line}")
    if not args.yes:
        if not sys.stdin.isatty():
            print("llmgw wipe: no terminal to confirm on; give --yes to remove without asking", file=sys.stderr)
            return 2
        try:
            typed = input(f"Type this machine's name ({name}) to remove all of it: ").strip()
        except (EOFError, KeyboardInterrupt):
            typed = ""
        if typed != name:
            print("llmgw wipe: the name did not match; nothing was removed", file=sys.stderr)
            return 1
    for sentence in carry_out(plan):
        print(f"  {sentence}")
    print("llmgw wipe: done")
    return 0
