"""`llmgw keys requests`: keep a key's or a project's requests and answers for a time, stop, or list those
kept (against the store; `llmgw ctl kept-requests|requests|request` do the same through the admin API).
Registered by llmgw.cli.keys_cmd."""

from __future__ import annotations

import datetime as dt

from llmgw.cli.common import add_json_flag, print_json, print_table
from llmgw.cli.main import UsageError
from llmgw.cli.store_access import add_store_arguments, parse_duration, tenancy_command

_OFF = ("off", "none", "-")

#: A scope's kind in a sentence.
_A_KIND = {"org": "an organization", "team": "a team", "user": "a person"}


def register(commands) -> None:
    p = commands.add_parser(
        "requests", help="Keep a key's or a project's requests and answers for a time, stop, or list them.",
        description="Show (no option) or set how long the requests of a key, or of every key of a project, are "
        "kept in the store with their answers: --keep 7d keeps each for 7 days (at most 366d), --off stops "
        "(those kept age out). None is kept unless asked; a key's own time wins over its project's. What the "
        "guardrails redact is kept redacted, a request they block is not kept, and a key under a no_store "
        "policy is never kept. --list lists those kept (no text: `llmgw ctl request show ID` shows it). SCOPE "
        "is key:KEY (id or prefix) or project:PATH (a bare key id or path works too). Running gateways take a "
        "change up within 30 seconds.")
    p.add_argument("scope", metavar="SCOPE")
    change = p.add_mutually_exclusive_group()
    change.add_argument("--keep", metavar="DURATION", help="keep each request this long, like 7d or 12h")
    change.add_argument("--off", action="store_true", help="stop keeping them")
    change.add_argument("--list", action="store_true", help="list the requests kept, newest first")
    p.add_argument("--since", metavar="WHEN", help="with --list: from this time, like 24h or 2026-09-01")
    p.add_argument("--limit", type=int, default=100, help="with --list: at most this many (default 100)")
    add_json_flag(p)
    add_store_arguments(p)
    p.set_defaults(handler=tenancy_command(_requests))


async def _requests(args, tenancy) -> int:
    from llmgw.admin.handlers_kept import keep_setting, summary
    from llmgw.cli.ctl_kept import ROW_COLUMNS, keep_line, request_row
    from llmgw.store.sql_kept import RULE_KINDS

    scope = await tenancy.scope(args.scope)
    if scope.kind not in RULE_KINDS:
        kind = _A_KIND.get(scope.kind, scope.kind)
        raise UsageError(f"SCOPE: requests are kept for a key or a project, not {kind} "
                         "(give key:KEY or project:PATH)")
    if (args.since is not None or args.limit != 100) and not args.list:
        raise UsageError("--since and --limit go with --list")
    store = tenancy.store
    if args.list:
        since = _since(args.since) if args.since else None
        if args.limit < 1:
            raise UsageError("--limit: at least 1")
        kept = await store.list_kept_requests(key_id=scope.id if scope.kind == "key" else None,
                                              project_id=scope.id if scope.kind == "project" else None,
                                              since=since, limit=args.limit)
        rows = [_json(summary(k)) for k in kept]
        await store.append_audit(tenancy.actor, "requests.list", f"{scope.kind}:{scope.id}", {"label": scope.label})
        if args.json:
            print_json({"requests": rows})
        else:
            print_table([request_row(r) for r in rows], list(ROW_COLUMNS))
        return 0
    if args.keep is not None or args.off:
        keep = None if args.off or args.keep.strip().lower() in _OFF else parse_duration(args.keep, "--keep")
        if keep is not None and keep < dt.timedelta(seconds=1):
            raise UsageError("--keep: at least 1s")
        await store.set_keep_rule(scope.kind, scope.id, keep, actor=tenancy.actor)
        await store.append_audit(tenancy.actor, "keys.requests", f"{scope.kind}:{scope.id}",
                                 {"label": scope.label, "keep_s": int(keep.total_seconds()) if keep else None})
    info = _json(await keep_setting(store, scope))
    if args.json:
        print_json(info)
    else:
        print(keep_line(info))
        if args.keep is not None or args.off:
            print("Running gateways take the change up within 30 seconds.")
    return 0


def _since(text: str) -> dt.datetime:
    from llmgw.admin.errors import ApiError
    from llmgw.admin.timespec import parse_when

    try:
        return parse_when(text, dt.datetime.now(dt.UTC), "--since")
    except ApiError as exc:
        raise UsageError(exc.message) from None


def _json(value) -> dict:
    from llmgw.admin.convert import unstructure

    return unstructure(value)


__all__ = ["register"]
