"""`llmgw ctl upgrade RELEASE` and `llmgw ctl upgrade --back`: every node's agent to a signed release, as a job."""

from __future__ import annotations

import argparse

from llmgw.cli.common import print_json
from llmgw.cli.ctl_client import AdminClient, CtlError, register_leaf

__all__ = ["register"]

DESCRIPTION = (
    "Move every node's agent to a signed release the mirror holds (`llmgw mirror release add DIR` put it there), "
    "as one job on the leader: the release's SHA256SUMS is checked against server.yaml's trusted keys, then one "
    "node at a time (or one llmgw.io/rack at a time with --by rack) is sent the upgrade: its agent fetches its "
    "zipapp from the mirror, checks it against the signed sums with agent.yaml's keys, puts it in place (keeping "
    "the one before) and starts again while its engines keep serving; the next node goes once it is back with the "
    "new version and the same engines. The first failure stops it, saying which node and why. Upgrade the control "
    "planes first (docs/upgrades.md). Follows the job until it ends (exit 0 done, 1 failed) unless --no-wait.")


def register(sub) -> None:
    p = sub.add_parser("upgrade", help="Upgrade every node's agent to a signed release, one node at a time.",
                       description=DESCRIPTION)
    p.add_argument("release", nargs="?", default="", metavar="RELEASE",
                   help="the release's version, as `llmgw mirror release list` shows it")
    p.add_argument("--back", action="store_true",
                   help="send every node back to the file it ran before its last upgrade")
    p.add_argument("--by", choices=("node", "rack"), default="node",
                   help="node: one node at a time (default); rack: every node of one llmgw.io/rack label at once")
    p.add_argument("--rollback", action="store_true",
                   help="at the first failure, send the nodes upgraded so far back to the file before")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="how long one node may take to come back with the new version (default 600)")
    p.add_argument("--no-wait", action="store_true", help="print the job and return; do not follow it")
    register_leaf(p, run_upgrade)


def run_upgrade(args: argparse.Namespace, client: AdminClient) -> int:
    if bool(args.release) == bool(args.back):
        raise CtlError("give RELEASE to upgrade to, or --back, one of them", 2)
    job = client.post("/upgrade", {"release": args.release, "back": args.back, "by": args.by,
                                   "rollback": args.rollback, "timeout": args.timeout})
    if args.json:
        print_json(job)
        return 0
    if args.no_wait:
        print(f"{job['model']}: upgrade started; {job['now']}")
        print(f"  job {job['id']}: `llmgw ctl jobs {job['id']}` follows it")
        return 0
    from llmgw.cli import ctl_jobs

    return ctl_jobs._follow(argparse.Namespace(job=job["id"], json=False, no_follow=False), client)
