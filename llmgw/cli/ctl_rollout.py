"""`llmgw ctl model serve|update|rollback|canary|promote|abort|canaries` and `llmgw ctl eval run`.

A model's revisions, through the admin API (llmgw/control/rollout.py does
the work on the leader). A quality suite is read here from a YAML or JSON
file and sent with the request, so the control plane needs no copy of it.
Each change answers with its job at once; `--wait` follows the job as
`llmgw ctl jobs ID` does and exits 0 when it is done, 1 when it failed.
"""

from __future__ import annotations

import argparse
from typing import Any

from llmgw.cli.common import print_json, print_table
from llmgw.cli.ctl_client import AdminClient, CtlError, quote, register_leaf, usage_of

__all__ = ["register_eval", "register_model_commands"]

_GATE = ("a quality suite (YAML or JSON: name, threshold, margin, cases of a prompt and exact, contains, regex "
         "or judge) the new revision must pass before it takes traffic")
_WAIT = "follow the job until it ends (exit 0 done, 1 failed), as `llmgw ctl jobs ID` does"


def register_model_commands(cmds) -> None:
    """The subcommands of `ctl model` that change a model's revision."""
    p = cmds.add_parser("update", help="Move a model to a new revision, the old one serving until it is ready.",
                        description="Move a model added at run time to a new revision: it starts beside the "
                        "model as MODEL-canary, taking none of its sessions; once ready and past --gate, it takes "
                        "all of them while the model's replicas restart on the new source, then it goes. A "
                        "failing gate stops the update and the old revision keeps serving. `rollback` returns to "
                        "the old revision within control.rollback_window.")
    p.add_argument("name", metavar="MODEL")
    p.add_argument("--to", required=True, metavar="REVISION",
                   help="the new source, or a revision of the one it has (org/repo@REV; a mirror path's version)")
    p.add_argument("--gate", metavar="SUITE", help=_GATE)
    p.add_argument("--wait", action="store_true", help=_WAIT)
    register_leaf(p, run_update)

    p = cmds.add_parser("serve", help="Fetch, plan, add and start a model, then ask it hello, as one job.",
                        description="Serve a model as one job: a registry repository (org/name[@revision]) is "
                        "fetched into the mirror through its API (mirror.api); its files are planned against the "
                        "cluster's hardware as `ctl model plan` does, the best chosen (or --file), every way it "
                        "fits written as a profile, best first; the model is added to the catalog (llama.cpp for a "
                        "GGUF, vLLM for original weights, unless --engine), started, and asked to say hello. "
                        "SOURCE may also be a model already on the mirror: MODEL[/VERSION[/FILE]] or its URL.")
    p.add_argument("source", metavar="SOURCE")
    p.add_argument("--name", default="", help="the catalog name (default: the mirror's name for the model)")
    p.add_argument("--files", action="append", default=[], metavar="PATTERN",
                   help="fetch only the repository's files matching PATTERN, like '*Q4_K_M*' (again for more)")
    p.add_argument("--file", default="", metavar="FILE", help="serve this file of the version, not the plan's best")
    p.add_argument("--context", type=int, metavar="N",
                   help="tokens of context each sequence holds (default: the model's, at most 8192)")
    p.add_argument("--concurrency", type=int, default=1, metavar="N",
                   help="sequences held at once, each with the whole context, in the plan (default 1)")
    p.add_argument("--engine", default="", help="the engine (default: llamacpp for a GGUF, vllm for original weights)")
    p.add_argument("--wait", action="store_true", help=_WAIT)
    register_leaf(p, run_serve)

    p = cmds.add_parser("rollback", help="Return a model to the revision its last update replaced.",
                        description="Return a model to the definition its last update or promotion replaced "
                        "(kept for control.rollback_window); its replicas are replaced one at a time, each new "
                        "one ready before an old one stops.")
    p.add_argument("name", metavar="MODEL")
    p.add_argument("--wait", action="store_true", help=_WAIT)
    register_leaf(p, run_rollback)

    p = cmds.add_parser("canary", help="Try a newer revision on a share of a model's sessions, or change the share.",
                        description="With --to, run the newer revision beside the model as MODEL-canary; once "
                        "ready and past --gate it takes --weight of the model's sessions, each session always on "
                        "the same side (a request may ask for a side with x-llmgw-variant: canary or stable). "
                        "Without --to, give the running canary a new --weight.")
    p.add_argument("name", metavar="MODEL")
    p.add_argument("--to", metavar="REVISION", help="the canary's source, or a revision of the model's")
    p.add_argument("--weight", metavar="PERCENT", help="its share of the model's sessions, like 10%% (default 10%%)")
    p.add_argument("--replicas", type=int, default=1, metavar="N", help="replicas of the canary (default 1)")
    p.add_argument("--gate", metavar="SUITE", help=_GATE)
    p.add_argument("--wait", action="store_true", help=_WAIT)
    register_leaf(p, run_canary)

    p = cmds.add_parser("promote", help="Move a model to its canary's revision, and remove the canary.",
                        description="Move a model to its canary's revision: after --gate (a failing one leaves "
                        "both as they are), the canary takes every session while the model's replicas restart on "
                        "its revision, then it goes.")
    p.add_argument("name", metavar="MODEL")
    p.add_argument("--gate", metavar="SUITE", help=_GATE)
    p.add_argument("--wait", action="store_true", help=_WAIT)
    register_leaf(p, run_promote)

    p = cmds.add_parser("abort", help="Take a model's canary out.",
                        description="Take a model's canary out: its replicas stop and the model takes every "
                        "session again.")
    p.add_argument("name", metavar="MODEL")
    register_leaf(p, run_abort)

    p = cmds.add_parser("canaries", help="List canaries.",
                        description="List every canary: the model it is of, its revision, its share of the "
                        "model's sessions and how many of its replicas are ready.")
    register_leaf(p, run_canaries, actor_flag=False)


