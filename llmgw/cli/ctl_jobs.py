"""`llmgw ctl jobs [ID]`: the models being served or changed, and following one until it ends.

The jobs are the leader's (llmgw/control/jobs.py, `GET /api/v1/jobs`): every
change to a model an operator makes (add, scale, restart, retry), and the
replicas the control plane places by itself, each followed until the model
serves as asked or the change has failed.

With an ID the job's steps are printed, then, while it runs or waits, read
again every second and each new step printed as it comes, until it ends:
exit 0 when it is done, 1 when it failed. `--no-follow` prints it once.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from typing import Any

from llmgw.cli.common import print_json, print_table
from llmgw.cli.ctl_client import AdminClient, CtlError, quote, register_leaf
from llmgw.compat import fromisoformat

__all__ = ["FOLLOW_INTERVAL", "register"]

#: Seconds between reads of a job being followed.
FOLLOW_INTERVAL = 1.0
ACTIVE = ("running", "waiting")


def register(sub) -> None:
    p = sub.add_parser("jobs", help="Models being served or changed; with ID, follow one until it ends.",
                       description="List the jobs of the leading control plane since it started: each model added, "
                       "scaled, restarted or retried, and replicas it placed by itself, with what each is doing now "
                       "and whether it is running, waiting for room on busy cards, done or failed. With ID, print "
                       "that job's steps and follow it, printing each new step, until it ends (exit 0 done, "
                       "1 failed).")
    p.add_argument("job", nargs="?", metavar="ID")
    p.add_argument("--state", choices=("running", "waiting", "done", "failed"), help="only jobs in this state")
    p.add_argument("--model", metavar="NAME", help="only this model's jobs")
    p.add_argument("--no-follow", action="store_true", help="with ID: print the job once, do not follow it")
    register_leaf(p, run_jobs, actor_flag=False)


def run_jobs(args: argparse.Namespace, client: AdminClient) -> int:
    if args.job:
        return _follow(args, client)
    answer = client.get("/jobs", state=args.state, model=args.model)
    if args.json:
        print_json(answer)
        return 0
    jobs = sorted(answer["jobs"], key=lambda j: j["state"] not in ACTIVE)  # running and waiting first
    print_table([{"job": j["id"], "model": j["model"], "kind": j["kind"], "state": j["state"],
                  "started": _when(j["started"]), "by": j["by"], "now": j["now"]} for j in jobs],
                ["job", "model", "kind", "state", "started", "by", "now"])
    return 0


def _follow(args: argparse.Namespace, client: AdminClient) -> int:
    path = f"/jobs/{quote(args.job)}"
    job = client.get(path)
    if args.json:
        print_json(job)
        return 0
    print(f"{job['id']}: {job['kind']} {job['model']}, started {_when(job['started'])} by {job['by']}")
    shown, now = 0, ""
    try:
        while True:
            for step in job["steps"][shown:]:
                first, *more = step["text"].splitlines() or [""]
                print(f"  {_clock(step['at'])}  {first}")
                for line in more:  # an installer's own lines, under the step that quotes them
                    print(f"            {line}")
                now = step["text"]
            shown = len(job["steps"])
            if job["state"] in ACTIVE and args.no_follow:
                print(f"{job['state']}: {job['now']}")
                break
            if job["state"] in ACTIVE and job["now"] != now:
                print(f"            {job['now']}")  # progress between steps: under them, without a time
                now = job["now"]
            sys.stdout.flush()
            if job["state"] not in ACTIVE:
                break
            _wait(FOLLOW_INTERVAL)
            job = client.get(path)
    except KeyboardInterrupt:
        print(f"\nstopped following; {job['id']} carries on (llmgw ctl jobs {job['id']})", file=sys.stderr)
        return 130
    except CtlError as exc:
        raise CtlError(f"{job['id']} could not be followed further: {exc.message}", exc.code) from None
    return 1 if job["state"] == "failed" else 0


def _wait(seconds: float) -> None:
    time.sleep(seconds)


def _time(value: str) -> dt.datetime:
    t = fromisoformat(value)
    return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).astimezone(dt.UTC)


def _when(value: str | None) -> str:
    return _time(value).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _clock(value: Any) -> str:
    return _time(value).strftime("%H:%M:%S")
