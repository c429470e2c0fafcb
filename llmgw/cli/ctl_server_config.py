"""`llmgw ctl server-config`: the control plane's own server.yaml, key by key, changed keeping its comments."""

from __future__ import annotations

import argparse
import json
from typing import Any

from llmgw.cli.common import print_json, print_table
from llmgw.cli.ctl_client import AdminClient, CtlError, load_yaml, register_leaf

DESCRIPTION = (
    "This control plane's server.yaml, every key of the configuration reference: what the file sets, what "
    "runs, and whether a change is taken up at once or at the next restart. `set` and `unset` change the file "
    "in place, keeping its comments; the server checks the whole file before writing it. Cluster settings "
    "(marked cluster) are changed for every control plane with `llmgw ctl config`."
)


def register(sub) -> None:
    p = sub.add_parser("server-config", help="server.yaml of the control plane: show, get, set, unset.",
                       description=DESCRIPTION)
    register_leaf(p, run_show)
    cmds = p.add_subparsers(dest="server_config_command", metavar="SUBCOMMAND")
    leaf = cmds.add_parser("get", help="One key: its value, default, type and what it is for.",
                           description="One key: what the file sets, what runs, its default, type and doc. A "
                           "list's entry is named by its index: models[0].scaling.min.")
    leaf.add_argument("key", metavar="KEY")
    register_leaf(leaf, run_get)
    leaf = cmds.add_parser("set", help="Set a key in server.yaml (VALUE as YAML: 3, 30s, true, [a, b]).",
                           description="Set KEY to VALUE in server.yaml, VALUE written as YAML (3, 30s, true, "
                           "[a, b], {min: 1, max: 2}); a list's entry by its index (models[0].scaling.min), a new "
                           "entry at the end (models[2]). The file keeps its comments; the change is refused, and "
                           "the file left as it was, when the result would not load.")
    leaf.add_argument("key", metavar="KEY")
    leaf.add_argument("value", metavar="VALUE")
    register_leaf(leaf, run_set)
    leaf = cmds.add_parser("unset", help="Take a key out of server.yaml: its default applies.",
                           description="Take KEY out of server.yaml, so its default applies; a list's entry by "
                           "its index (models[2]).")
    leaf.add_argument("key", metavar="KEY")
    register_leaf(leaf, run_unset)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "-"
    return value if isinstance(value, str) else json.dumps(value)


def _value_of(k: dict[str, Any]) -> tuple[str, str]:
    """(the value shown, where it comes from) for a key of the answer."""
    if k.get("store_value") is not None:
        return _shown(k["store_value"]), f"store ({k.get('store_actor') or '?'})"
    if k["kind"] == "blocks":
        entries = k["file_value"] if k["in_file"] else k["default"]
        n = len(entries or [])
        return f"{n} entr{'y' if n == 1 else 'ies'}", "server.yaml" if k["in_file"] else "default"
    if k["in_file"]:
        return _shown(k["file_value"]), "server.yaml"
    return _shown(k["default"]), "default"


def run_show(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.get("/server-config")
    if args.json:
        print_json(answer)
        return 0
    rows = []
    for k in answer["keys"]:
        if k["kind"] == "section" or "[]" in k["key"]:
            continue
        value, source = _value_of(k)
        note = "cluster" if k["cluster"] else ""
        if k["restart_pending"]:
            note = ", ".join(filter(None, [note, "restart to apply"]))
        rows.append({"key": k["key"], "value": value, "from": source, "applies": k["applies"], "note": note})
    print(f"{answer['path'] or '(not started from a file)'}")
    print_table(rows, ["key", "value", "from", "applies", "note"])
    for problem in answer["file_problems"]:
        print(f"  {problem}")
    return 0


def _find(answer: dict[str, Any], key: str) -> tuple[dict[str, Any], Any, Any, bool]:
    """(the key's description, what the file sets, what runs, the file sets it) for KEY, indexes and all."""
    from llmgw.config.schema import MISSING, PathError, parse_path, plain_at, template_of

    try:
        parts = parse_path(key)
    except PathError as exc:
        raise CtlError(str(exc), 2) from None
    by_key = {k["key"]: k for k in answer["keys"]}
    spec = by_key.get(template_of(parts))
    if spec is None:
        close = [k for k in by_key if k.startswith(template_of(parts).rsplit(".", 1)[0] + ".")][:8]
        raise CtlError(f"{key}: not a key of server.yaml" + (f"; near it: {', '.join(close)}" if close else ""), 2)
    if "[]" not in spec["key"]:
        return spec, spec["file_value"], spec["value"], spec["in_file"]
    # An entry's key: look it up in its list as the file has it and as it runs.
    top = next(i for i, p in enumerate(parts) if isinstance(p, int))
    holder = by_key[template_of(parts[:top])]
    document = {"x": holder["file_value"]}
    running = {"x": holder["value"]}
    written = plain_at(document, ("x", *parts[top:]))
    runs = plain_at(running, ("x", *parts[top:]))
    return (spec, None if written is MISSING else written, None if runs is MISSING else runs,
            written is not MISSING)


def run_get(args: argparse.Namespace, client: AdminClient) -> int:
    answer = client.get("/server-config")
    spec, written, runs, in_file = _find(answer, args.key)
    if args.json:
        print_json({**spec, "key": args.key, "file_value": written, "value": runs, "in_file": in_file})
        return 0
    said = (f"server.yaml says {_shown(written)}" if in_file
            else f"not in server.yaml: default {_shown(spec['default'])}")
    print(f"{args.key} = {_shown(runs if runs is not None else written)}  ({said})")
    kind = spec["type"] + (f": {', '.join(spec['choices'])}" if spec["choices"] else "")
    applies = "taken up at once" if spec["applies"] == "live" else "takes effect when llmgw server restarts"
    print(f"  {kind}; a change {applies}" + ("; restart to apply what the file says" if spec["restart_pending"]
                                            else ""))
    if spec["cluster"]:
        store = (f"; the store has {_shown(spec['store_value'])} (set by {spec['store_actor'] or '?'})"
                 if spec["store_value"] is not None else "")
        print(f"  a cluster setting: `llmgw ctl config set {spec['key']} VALUE` changes it for every control "
              f"plane{store}")
    print(f"  {spec['doc']}")
    return 0


def _print_saved(args: argparse.Namespace, saved: dict[str, Any]) -> None:
    if args.json:
        print_json(saved)
        return
    for c in saved["changed"]:
        after = "(unset: its default applies)" if c["after"] is None else _shown(c["after"])
        print(f"{c['key']} = {after}  (was {_shown(c['before'])}; {c['takes_effect']})")
    print(saved["message"])
    if any(c["cluster"] for c in saved["changed"]):
        print("note: cluster settings set with `llmgw ctl config set` are kept in the store for every control "
              "plane; this changed server.yaml only")


def run_set(args: argparse.Namespace, client: AdminClient) -> int:
    value = load_yaml(args.value, "VALUE")
    if value is None and args.value.strip() not in ("null", "~"):
        raise CtlError("VALUE: empty; give a value, or use `llmgw ctl server-config unset KEY`", 2)
    _print_saved(args, client.request("PUT", "/server-config", body={"set": {args.key: value}}))
    return 0


def run_unset(args: argparse.Namespace, client: AdminClient) -> int:
    _print_saved(args, client.request("PUT", "/server-config", body={"unset": [args.key]}))
    return 0