def register_eval(sub) -> None:
    """`ctl eval run MODEL SUITE`."""
    group = sub.add_parser("eval", help="Ask a model a quality suite.",
                           description="Quality suites: prompts with expected answers, asked of a model's replicas.")
    cmds = group.add_subparsers(dest="eval_command", metavar="SUBCOMMAND")
    group.set_defaults(handler=usage_of(group, "ctl eval"))
    p = cmds.add_parser("run", help="Ask a model's ready replicas a quality suite now and score it.",
                        description="Ask a model's ready replicas every case of SUITE (a YAML or JSON file) and "
                        "print each case and the score; exit 0 when the score reaches the suite's threshold, 1 "
                        "when it does not.")
    p.add_argument("name", metavar="MODEL")
    p.add_argument("suite", metavar="SUITE")
    register_leaf(p, run_eval, actor_flag=False)


def read_suite(path: str) -> dict[str, Any]:
    from llmgw.cli.ctl_client import load_yaml_file

    suite = load_yaml_file(path)
    if not isinstance(suite, dict):
        raise CtlError(f"{path}: expected a quality suite (a mapping with name, threshold and cases)", 2)
    return suite


def _gate(args: argparse.Namespace) -> dict[str, Any] | None:
    return read_suite(args.gate) if getattr(args, "gate", None) else None


def _started(args: argparse.Namespace, client: AdminClient, job: dict[str, Any]) -> int:
    if args.wait and not args.json:
        from llmgw.cli import ctl_jobs

        follow = argparse.Namespace(job=job["id"], json=False, no_follow=False)
        return ctl_jobs._follow(follow, client)
    if args.json:
        print_json(job)
        return 0
    print(f"{job['model']}: {job['kind']} started; {job['now']}")
    print(f"  job {job['id']}: `llmgw ctl jobs {job['id']}` follows it")
    return 0


def run_update(args: argparse.Namespace, client: AdminClient) -> int:
    body = {"to": args.to, "gate": _gate(args)}
    return _started(args, client, client.post(f"/models/{quote(args.name)}/update", body))


def run_serve(args: argparse.Namespace, client: AdminClient) -> int:
    if args.context is not None and args.context < 1 or args.concurrency < 1:
        raise CtlError("--context and --concurrency: 1 or more", 2)
    body = {"source": args.source, "name": args.name, "files": args.files, "file": args.file,
            "context": args.context, "concurrency": args.concurrency, "engine": args.engine}
    return _started(args, client, client.post("/model-serve", body))


def run_rollback(args: argparse.Namespace, client: AdminClient) -> int:
    return _started(args, client, client.post(f"/models/{quote(args.name)}/rollback"))


def run_canary(args: argparse.Namespace, client: AdminClient) -> int:
    if args.to is None:
        if args.weight is None:
            raise CtlError("ctl model canary: give --to REVISION to start a canary, or --weight to change its share",
                           2)
        canary = client.request("PATCH", f"/models/{quote(args.name)}/canary", body={"weight": args.weight})
        _print_canary(args, canary, "now takes")
        return 0
    body = {"to": args.to, "weight": args.weight or "10%", "replicas": args.replicas, "gate": _gate(args)}
    return _started(args, client, client.post(f"/models/{quote(args.name)}/canary", body))


def run_promote(args: argparse.Namespace, client: AdminClient) -> int:
    return _started(args, client, client.post(f"/models/{quote(args.name)}/canary/promote", {"gate": _gate(args)}))


def run_abort(args: argparse.Namespace, client: AdminClient) -> int:
    canary = client.request("DELETE", f"/models/{quote(args.name)}/canary")
    if args.json:
        print_json(canary)
    else:
        print(f"{canary['name']}: taken out; {canary['model']} takes every session again")
    return 0


def _print_canary(args: argparse.Namespace, canary: dict[str, Any], verb: str) -> None:
    if args.json:
        print_json(canary)
        return
    print(f"{canary['name']}: {verb} {canary['weight']:g}% of {canary['model']}'s sessions")


def run_canaries(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.get("/canaries")
    if args.json:
        print_json(answer)
        return 0
    print_table([{"model": c["model"], "canary": c["name"], "revision": c["revision"],
                  "share": f"{c['weight']:g}%" + ("" if c["serving"] else " (not serving yet)"),
                  "ready": f"{c['ready']}/{c['replicas']}", "by": c["by"]} for c in answer["canaries"]],
                ["model", "canary", "revision", "share", "ready", "by"])
    return 0


def run_eval(args: argparse.Namespace, client: AdminClient) -> int:
    result = client.post(f"/models/{quote(args.name)}/eval", {"suite": read_suite(args.suite)})
    if args.json:
        print_json(result)
    else:
        for case in result["cases"]:
            print(f"  {'pass' if case['passed'] else 'FAIL'}  {case['id']}" + (f": {case['why']}" if case["why"]
                                                                              else ""))
        print(f"{result['model']} scored {result['score']:.2f} on {result['suite']} ({result['passed']} of "
              f"{result['total']} cases passed; the threshold is {result['threshold']:.2f})")
    return 0 if result["reached"] else 1
