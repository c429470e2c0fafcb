"""`llmgw ctl notify test`: send a test event to server.yaml's notification sinks and say how each answered."""

from __future__ import annotations

import argparse

from llmgw.cli.common import print_json, print_table
from llmgw.cli.ctl_client import AdminClient, register_leaf, usage_of

#: Seconds to wait for every sink's answer: each may take three tries of 10 s and the waits between them.
TEST_TIMEOUT = 120.0


def register(sub) -> None:
    notify = sub.add_parser("notify", help="Test the notification sinks (webhooks, Slack) in server.yaml.",
                            description="Notifications: events that need a person (a model parked, a node lost, "
                            "a budget spent, ...) go to server.yaml's notify.sinks; see docs/notifications.md.")
    cmds = notify.add_subparsers(dest="notify_command", metavar="SUBCOMMAND")
    notify.set_defaults(handler=usage_of(notify, "ctl notify"))
    p = cmds.add_parser("test", help="Send a test event to each sink, or one, and say how each answered.",
                        description="Send a `test` event from the control plane to every sink of server.yaml's "
                        "notify section (or the one --sink names), whatever events each takes, and print how "
                        "each answered: the HTTP status, how long it took, the tries, and why it failed. Exit 1 "
                        "when one failed.")
    p.add_argument("--sink", metavar="NAME",
                   help="only this sink: its name, or sinks[N] (host) for one without a name")
    register_leaf(p, run_test)


def run_test(args: argparse.Namespace, client: AdminClient) -> int:
    client.timeout = max(client.timeout, TEST_TIMEOUT)
    answer = client.post("/notify/test", {"sink": args.sink} if args.sink else {})
    if args.json:
        print_json(answer)
        return 0 if answer["ok"] else 1
    rows = [{"sink": s["sink"], "kind": s["kind"], "answer": "delivered" if s["ok"] else "failed",
             "status": s["status"] if s["status"] is not None else "-", "time": f"{s['seconds']:.2f}s",
             "tries": s["attempts"], "error": s["error"] or "-"} for s in answer["sinks"]]
    print_table(rows, ["sink", "kind", "answer", "status", "time", "tries", "error"])
    return 0 if answer["ok"] else 1
