"""`llmgw ctl quotas|quota|usage|audit|config|openapi`: capacity quotas, use, the audit log, settings."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from llmgw.cli.common import print_json, print_table
from llmgw.cli.ctl_client import (
    AdminClient,
    CtlError,
    load_yaml,
    quote,
    register_leaf,
    usage_of,
)

USAGE_GROUPS = "org, team, project, user, key or model"


def register(sub) -> None:
    p = sub.add_parser("quotas", help="List capacity quotas and what each scope holds now.",
                       description="List capacity quotas: the GPUs, cores and memory each organization, team "
                       "or project may hold at most and is guaranteed, and what its models hold now.")
    register_leaf(p, run_quotas)
    quota = sub.add_parser("quota", help="Set or remove a capacity quota.",
                           description="Set or remove the capacity quota of an organization, team or project.")
    cmds = quota.add_subparsers(dest="quota_command", metavar="SUBCOMMAND")
    quota.set_defaults(handler=usage_of(quota, "ctl quota"))
    p = cmds.add_parser("set", help="Set a scope's quota (replacing the one it had).",
                        description="Set the capacity quota of SCOPE (org:NAME, team:ORG/TEAM or project:PATH), "
                        "replacing the one it had.")
    p.add_argument("scope", metavar="SCOPE")
    for name, what in (("gpus", "GPUs"), ("cores", "CPU cores"), ("memory", "host memory, like 512GiB")):
        kind = str if name == "memory" else int
        p.add_argument(f"--{name}", type=kind, help=f"the most {what} its models may hold")
        p.add_argument(f"--guaranteed-{name}", type=kind, help=f"{what} its models keep when others want them")
    register_leaf(p, run_quota_set)
    p = cmds.add_parser("remove", help="Take a scope's quota away.", description="Take SCOPE's capacity quota away.")
    p.add_argument("scope", metavar="SCOPE")
    register_leaf(p, run_quota_remove)

    usage = sub.add_parser("usage", help="Requests, tokens and cost by group and period; `usage export` as CSV.",
                           description=f"Requests, tokens, errors and cost summed by {USAGE_GROUPS}, over a "
                           "span, per hour, day, month or in total. `llmgw ctl usage export` writes CSV.")
    usage.add_argument("--by", default="org", help=f"group by {USAGE_GROUPS}, or none (default: %(default)s)")
    usage.add_argument("--period", default="total", choices=("hour", "day", "month", "total"),
                       help="one row per period (default: %(default)s)")
    usage.add_argument("--since", default="24h", help="a date, a time, or a span back like 7d (default: %(default)s)")
    usage.add_argument("--until", help="a date or time (default: now)")
    usage.add_argument("--scope", help="only org:NAME, team:ORG/TEAM, project:PATH, user:EMAIL or key:ID")
    register_leaf(usage, run_usage)
    cmds = usage.add_subparsers(dest="usage_command", metavar="SUBCOMMAND")
    p = cmds.add_parser("export", help="Usage as CSV, by one or several groups.",
                        description="Usage as CSV, one row per period and combination of groups (--by "
                        "project,model), with names and ids, for a spreadsheet or a bill.")
    p.add_argument("--by", default="project", help=f"comma-separated groups among {USAGE_GROUPS} (default: %(default)s)")
    p.add_argument("--period", default="day", choices=("hour", "day", "month", "total"),
                   help="one row per period (default: %(default)s)")
    p.add_argument("--from", dest="since", default="30d", help="a date, a time or a span back (default: %(default)s)")
    p.add_argument("--to", dest="until", help="a date or time (default: now)")
    p.add_argument("--scope", help="only this part of the tree")
    p.add_argument("--output", "-o", metavar="FILE", help="write the CSV here instead of standard output")
    register_leaf(p, run_usage_export, json_flag=False)

    p = sub.add_parser("audit", help="Who changed what, through what, and how it ended.",
                       description="The audit log, newest first: every change through the API, ctl, the "
                       "console and the people commands, refusals included.")
    p.add_argument("--since", help="a date, a time, or a span back like 24h")
    p.add_argument("--until", help="a date or time")
    p.add_argument("--actor", dest="by_actor", metavar="ACTOR", help="only this actor's changes")
    p.add_argument("--action", help="only this action; models.* matches a prefix")
    p.add_argument("--target", help="only changes to this, like model:qwen-small")
    p.add_argument("--limit", type=int, default=100, help="at most this many (default: %(default)s)")
    # Reading changes nothing, so no --actor of its own: --actor here filters.
    register_leaf(p, run_audit, actor_flag=False)

    config = sub.add_parser("config", help="Cluster settings: show, get, set, unset, history.",
                            description="Cluster settings changed at run time: they win over server.yaml until "
                            "unset, and every change is kept.")
    cmds = config.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    config.set_defaults(handler=usage_of(config, "ctl config"))
    p = cmds.add_parser("show", help="Every setting, its value and where it comes from.",
                        description="Every setting the API can change: its value, whether from the store or "
                        "server.yaml, and what it does.")
    register_leaf(p, run_config_show)
    p = cmds.add_parser("get", help="One setting.", description="One setting, its type and what it does.")
    p.add_argument("key", metavar="KEY")
    register_leaf(p, run_config_get)
    p = cmds.add_parser("set", help="Set a setting (a YAML value: 3, 30s, true, shadow).",
                        description="Set KEY to VALUE, written as YAML (3, 30s, true, shadow); it is checked "
                        "against the setting's type and bounds.")
    p.add_argument("key", metavar="KEY")
    p.add_argument("value", metavar="VALUE")
    register_leaf(p, run_config_set)
    p = cmds.add_parser("unset", help="Unset a setting: server.yaml's value applies again.",
                        description="Unset KEY: server.yaml's value (or its default) applies again.")
    p.add_argument("key", metavar="KEY")
    register_leaf(p, run_config_unset)
    p = cmds.add_parser("history", help="Changes to the settings, newest first.",
                        description="Changes to the settings (or to KEY), newest first, with who made each.")
    p.add_argument("key", nargs="?", metavar="KEY")
    p.add_argument("--limit", type=int, default=100)
    register_leaf(p, run_config_history)

    p = sub.add_parser("openapi", help="Print the admin API's OpenAPI 3.1 document.",
                       description="Print the admin API's OpenAPI 3.1 document as this llmgw builds it (no "
                       "server needed); --remote asks the server for the one it serves.")
    p.add_argument("--remote", action="store_true", help="the document the server at --admin serves")
    p.add_argument("--admin", metavar="URL")
    p.add_argument("--token-file", metavar="FILE")
    p.set_defaults(handler=run_openapi)


# ---------------------------------------------------------------- quotas


def _capacity(c: dict[str, Any]) -> str:
    parts = [f"{c[k]} {k}" for k in ("gpus", "cores") if c.get(k) is not None]
    if c.get("memory"):
        parts.append(f"{c['memory']} memory")
    return ", ".join(parts) or "-"


def run_quotas(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.get("/quotas")
    if args.json:
        print_json(answer)
        return 0
    rows = [{"scope": q["scope"], "limit": _capacity(q["limit"]), "guaranteed": _capacity(q["guaranteed"]),
             "held": (f"{q['held']['gpus']} gpus, {q['held']['cores']} cores" if q["held"] else "-")}
            for q in answer["quotas"]]
    print_table(rows, ["scope", "limit", "guaranteed", "held"])
    return 0


def run_quota_set(args: argparse.Namespace, client: AdminClient) -> int:
    body = {"scope": args.scope,
            "limit": {k: getattr(args, k) for k in ("gpus", "cores", "memory") if getattr(args, k) is not None},
            "guaranteed": {k: getattr(args, f"guaranteed_{k}") for k in ("gpus", "cores", "memory")
                           if getattr(args, f"guaranteed_{k}") is not None}}
    quota = client.request("PUT", "/quotas", body=body)
    print_json(quota) if args.json else print(f"{quota['scope']}: limit {_capacity(quota['limit'])}; "
                                              f"guaranteed {_capacity(quota['guaranteed'])}")
    return 0


def run_quota_remove(args: argparse.Namespace, client: AdminClient) -> int:
    quota = client.request("DELETE", "/quotas", query={"scope": args.scope})
    print_json(quota) if args.json else print(f"{quota['scope']}: quota removed")
    return 0


# ---------------------------------------------------------------- usage


def run_usage(args: argparse.Namespace, client: AdminClient) -> int:
    report = client.get("/usage", by=args.by, period=args.period, since=args.since, until=args.until,
                        scope=args.scope)
    if args.json:
        print_json(report)
        return 0
    from llmgw.accounting.prices import format_money

    rows = [{"period": (r["period_start"] or "total")[:16].replace("T", " "), report["by"]: r["label"] or "-",
             "requests": r["requests"], "errors": r["errors"], "tokens": r["prompt_tokens"] + r["completion_tokens"],
             "cost": format_money(r["cost_micros"], report["currency"]), "latency_ms": r["latency_ms_avg"]}
            for r in report["rows"]]
    columns = ["period", report["by"], "requests", "errors", "tokens", "cost", "latency_ms"]
    if report["by"] == "none":
        columns.remove("none")
    print_table(rows, columns)
    return 0


def run_usage_export(args: argparse.Namespace, client: AdminClient) -> int:
    text = client.get("/usage/export", by=args.by, period=args.period, **{"from": args.since, "to": args.until},
                      scope=args.scope)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
        print(f"{args.output}: {max(0, text.count(chr(10)) - 1)} rows", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


# ---------------------------------------------------------------- audit


def run_audit(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.get("/audit", since=args.since, until=args.until, actor=args.by_actor, action=args.action,
                        target=args.target, limit=args.limit)
    if args.json:
        print_json(answer)
        return 0
    rows = []
    for e in answer["events"]:
        ended = e["outcome"] or "ok"
        if e["reason"]:
            ended += f": {e['reason']}"
        rows.append({"at": e["at"][:19].replace("T", " "), "actor": e["actor"], "via": e["via"] or "cli",
                     "action": e["action"], "target": e["target"], "outcome": ended})
    print_table(rows, ["at", "actor", "via", "action", "target", "outcome"])
    return 0


# ---------------------------------------------------------------- settings


def _shown(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def run_config_show(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.get("/settings")
    if args.json:
        print_json(answer)
        return 0
    rows = [{"key": s["key"], "value": _shown(s["value"]), "from": s["source"],
             "by": s["actor"] or "", "applies": _applies(s), "doc": s["doc"]} for s in answer["settings"]]
    print_table(rows, ["key", "value", "from", "by", "applies", "doc"])
    return 0


def _applies(s: dict[str, Any]) -> str:
    """live or restart, and whether this control plane waits for one."""
    applies = s.get("applies", "")
    return f"{applies} (pending)" if s.get("restart_pending") else applies


def _print_setting(args: argparse.Namespace, s: dict[str, Any]) -> None:
    if args.json:
        print_json(s)
        return
    print(f"{s['key']} = {_shown(s['value'])}  ({'set by ' + s['actor'] if s['source'] == 'store' else 'from server.yaml'})")
    print(f"  {s['type']}" + (f": {', '.join(s['choices'])}" if s["choices"] else "")
          + f"; server.yaml says {_shown(s['file_value'])}")
    print(f"  {s['doc']}")
    if s.get("problem"):
        print(f"  the store's value is not used: {s['problem']}")
    if s.get("applies") == "restart":
        print("  takes effect when llmgw server restarts, on each control plane"
              + ("; this one runs its earlier value until then" if s.get("restart_pending") else ""))
    elif s.get("applies") == "live":
        print("  in force at once here, and within seconds on the other control planes")


def run_config_get(args: argparse.Namespace, client: AdminClient) -> int:
    _print_setting(args, client.get(f"/settings/{quote(args.key)}"))
    return 0


def run_config_set(args: argparse.Namespace, client: AdminClient) -> int:
    value = load_yaml(args.value, "VALUE")
    if value is None and args.value.strip() not in ("null", "~"):
        raise CtlError("VALUE: empty; give a value, or use `llmgw ctl config unset KEY`", 2)
    _print_setting(args, client.request("PUT", f"/settings/{quote(args.key)}", body={"value": value}))
    return 0


def run_config_unset(args: argparse.Namespace, client: AdminClient) -> int:
    _print_setting(args, client.request("DELETE", f"/settings/{quote(args.key)}"))
    return 0


def run_config_history(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.get("/settings/history", key=args.key, limit=args.limit)
    if args.json:
        print_json(answer)
        return 0
    rows = [{"at": c["at"][:19].replace("T", " "), "key": c["key"], "value": "(unset)" if c["removed"]
             else _shown(c["value"]), "by": c["actor"]} for c in answer["changes"]]
    print_table(rows, ["at", "key", "value", "by"])
    return 0


# ---------------------------------------------------------------- the document


def run_openapi(args: argparse.Namespace) -> int:
    if not args.remote:
        from llmgw.admin.routes import openapi_text

        sys.stdout.write(openapi_text())
        return 0
    try:
        document = AdminClient.from_args(args).get("/openapi.json")
    except CtlError as exc:
        print(exc.message, file=sys.stderr)
        return exc.code
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    return 0
