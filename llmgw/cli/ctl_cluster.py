"""`llmgw ctl status|nodes|node|cordon|uncordon|drain|models|model|explain-placement|replicas|replica`.

`ctl model plan` reads a model's shape here (llmgw/mirror/plan.py) and fits it
to the nodes the admin API lists; `ctl model updates` shows the leader's
update checks (llmgw/mirror/updates.py).

The fleet, through the admin API: tables for people, `--json` for scripts.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from llmgw.cli.common import print_json, print_table
from llmgw.cli.ctl_client import AdminClient, CtlError, quote, register_leaf, usage_of
from llmgw.cli.ctl_logs import register_node_logs
from llmgw.cli.ctl_join import register_join_codes
from llmgw.cli.ctl_rollout import register_eval, register_model_commands


def register(sub) -> None:
    p = sub.add_parser("status", help="The cluster at a glance: nodes, GPUs, replicas, models, the day's use.",
                       description="The cluster at a glance: which control plane leads, nodes by state, GPUs by "
                       "class, replicas, models and those that need a look, and the last 24 hours' use.")
    register_leaf(p, run_status)

    p = sub.add_parser("nodes", help="List nodes, or show one.", description="List every node with its state, "
                       "GPUs, load, replicas and engines with their versions; with NODE, everything about that one.")
    p.add_argument("node", nargs="?", metavar="NODE")
    register_leaf(p, run_nodes)

    node = sub.add_parser("node", help="Remove a node, set its labels, or read its log.",
                          description="Change a node: take it out of the cluster, or set its labels; or read "
                          "its agent's log.")
    cmds = node.add_subparsers(dest="node_command", metavar="SUBCOMMAND")
    node.set_defaults(handler=usage_of(node, "ctl node"))
    p = cmds.add_parser("remove", help="Forget a node and revoke its certificate (the machine is not touched).",
                        description="Forget a node: the control plane stops counting it, closes its agent's "
                        "connection and revokes its certificate, so it cannot register again until it joins "
                        "again with a new code; the machine is not touched. Refused while replicas run there: "
                        "drain it first.")
    p.add_argument("node", metavar="NODE")
    register_leaf(p, run_node_remove)
    p = cmds.add_parser("label", help="Set labels (key=value) or take them off (key-).",
                        description="Set labels on a node (key=value) or take them off (key-); placement "
                        "selects and spreads by them (llmgw.io/rack and the like).")
    p.add_argument("node", metavar="NODE")
    p.add_argument("labels", nargs="+", metavar="KEY=VALUE|KEY-")
    register_leaf(p, run_node_label)
    register_node_logs(cmds)
    register_join_codes(cmds)

    for name, text in (("cordon", "Place nothing new on a node; what runs there stays."),
                       ("drain", "Move a node's replicas off, one at a time, each replacement up first."),
                       ("uncordon", "Undo cordon or drain (what has moved stays moved).")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("node", metavar="NODE")
        if name != "uncordon":
            p.add_argument("--reason", default="", help="why, for `ctl nodes` and the audit log")
        p.set_defaults(node_action=name)
        register_leaf(p, run_node_action)

    p = sub.add_parser("models", help="List the catalog, or show one model with its defaults filled in.",
                       description="List every model: status, ready against wanted, class and scaling; with "
                       "NAME, its whole definition with every default filled in, and its replicas.")
    p.add_argument("name", nargs="?", metavar="NAME")
    register_leaf(p, run_models)

    model = sub.add_parser("model", help="Add, remove, scale or restart a model.",
                           description="Change the catalog: add a model from a definition file, remove one "
                           "added that way, change how many replicas run, restart its replicas.")
    cmds = model.add_subparsers(dest="model_command", metavar="SUBCOMMAND")
    model.set_defaults(handler=usage_of(model, "ctl model"))
    p = cmds.add_parser("add", help="Add a model from a YAML file written as in server.yaml.",
                        description="Add a model from FILE (- reads standard input): one model, written as a "
                        "model is in server.yaml's models: list.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--replace", action="store_true", help="replace a model of that name added earlier")
    register_leaf(p, run_model_add)
    p = cmds.add_parser("remove", help="Remove a model added through the API; its replicas stop.",
                        description="Remove a model added through the API (one from server.yaml is removed "
                        "there); its replicas stop.")
    p.add_argument("name", metavar="NAME")
    register_leaf(p, run_model_remove)
    p = cmds.add_parser("scale", help="Change how many replicas run.",
                        description="Change how many replicas of a model run. Options left out keep their "
                        "value; --max 0 stops the model without removing it.")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--min", type=int, help="replicas kept running at all times")
    p.add_argument("--max", type=int, help="most replicas run; 0 stops it")
    p.add_argument("--on-demand", action=argparse.BooleanOptionalAction, default=None,
                   help="start the first replica at a request and stop the last when idle (min must be 0)")
    p.add_argument("--idle-timeout", metavar="DURATION", help="how long a replica above min may sit unused, like 30m")
    register_leaf(p, run_model_scale)
    p = cmds.add_parser("restart", help="Restart a model's replicas, one at a time.",
                        description="Restart every replica of a model, one at a time: a replacement first, or "
                        "with --in-place each where it is.")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--in-place", action="store_true", help="stop and start each where it is")
    register_leaf(p, run_model_restart)
    p = cmds.add_parser("retry", help="Start a parked model again now.",
                        description="Start a model parked after failing every start again now: its failed "
                        "starts are forgotten and the next pass places it (`llmgw ctl explain-placement NAME` "
                        "says why it was parked). A model backing off is tried at once too.")
    p.add_argument("name", metavar="NAME")
    register_leaf(p, run_model_retry)
    p = cmds.add_parser("plan", help="Where each file of a model fits in this cluster, the best first.",
                        description="Read a model's shape (a GGUF's header, or config.json) and list each file "
                        "(each GGUF quantisation) with the memory it needs (weights and KV cache) and where it "
                        "fits in this cluster: one card, several cards of a node, several nodes, a CPU node; "
                        "whether that hardware is free now, and why, the best marked with a star. SOURCE is a "
                        ".gguf file, a directory with config.json and safetensors (or GGUFs), or a model on the "
                        "mirror: MODEL[/VERSION[/FILE]] or its URL.")
    p.add_argument("source", metavar="SOURCE")
    p.add_argument("--context", type=int, metavar="N",
                   help="tokens of context each sequence holds (default: the model's, at most 8192)")
    p.add_argument("--concurrency", type=int, default=1, metavar="N",
                   help="sequences held at once, each with the whole context (default 1)")
    p.add_argument("--mirror", metavar="URL",
                   help=f"the mirror's file server, for a SOURCE on it (default ${ENV_MIRROR})")
    register_leaf(p, run_model_plan, actor_flag=False)
    p = cmds.add_parser("updates", help="Served models whose registry repository has new files.",
                        description="List every model served from the mirror with what the leader's last update "
                        "check (mirror.update_check) found: up to date, or newer files (and which), from the "
                        "repository its weights were fetched from. --check asks now.")
    p.add_argument("--check", action="store_true", help="ask the mirror or the registry now")
    register_leaf(p, run_model_updates)
    register_model_commands(cmds)
    register_eval(sub)

    p = sub.add_parser("explain-placement", help="Why a model runs where it does, or does not run.",
                       description="Why a model runs where it does, or does not run: its status, replicas, the "
                       "last placement with each node's rejection, failed starts, and where its next replica "
                       "would go now.")
    p.add_argument("name", metavar="MODEL")
    register_leaf(p, run_explain)

    p = sub.add_parser("replicas", help="List replicas.", description="List every replica: model, node, state, "
                       "GPUs and how long it has been so.")
    p.add_argument("--model", help="only this model's")
    register_leaf(p, run_replicas)

    replica = sub.add_parser("replica", help="Restart one replica.",
                             description="Change one replica (`llmgw ctl replicas` lists them): restart it.")
    cmds = replica.add_subparsers(dest="replica_command", metavar="SUBCOMMAND")
    replica.set_defaults(handler=usage_of(replica, "ctl replica"))
    p = cmds.add_parser("restart", help="Restart one replica: a replacement first, or in place.",
                        description="Restart one replica: a replacement starts first and the replica stops once "
                        "it is ready, or with --in-place it stops and a new one starts. The model's other "
                        "replicas are not touched.")
    p.add_argument("replica", metavar="ID")
    p.add_argument("--in-place", action="store_true", help="stop it, then start a new one")
    register_leaf(p, run_replica_restart)


# ---------------------------------------------------------------- status


def run_status(args: argparse.Namespace, client: AdminClient) -> int:
    s = client.get("/summary")
    if args.json:
        print_json(s)
        return 0
    print(f"llmgw {s['version']}, store {s['store']}")
    c = s["cluster"]
    if c is None:
        print(f"scheduler: {s['scheduler']}")
    else:
        print(f"control plane: {'leading' if c['leading'] else 'standby; the leader is ' + str(c['leader'])}")
        print(f"nodes: {_counts(c['nodes'])}")
        gpus = ", ".join(f"{g['class']} {g['in_use']}/{g['total']} in use"
                         + (f" ({g['total'] - g['healthy']} unhealthy)" if g["healthy"] < g["total"] else "")
                         for g in c["gpus"])
        print(f"GPUs: {gpus or 'none'}")
        print(f"replicas: {_counts(c['replicas'])}")
        print(f"models: {_counts(c['models'])}")
        for line in c["attention"]:
            print(f"  {line['name']}: {line['status']}: {line['reason']}")
    from llmgw.accounting.prices import format_money

    print(f"last 24h: {s['requests_24h']} requests, {s['tokens_24h']} tokens, "
          f"{format_money(s['cost_micros_24h'], s['currency'])}")
    return 0


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "none"


# ---------------------------------------------------------------- nodes


def _gib(n: int) -> str:
    return f"{n / 2**30:.0f}GiB"


def run_nodes(args: argparse.Namespace, client: AdminClient) -> int:
    if args.node:
        node = client.get(f"/nodes/{quote(args.node)}")
        if args.json:
            print_json(node)
            return 0
        _print_node(node)
        return 0
    nodes = client.get("/nodes")
    if args.json:
        print_json(nodes)
        return 0
    rows = [{"node": n["id"], "state": n["state"], "address": n["address"],
             "gpus": ", ".join(sorted({g["class"] for g in n["gpus"]})) + (f" x{len(n['gpus'])}" if n["gpus"] else "")
             or "-", "cores": n["cores"], "memory": _gib(n["memory_total_bytes"]),
             "replicas": len(n["replicas"]), "agent": n["agent_version"],
             "engines": ", ".join(f"{k} {v}" for k, v in sorted(n["engines"].items())) or "-"}
            for n in nodes["nodes"]]
    print_table(rows, ["node", "state", "address", "gpus", "cores", "memory", "replicas", "agent", "engines"])
    return 0


def _print_node(n: dict[str, Any]) -> None:
    print(f"{n['id']}: {n['state']}" + (f" ({n['cordon_reason']})" if n["cordon_reason"] else ""))
    print(f"  address {n['address']}, host {n['hostname']}, agent {n['agent_version'] or '?'}")
    print(f"  {n['cores']} cores, {_gib(n['memory_total_bytes'])} memory ({_gib(n['memory_available_bytes'])} free)")
    for g in n["gpus"]:
        print(f"  gpu {g['index']}: {g['class']} {g['name']} {_gib(g['memory_total_bytes'])} {g['health']}")
    if n["labels"]:
        print("  labels: " + ", ".join(f"{k}={v}" for k, v in sorted(n["labels"].items())))
    if n["engines"]:
        print("  engines: " + ", ".join(f"{k} {v}" for k, v in sorted(n["engines"].items())))
    print("  replicas: " + (", ".join(n["replicas"]) or "none"))


def run_node_action(args: argparse.Namespace, client: AdminClient) -> int:
    body = {"reason": args.reason} if args.node_action != "uncordon" else None
    node = client.post(f"/nodes/{quote(args.node)}/{args.node_action}", body)
    if args.json:
        print_json(node)
    else:
        print(f"{node['id']}: {node['state']}")
    return 0


def run_node_remove(args: argparse.Namespace, client: AdminClient) -> int:
    node = client.request("DELETE", f"/nodes/{quote(args.node)}")
    print_json(node) if args.json else print(f"{node['id']}: removed from the cluster")
    return 0


def run_node_label(args: argparse.Namespace, client: AdminClient) -> int:
    labels: dict[str, str | None] = {}
    for item in args.labels:
        if item.endswith("-") and "=" not in item:
            labels[item[:-1]] = None
        elif "=" in item:
            key, _, value = item.partition("=")
            labels[key] = value
        else:
            raise CtlError(f"{item!r}: give KEY=VALUE to set a label or KEY- to take it off", 2)
    node = client.request("PATCH", f"/nodes/{quote(args.node)}/labels", body={"labels": labels})
    if args.json:
        print_json(node)
    else:
        print(f"{node['id']}: " + (", ".join(f"{k}={v}" for k, v in sorted(node["labels"].items())) or "no labels"))
    return 0


# ---------------------------------------------------------------- models


def _model_rows(models: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"model": m["name"], "status": m["status"], "ready": f"{m['ready']}/{m['wanted']}",
             "min": m["scaling"]["min"], "max": m["scaling"]["max"], "class": m["class"], "origin": m["origin"],
             "owner": m["owner"]} for m in models]


def run_models(args: argparse.Namespace, client: AdminClient) -> int:
    if args.name:
        detail = client.get(f"/models/{quote(args.name)}")
        if args.json:
            print_json(detail)
            return 0
        _print_model(detail)
        return 0
    models = client.get("/models")
    if args.json:
        print_json(models)
        return 0
    print_table(_model_rows(models["models"]), ["model", "status", "ready", "min", "max", "class", "origin", "owner"])
    return 0


def _print_model(detail: dict[str, Any]) -> None:
    from ruamel.yaml import YAML

    m = detail["model"]
    print(f"{m['name']}: {m['status']} ({m['reason']}); origin {m['origin']}")
    for problem in m["problems"]:
        print(f"  problem: {problem}")
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.dump(detail["spec"], sys.stdout)
    for r in detail["replicas"]:
        print(f"  replica {r['id']} on {r['node']}: {r['state']}")


def _read_model_file(path: str) -> dict[str, Any]:
    from llmgw.cli.ctl_client import load_yaml_file

    spec = load_yaml_file(path)
    if isinstance(spec, list) and len(spec) == 1:
        spec = spec[0]
    if isinstance(spec, dict) and list(spec) == ["models"] and isinstance(spec["models"], list) \
            and len(spec["models"]) == 1:
        spec = spec["models"][0]
    if not isinstance(spec, dict):
        raise CtlError(f"{path}: expected one model, written as in server.yaml's models: list", 2)
    return spec


def _print_detail(args: argparse.Namespace, detail: dict[str, Any], verb: str) -> None:
    if args.json:
        print_json(detail)
        return
    m = detail["model"]
    s = m["scaling"]
    print(f"{m['name']}: {verb}; {m['status']}, {m['ready']}/{m['wanted']} ready (min {s['min']}, max {s['max']}"
          + (", on demand" if s["on_demand"] else "") + ")")
    if detail.get("job") and verb in ("added", "scaled"):
        print(f"  job {detail['job']}: `llmgw ctl jobs {detail['job']}` follows it")


def run_model_add(args: argparse.Namespace, client: AdminClient) -> int:
    spec = _read_model_file(args.file)
    _print_detail(args, client.post("/models", spec, replace=args.replace or None), "added")
    return 0


def run_model_remove(args: argparse.Namespace, client: AdminClient) -> int:
    _print_detail(args, client.request("DELETE", f"/models/{quote(args.name)}"), "removed")
    return 0


def run_model_scale(args: argparse.Namespace, client: AdminClient) -> int:
    body = {k: v for k, v in (("min", args.min), ("max", args.max), ("on_demand", args.on_demand),
                              ("idle_timeout", args.idle_timeout)) if v is not None}
    if not body:
        raise CtlError("ctl model scale: give --min, --max, --on-demand/--no-on-demand or --idle-timeout", 2)
    _print_detail(args, client.post(f"/models/{quote(args.name)}/scale", body), "scaled")
    return 0


def run_model_restart(args: argparse.Namespace, client: AdminClient) -> int:
    _print_restart(args, client.post(f"/models/{quote(args.name)}/restart", {"in_place": args.in_place}))
    return 0


def run_model_retry(args: argparse.Namespace, client: AdminClient) -> int:
    _print_detail(args, client.post(f"/models/{quote(args.name)}/retry"), "retried")
    return 0


def run_replica_restart(args: argparse.Namespace, client: AdminClient) -> int:
    _print_restart(args, client.post(f"/replicas/{quote(args.replica)}/restart", {"in_place": args.in_place}))
    return 0


def _print_restart(args: argparse.Namespace, result: dict[str, Any]) -> None:
    if args.json:
        print_json(result)
        return
    print(f"{result['model']}: restarting {', '.join(result['replicas']) or 'nothing (no replica runs)'}")
    if result.get("job"):
        print(f"  job {result['job']}: `llmgw ctl jobs {result['job']}` follows it")


ENV_MIRROR = "LLMGW_MIRROR_URL"


def _plan_shapes(args: argparse.Namespace) -> tuple[str, list]:
    import asyncio
    import os

    from llmgw.mirror import plan
    from llmgw.mirror.client import MirrorClient, MirrorError

    if os.path.exists(args.source):
        try:
            return args.source, plan.shapes_from_path(args.source)
        except plan.PlanError as exc:
            raise CtlError(str(exc), 2) from None
    base = args.mirror or os.environ.get(ENV_MIRROR, "").strip()
    if args.source.startswith(("http://", "https://")):
        from urllib.parse import urlsplit

        parts = urlsplit(args.source)
        base = f"{parts.scheme}://{parts.netloc}"
    if not base:
        raise CtlError(f"{args.source}: no such file or directory here; for a model on the mirror give --mirror URL "
                       f"(or ${ENV_MIRROR}), like http://models.internal:8081", 2)

    async def read() -> tuple[str, list]:
        async with MirrorClient(base) as client:
            return await plan.shapes_from_mirror(client, args.source)

    try:
        return asyncio.run(read())
    except (plan.PlanError, MirrorError) as exc:
        raise CtlError(str(exc), 2) from None
    except (OSError, ValueError) as exc:
        raise CtlError(f"cannot read {args.source} from the mirror at {base}: {exc}", 1) from None


def run_model_plan(args: argparse.Namespace, client: AdminClient) -> int:
    from llmgw.mirror import plan

    if args.context is not None and args.context < 1 or args.concurrency < 1:
        raise CtlError("--context and --concurrency: 1 or more", 2)
    source, shapes = _plan_shapes(args)
    machines = plan.machines_from_api(client.get("/nodes")["nodes"], client.get("/replicas")["replicas"])
    result = plan.plan(source, shapes, machines, context=args.context, concurrency=args.concurrency)
    if args.json:
        print_json(result.to_json())
    else:
        sys.stdout.write(plan.render_text(result))
    return 0


def run_model_updates(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.post("/model-updates/check") if args.check else client.get("/model-updates")
    if args.json:
        print_json(answer)
        return 0
    if not answer["interval_s"] and not args.check:
        print("update checks are off (mirror.update_check: 0)")
    elif not answer["via"]:
        print("no mirror is configured (mirror.url, mirror.api): nothing to compare with")
    elif answer["checked_at"] is None:
        print(f"not checked yet; the leader asks the {answer['via']} every {answer['interval_s'] / 3600:g}h "
              "(--check asks now)")
    else:
        print(f"checked {answer['checked_at']} through the {answer['via']}")
    if answer["error"]:
        print(f"the last check failed: {answer['error']}")
    rows = [{"model": m["model"], "update": "yes" if m["update_available"] else "-", "status": m["status"],
             "repo": m["repo"], "version": m["version"],
             "changed": ", ".join(m["changed"]) or m["error"]} for m in answer["models"]]
    if rows:
        print_table(rows, ["model", "update", "status", "repo", "version", "changed"])
    return 0


def run_explain(args: argparse.Namespace, client: AdminClient) -> int:
    info = client.get(f"/models/{quote(args.name)}/placement")
    if args.json:
        print_json(info)
        return 0
    m = info["model"]
    s = m["scaling"]
    print(f"{m['name']} ({m['class']}, {m['origin']}): {m['status']}")
    print(f"  {m['reason']}")
    print(f"  wants {m['wanted']} (min {s['min']}, max {s['max']}); {m['ready']} ready")
    for r in info["replicas"]:
        print(f"  replica {r['id']} on {r['node']}: {r['state']}, gpus {','.join(map(str, r['gpus'])) or 'cpu'}")
    if info["last_error"]:
        print(f"  last error: {info['last_error']}")
    for title, key in (("last placement", "last_placement"), ("drain", "drain_blocked"),
                       ("the next replica now", "next_placement")):
        d = info.get(key)
        if not d:
            continue
        print(f"  {title}: " + (f"on {d['placed_on']}" if d["placed_on"] else d["summary"] or "no node can run it"))
        if d["placed_on"] and d["why"]:
            print(f"    because: {d['why']}")
        for sentence in d["rejections"]:
            print(f"    {sentence}")
    for line in info["log_tail"][-20:]:
        print(f"    | {line}")
    return 0


def run_replicas(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.get("/replicas")
    replicas = [r for r in answer["replicas"] if args.model in (None, r["model"])]
    if args.json:
        print_json({"replicas": replicas})
        return 0
    rows = [{"replica": r["id"], "model": r["model"], "node": r["node"], "state": r["state"],
             "gpus": ",".join(map(str, r["gpus"])) or "cpu", "for": f"{r['for_s']:.0f}s",
             "note": r["stopping_because"] or r["message"]} for r in replicas]
    print_table(rows, ["replica", "model", "node", "state", "gpus", "for", "note"])
    return 0
