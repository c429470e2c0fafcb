"""`llmgw ctl guard`: where guard policies apply, on and off, and the judge models.

attach/detach/list/on/off work against the store, as `llmgw keys` does
(`--store`, `--config`, `$LLMGW_STORE`); a running gateway reads the change
within seconds. `judge status` and `judge ask` read server.yaml (`--config`)
for the policies and the catalog's judges, and ask judges served at an
address (`endpoints:`) directly.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from llmgw.cli.common import add_json_flag, print_json, print_table
from llmgw.cli.main import UsageError
from llmgw.cli.store_access import add_store_arguments, tenancy_command

HELP = "Guardrails: attach policies to scopes, turn checking on and off, ask the judge models."
SCOPES_HELP = ("org:ACME, team:ACME/ML, project:ACME/ML/TRAIN, user:EMAIL or key:KEY-ID "
               "(a bare path, email or key id works too)")
DEFAULT_CONFIG = "/etc/llmgw/server.yaml"


def register(sub) -> None:
    parser = sub.add_parser("guard", help=HELP, description=HELP)
    cmds = parser.add_subparsers(dest="guard_command", metavar="COMMAND")
    parser.set_defaults(handler=_usage(parser, "attach, detach, list, on, off, judge"))

    p = cmds.add_parser("attach", help="Attach a policy to a scope or a key.",
                        description="Attach POLICY to SCOPE: it applies to every request below it, narrowing "
                        "what applies from above. A running gateway applies it within seconds.")
    p.add_argument("scope", metavar="SCOPE", help=SCOPES_HELP)
    p.add_argument("policy", metavar="POLICY", help="a policy of guard.policies (or baseline)")
    _store_command(p, _attach)

    p = cmds.add_parser("detach", help="Detach a policy from a scope or a key.",
                        description="Detach POLICY from SCOPE; what applies from above stays.")
    p.add_argument("scope", metavar="SCOPE", help=SCOPES_HELP)
    p.add_argument("policy", metavar="POLICY")
    _store_command(p, _detach)

    p = cmds.add_parser("list", help="List where policies are attached, and whether checking is on.",
                        description="List every attachment, and whether the guardrails are on. With --config, "
                        "the policies guard.default applies everywhere too.")
    _store_command(p, _list)

    p = cmds.add_parser("off", help="Stop checking every request (the policies and attachments are kept).",
                        description="Turn the guardrails off: no request is checked, whatever the policies say, "
                        "until `llmgw ctl guard on`. Say why with --note.")
    p.add_argument("--note", default="", help="why, kept with the change and shown by list")
    _store_command(p, _off)

    p = cmds.add_parser("on", help="Check requests again, as the policies say.",
                        description="Turn the guardrails back on: every policy checks again, as it was.")
    _store_command(p, _on)

    judge = cmds.add_parser("judge", help="The judge models the policies ask: status, ask.",
                            description="The judge models the policies ask.")
    judge_cmds = judge.add_subparsers(dest="judge_command", metavar="COMMAND")
    judge.set_defaults(handler=_usage(judge, "status, ask"))

    p = judge_cmds.add_parser("status", help="Each judge the policies ask, and what is wrong with it.",
                              description="For each judge model the policies name: whether the catalog has it "
                              "as a judge (role: guard), whether a plugin reads its format, and where it is "
                              "served. Judges the cluster runs (profiles, no endpoints) are reported as not "
                              "reachable from here.")
    _config_argument(p)
    add_json_flag(p)
    p.set_defaults(handler=_judge_status)

    p = judge_cmds.add_parser("ask", help="Ask a judge about a text; nothing is kept.",
                              description="Ask a judge what it makes of TEXT (a user turn), or of --answer "
                              "given TEXT as the question. Prints the verdict and the judge's own words.")
    p.add_argument("text", metavar="TEXT", help="the text to judge ('-' reads standard input)")
    p.add_argument("--answer", metavar="TEXT", help="judge this as the answer to TEXT")
    p.add_argument("--model", action="append", metavar="NAME",
                   help="the judge to ask (repeatable, asked in turn); default: those the policies name")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds each judge is waited for (default 30)")
    _config_argument(p)
    add_json_flag(p)
    p.set_defaults(handler=_judge_ask)


def _usage(parser: argparse.ArgumentParser, commands: str):
    def handler(args: argparse.Namespace) -> int:
        parser.print_usage(sys.stderr)
        print(f"llmgw ctl guard: name a command: {commands}", file=sys.stderr)
        return 2

    return handler


def _store_command(parser: argparse.ArgumentParser, fn) -> None:
    add_store_arguments(parser)
    add_json_flag(parser)
    parser.set_defaults(handler=tenancy_command(fn))


def _config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", default=os.environ.get("LLMGW_CONFIG", DEFAULT_CONFIG),
                        help=f"the server.yaml with the policies and the catalog (default {DEFAULT_CONFIG})")


# ---------------------------------------------------------------- attachments


def _known_policies(args: argparse.Namespace) -> list[str] | None:
    from llmgw.cli.store_access import locate_store
    from llmgw.guard.policy import BUILTIN_POLICIES

    config = locate_store(args).config if getattr(args, "config", None) else None
    if config is None:
        return None
    return sorted(set(config.guard.policies) | set(BUILTIN_POLICIES))


async def _scoped(args: argparse.Namespace, tenancy):
    from llmgw.guard.policy import Attachment

    known = _known_policies(args)
    if known is not None and args.policy not in known:
        raise UsageError(f"no policy is called {args.policy!r} in {args.config}; there are: {', '.join(known)}")
    scope = await tenancy.scope(args.scope)
    return scope, Attachment(scope.kind, scope.id, args.policy)


async def _attach(args: argparse.Namespace, tenancy) -> int:
    from llmgw.guard.attach import add_attachment

    scope, attachment = await _scoped(args, tenancy)
    added = await add_attachment(tenancy.store, attachment, actor=tenancy.actor)
    if args.json:
        print_json({"scope": str(scope), "policy": args.policy, "changed": added})
    else:
        print(f"{args.policy} {'attached to' if added else 'was already attached to'} {scope}")
    return 0


async def _detach(args: argparse.Namespace, tenancy) -> int:
    from llmgw.guard.attach import remove_attachment

    scope, attachment = await _scoped(args, tenancy)
    removed = await remove_attachment(tenancy.store, attachment, actor=tenancy.actor)
    if args.json:
        print_json({"scope": str(scope), "policy": args.policy, "changed": removed})
    elif removed:
        print(f"{args.policy} detached from {scope}")
    else:
        print(f"{args.policy} was not attached to {scope}", file=sys.stderr)
    return 0 if removed else 1


async def _list(args: argparse.Namespace, tenancy) -> int:
    from llmgw.guard.attach import enabled_state, load_attachments
    from llmgw.guard.policy import ENABLED_SETTING

    setting = await tenancy.store.get_setting(ENABLED_SETTING)
    on, note = enabled_state(setting.value if setting else None)
    rows = []
    config = None
    if getattr(args, "config", None):
        from llmgw.cli.store_access import locate_store

        config = locate_store(args).config
        rows += [{"scope": "everywhere", "policy": name, "mode": _mode(config, name)} for name in config.guard.default]
    for a in await load_attachments(tenancy.store):
        label = await tenancy.path_of(a.scope, a.scope_id)
        rows.append({"scope": f"{a.scope}:{label}", "policy": a.policy, "mode": _mode(config, a.policy)})
    if args.json:
        print_json({"enabled": on, "note": note or None,
                    "changed_by": setting.actor if setting else None, "attachments": rows})
        return 0
    if on:
        print("guardrails: on")
    else:
        by = f" by {setting.actor}" if setting else ""
        print(f"guardrails: OFF{by}: no request is checked" + (f" ({note})" if note else ""))
    print_table(rows, ["scope", "policy"] + (["mode"] if config is not None else []))
    return 0


def _mode(config, name: str) -> str:
    if config is None:
        return ""
    raw = config.guard.policies.get(name)
    mode = raw.get("mode", "enforce") if isinstance(raw, dict) else "enforce"
    return mode if config.guard.mode == "enforce" else f"{mode} ({config.guard.mode} for all)"


async def _off(args: argparse.Namespace, tenancy) -> int:
    from llmgw.guard.attach import set_enabled

    await set_enabled(tenancy.store, False, actor=tenancy.actor, note=args.note)
    if args.json:
        print_json({"enabled": False, "note": args.note or None})
    else:
        print("guardrails off: no request is checked until `llmgw ctl guard on`")
    return 0


async def _on(args: argparse.Namespace, tenancy) -> int:
    from llmgw.guard.attach import set_enabled

    await set_enabled(tenancy.store, True, actor=tenancy.actor)
    if args.json:
        print_json({"enabled": True})
    else:
        print("guardrails on: every policy checks again")
    return 0


# ---------------------------------------------------------------- judges


def _read_config(path: str):
    from llmgw.config import ConfigError, load_server_config

    try:
        return load_server_config(path)
    except ConfigError as exc:
        raise UsageError(f"--config {path}: {exc.problems[0] if exc.problems else exc}") from None
    except OSError as exc:
        raise UsageError(f"--config: cannot read {path}: {exc.strerror or exc}") from None


def _judge_setup(config):
    """The judges the catalog has, a transport to those served at an address, and the formats."""
    from llmgw.guard.judge import HTTPTransport, Judge, judge_models
    from llmgw.plugins.manager import load_plugins

    models = judge_models(config.models)
    urls, keys = {}, {}
    for m in config.models:
        if getattr(m, "role", "") == "guard" and m.endpoints:
            urls[m.name] = m.endpoints[0].url
            key = getattr(m.endpoints[0], "api_key", None)
            if key is not None:
                keys[m.name] = key.reveal() if hasattr(key, "reveal") else str(key)
    transport = HTTPTransport(urls, api_keys=keys)
    return Judge(models, load_plugins().judge_formats(), transport), transport


def _wanted(config) -> list[str]:
    from llmgw.guard.policy import parse_policies

    names: list[str] = []
    for policy in parse_policies(config.guard.policies).values():
        names += policy.rules.judge.models
    return list(dict.fromkeys(names))


def _judge_status(args: argparse.Namespace) -> int:
    config = _read_config(args.config)
    judge, transport = _judge_setup(config)
    rows = []
    for name in _wanted(config):
        model = judge.models.get(name)
        problem = judge.problem(name)
        detail = problem or f"served at {transport.urls.get(name)} (`judge ask` tries it)"
        rows.append({"judge": name, "format": model.format if model else "",
                     "state": "ok" if problem is None else "problem", "detail": detail})
    if args.json:
        print_json(rows)
    else:
        print_table(rows, ["judge", "format", "state", "detail"])
        if not rows:
            print("no policy names a judge (judge: models: [...])")
    return 0 if all(r["state"] != "problem" for r in rows) else 1


def _judge_ask(args: argparse.Namespace):
    from llmgw.guard.policy import JudgeRules

    config = _read_config(args.config)
    judge, transport = _judge_setup(config)
    text = sys.stdin.read() if args.text == "-" else args.text
    names = args.model or _wanted(config)
    if not names:
        raise UsageError("name a judge with --model, or give a policy a judge (judge: models: [...])")

    async def main() -> int:
        messages = [{"role": "user", "content": text}]
        role = "user"
        if args.answer is not None:
            messages.append({"role": "assistant", "content": args.answer})
            role = "assistant"
        rows = []
        try:
            for name in names:
                started = time.monotonic()
                answer = await judge.ask(JudgeRules(models=(name,), input="flag", latency_budget=args.timeout),
                                         messages, role)
                ms = int((time.monotonic() - started) * 1000)
                if answer.verdict is None:
                    reason = answer.errors[0][1] if answer.errors else "no answer"
                    rows.append({"judge": name, "verdict": None, "error": judge.problem(name) or reason, "ms": ms})
                else:
                    v = answer.verdict
                    rows.append({"judge": name, "verdict": "safe" if v.safe else "unsafe",
                                 "categories": list(v.categories), "said": v.raw, "ms": ms})
        finally:
            await transport.close()
        if args.json:
            print_json(rows)
        else:
            for r in rows:
                if r["verdict"] is None:
                    print(f"{r['judge']}: no verdict ({r['error']})")
                    continue
                cats = f" ({', '.join(r['categories'])})" if r["categories"] else ""
                print(f"{r['judge']}: {r['verdict']}{cats}, {r['ms']} ms")
                print(f"  it answered: {r['said']!r}")
        return 0 if all(r["verdict"] is not None for r in rows) else 1

    return main()  # the command runner runs it
