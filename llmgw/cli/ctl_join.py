"""`llmgw ctl node join-code` and `join-codes`: codes a machine joins the cluster with (`llmgw join CODE`)."""

from __future__ import annotations

import argparse
from typing import Any

from llmgw.cli.common import print_json, print_table
from llmgw.cli.ctl_client import AdminClient, quote, register_leaf

__all__ = ["register_join_codes"]


def register_join_codes(cmds: Any) -> None:
    """`join-code`, `join-codes` and `join-code-revoke` under `ctl node`."""
    p = cmds.add_parser("join-code", help="Make a single-use code a machine joins with (`llmgw join CODE`).",
                        description="Make a single-use join code: it holds the control planes' agent addresses, "
                        "the SHA-256 of the cluster's CA and a secret. Run the line it prints on the machine; "
                        "the code works once, until --ttl is over. It is shown only now.")
    p.add_argument("--ttl", default="1h", help="how long the code works, 1m to 7d (default %(default)s)")
    p.add_argument("--name", default="", metavar="NODE",
                   help="the node's name the code is for (default: the machine's host name, or join's --name)")
    register_leaf(p, run_join_code)
    p = cmds.add_parser("join-codes", help="List the join codes that still work (never their secrets).",
                        description="List the join codes not yet used nor expired: id, node name, who made it, "
                        "when it expires. The codes themselves are not kept, only their secrets' hashes.")
    register_leaf(p, run_join_codes, actor_flag=False)
    p = cmds.add_parser("join-code-revoke", help="Make a join code stop working now.",
                        description="Make a join code stop working before it expires.")
    p.add_argument("code", metavar="ID", help="the code's id, as `ctl node join-codes` lists it")
    register_leaf(p, run_join_code_revoke)


def run_join_code(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.post("/nodes/join-codes", {"ttl": args.ttl, "name": args.name})
    if args.json:
        print_json(answer)
        return 0
    print(answer["code"])
    print()
    print(f"On the machine, within {args.ttl} (until {answer['expires_at']}), run:")
    print(f"  {answer['command']}")
    print(f"It dials {', '.join(answer['addresses'])} and trusts only the CA whose SHA-256 is "
          f"{answer['ca_sha256']}. The code works once.")
    return 0


def run_join_codes(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.get("/nodes/join-codes")
    if args.json:
        print_json(answer)
        return 0
    codes = answer["codes"]
    if not codes:
        print("no join codes that still work; make one with `llmgw ctl node join-code`")
        return 0
    rows = [{"id": c["id"], "node": c["name"] or "(its choice)", "expires": c["expires_at"], "made by": c["created_by"]}
            for c in codes]
    print_table(rows, ["id", "node", "expires", "made by"])
    return 0


def run_join_code_revoke(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.request("DELETE", f"/nodes/join-codes/{quote(args.code)}")
    if args.json:
        print_json(answer)
        return 0
    print(f"join code {answer['id']} revoked: it no longer works")
    return 0
