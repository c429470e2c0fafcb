"""`llmgw ctl federation list`: the peer clusters server.yaml names, whether each is up, and their models.

Peers are declared in server.yaml's `federation.peers` (docs/federation.md);
this asks the admin API (GET /federation/peers) what the gateway made of
them at its last read of each. `--json` prints the API's answer.
"""

from __future__ import annotations

import argparse

from llmgw.cli.common import print_json, print_table
from llmgw.cli.ctl_client import AdminClient, register_leaf, usage_of

__all__ = ["register"]


def register(sub) -> None:
    group = sub.add_parser("federation", help="Other llmgw clusters whose models are served here as PEER/MODEL.",
                           description="The federation peers of server.yaml's federation.peers, as the gateway "
                           "last read them.")
    cmds = group.add_subparsers(dest="federation_cmd", metavar="COMMAND")
    group.set_defaults(handler=usage_of(group, "ctl federation"))
    p = cmds.add_parser("list", help="List the peers: whether each is up, why not, and its models.",
                        description="List the peers server.yaml names: whether the last read of each one's "
                        "/v1/models succeeded, the reason when it did not, and the models it serves (listed "
                        "here as PEER/MODEL). A peer's key is never shown.")
    register_leaf(p, run_list, actor_flag=False)


def run_list(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.get("/federation/peers")
    if args.json:
        print_json(answer)
        return 0
    if not answer["peers"]:
        print(f"cluster {answer['cluster_id']}: no federation peers (server.yaml federation.peers names none)")
        return 0
    print_table([{"peer": p["name"], "state": "up" if p["up"] else "down", "url": p["url"],
                  "models": ", ".join(f"{p['name']}/{m}" for m in p["models"]) or "-",
                  "reason": p["reason"] or "-"} for p in answer["peers"]],
                ["peer", "state", "url", "models", "reason"])
    return 0
