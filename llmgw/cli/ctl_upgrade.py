"""`llmgw ctl upgrade RELEASE` and `llmgw ctl upgrade --back`: the control planes and every node's agent to a signed
release, or back to the file before, as a job."""

from __future__ import annotations

import argparse

from llmgw.cli.common import print_json
from llmgw.cli.ctl_client import AdminClient, CtlError, register_leaf

__all__ = ["register", "Patient"]

#: How long following the job waits for a control plane that does not answer (starting itself again).
PATIENCE = 180.0

DESCRIPTION = (
    "Move the control planes and every node's agent to a signed release the mirror holds (`llmgw mirror release "
    "add DIR` put it there), as one job on the leader: the release's SHA256SUMS is checked against server.yaml's "
    "trusted keys; each standby control plane checks its zipapp with its own keys, puts it in place and starts "
    "again, one at a time; then the leader puts its own in place, hands its lease to an upgraded standby (which "
    "carries the job on) and starts again; then one node at a time (or one llmgw.io/rack at a time with --by "
    "rack) is sent the upgrade: its agent fetches its zipapp from the mirror, checks it against the signed sums "
    "with agent.yaml's keys, puts it in place (keeping the one before) and starts again while its engines keep "
    "serving; the next node goes once it is back with the new version and the same engines. The first failure "
    "stops it, saying which control plane or node and why. Follows the job until it ends (exit 0 done, 1 failed) "
    "unless --no-wait, through the control plane asked even as it starts again and becomes a standby.")


def register(sub) -> None:
    p = sub.add_parser("upgrade", help="Upgrade the control planes, then every node's agent, to a signed release.",
                       description=DESCRIPTION)
    p.add_argument("release", nargs="?", default="", metavar="RELEASE",
                   help="the release's version, as `llmgw mirror release list` shows it")
    p.add_argument("--back", action="store_true",
                   help="send everything back to the file it ran before its last upgrade, in the reverse order: "
                        "every node's agent, then the standby control planes, then the leader (handing its lease to "
                        "a standby that went back); refused, nothing moved, when a control plane has no file to go "
                        "back to")
    p.add_argument("--by", choices=("node", "rack"), default="node",
                   help="node: one node at a time (default); rack: every node of one llmgw.io/rack label at once")
    p.add_argument("--rollback", action="store_true",
                   help="at the first failure, send what was upgraded so far (the standby control planes, or the "
                        "nodes) back to the file before")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="how long one control plane or node may take to come back with the new version "
                        "(default 600)")
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

    return ctl_jobs._follow(argparse.Namespace(job=job["id"], json=False, no_follow=False), Patient(client))


class Patient:
    """The admin client, asking again while the control plane does not answer: it starts itself again in the
    middle of the upgrade (a standby then shows the job as the store records it)."""

    def __init__(self, client: AdminClient, patience: float = PATIENCE) -> None:
        self.client = client
        self.patience = patience

    def get(self, path: str, **query):
        import sys
        import time

        deadline = time.monotonic() + self.patience
        said = False
        while True:
            try:
                return self.client.get(path, **query)
            except CtlError as exc:
                if exc.code != 1 or time.monotonic() > deadline:  # a refusal, or too long without an answer
                    raise
                if not said:
                    print(f"            ({self.client.url} does not answer now: {exc.message}; asking again, as it "
                          "may be starting again on the new release)", file=sys.stderr)
                    said = True
                time.sleep(1.0)
