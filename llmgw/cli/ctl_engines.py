"""`llmgw ctl engines [NODE]` and `llmgw ctl engine install NODE ENGINE[==VERSION]`.

`engines` lists what `GET /api/v1/engines` answers: per node, each engine
installation with its version and where it is, and each engine being
installed (with what it does now) or that failed to install (with the
installer's own words). `engine install` asks the node to install one
(`POST /api/v1/nodes/{node}/engines`), then follows the job that does it as
`llmgw ctl jobs ID` does: each step printed as it comes, exit 0 once the
node has it, 1 when the installation failed.
"""

from __future__ import annotations

import argparse
from typing import Any

from llmgw.cli import ctl_jobs
from llmgw.cli.common import print_json, print_table
from llmgw.cli.ctl_client import AdminClient, CtlError, quote, register_leaf, usage_of

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser("engines", help="Each node's engines: installed (version, where), installing, failed.",
                       description="List each node's engines: every installation with its version and where it "
                       "is (default: what a model pinning no engine_version runs there), every one being installed "
                       "with the step it is at, and every one that failed to install, in the installer's words.")
    p.add_argument("node", nargs="?", metavar="NODE", help="only this node's engines")
    register_leaf(p, run_engines, actor_flag=False)

    engine = sub.add_parser("engine", help="Have a node install an engine.",
                            description="Change a node's engines.")
    cmds = engine.add_subparsers(dest="engine_command", metavar="SUBCOMMAND")
    engine.set_defaults(handler=usage_of(engine, "ctl engine"))
    p = cmds.add_parser("install", help="Have a node install an engine, and follow it until it ends.",
                        description="Have NODE's agent install ENGINE (vllm, sglang, trtllm, llamacpp) at VERSION, "
                        "else the newest its package index offers, into an environment of its own under its "
                        "engines_dir; then follow the job doing it, printing each step, until it ends: exit 0 once "
                        "the node has it, 1 when it failed (pip's own words are printed).")
    p.add_argument("node", metavar="NODE")
    p.add_argument("engine", metavar="ENGINE[==VERSION]")
    p.add_argument("--no-follow", action="store_true", help="print the job's id and return at once")
    register_leaf(p, run_engine_install)


def run_engines(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.get("/engines", node=args.node)
    if args.json:
        print_json(answer)
        return 0
    rows = answer["engines"]
    print_table([{"node": r["node"], "engine": r["engine"], "version": r["version"] or "(newest)",
                  "state": r["state"], "where": _where(r)} for r in rows],
                ["node", "engine", "version", "state", "where"])
    for r in rows:
        if r["state"] == "failed" and r["error"]:
            print(f"\n{r['node']}: {r['engine']} could not be installed"
                  + (f" (llmgw ctl jobs {r['job']})" if r["job"] else "") + ":")
            for line in r["error"].splitlines():
                print(f"  {line}")
    return 0


def _where(r: dict[str, Any]) -> str:
    if r["state"] == "installed":
        return (r["path"] or "-") + (" (default)" if r["default"] else "")
    if r["state"] == "failed":
        last = r["error"].strip().splitlines()[-1:] or ["the installer said nothing"]
        return last[0].strip()
    return (r["step"] or r["state"]) + (f" (job {r['job']})" if r["job"] else "")


def run_engine_install(args: argparse.Namespace, client: AdminClient) -> int:
    engine, sep, version = args.engine.partition("==")
    if not engine or (sep and not version):
        raise CtlError(f"ENGINE[==VERSION]: {args.engine!r}: give an engine, like vllm or vllm==0.9.1", 2)
    started = client.post(f"/nodes/{quote(args.node)}/engines", {"engine": engine, "version": version})
    if args.json and args.no_follow:
        print_json(started)
        return 0
    if not args.json:
        print(f"{started['node']}: installing {engine}" + (f" {version}" if version else " (the newest the index "
              "offers)") + f"; job {started['job']}")
    if args.no_follow:
        return 0
    if args.json:  # the job once it has ended
        job = client.get(f"/jobs/{quote(started['job'])}")
        while job["state"] in ctl_jobs.ACTIVE:
            ctl_jobs._wait(ctl_jobs.FOLLOW_INTERVAL)
            job = client.get(f"/jobs/{quote(started['job'])}")
        print_json(job)
        return 1 if job["state"] == "failed" else 0
    return ctl_jobs._follow(argparse.Namespace(job=started["job"], json=False, no_follow=False), client)
