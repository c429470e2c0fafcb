"""`llmgw keys`: manage API keys: create, list, revoke, rotate, limits (against the store)."""

from __future__ import annotations

import argparse
import sys

from llmgw.cli.common import add_json_flag, print_json, print_table
from llmgw.cli.main import UsageError
from llmgw.cli.store_access import (
    add_store_arguments,
    parse_duration,
    parse_models,
    tenancy_command,
    to_json,
    when,
)

HELP = "Manage API keys: create, list, revoke, rotate, limits (against the store)."
DESCRIPTION = (
    "Manage API keys: issue them for a project (service keys), a person (personal keys) or a person "
    "in a project (member keys); list, show, revoke and rotate them; and set the limits of any "
    "organization, team, project, person or key."
)
SHOWN_ONCE = "This secret is shown once and will not be shown again: store it now (a password manager, a secret store)."
_OFF = ("off", "none", "-")


def register(sub) -> None:
    parser = sub.add_parser("keys", help=HELP, description=DESCRIPTION)
    commands = parser.add_subparsers(dest="keys_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=_usage(parser))

    create = commands.add_parser(
        "create", help="Issue a key; its secret is printed once.",
        description="Issue a key for a project (--project: a service key), a person (--user: a personal key), "
        "or both (a member key). The secret is printed once and never again.",
    )
    create.add_argument("--project", metavar="PATH", help="the project, as ORG/TEAM/PROJECT or ORG/PROJECT")
    create.add_argument("--user", metavar="USER", help="the person, by email or id")
    create.add_argument("--name", default="", help="what the key is for, shown in lists")
    create.add_argument("--ttl", metavar="DURATION", help="how long it lives, like 720h (default: "
                        "until revoked, or auth.max_key_ttl with --config)")
    create.add_argument("--band", help="its priority band, like gold (default: the gateway's default band)")
    create.add_argument("--models", metavar="A,B", help="the only models it may use (default: whatever the limits allow)")
    _common(create, _create)

    lister = commands.add_parser("list", help="List keys.",
                                 description="List keys, newest first: usable ones, or every one with --all.")
    lister.add_argument("--project", metavar="PATH", help="only this project's keys")
    lister.add_argument("--user", metavar="USER", help="only this person's keys")
    lister.add_argument("--all", action="store_true", help="revoked and expired keys too")
    _common(lister, _list)

    show = commands.add_parser("show", help="Show one key and the limits that apply to it.",
                               description="Show one key, by id or prefix, and every limit on its chain.")
    show.add_argument("key", metavar="KEY", help="key id (key-…) or prefix (llmgw-…)")
    _common(show, _show)

    revoke = commands.add_parser("revoke", help="Revoke a key now.",
                                 description="Revoke a key now; requests with it get 401 within seconds.")
    revoke.add_argument("key", metavar="KEY", help="key id (key-…) or prefix (llmgw-…)")
    _common(revoke, _revoke)

    rotate = commands.add_parser(
        "rotate", help="Issue a replacement key; the old one works on for the overlap.",
        description="Issue a new key with the old one's project, owner, name, band, models, lifetime and "
        "limits; the old one keeps working for --overlap, then expires. The new secret is printed once.",
    )
    rotate.add_argument("key", metavar="KEY", help="key id (key-…) or prefix (llmgw-…)")
    rotate.add_argument("--overlap", metavar="DURATION", default="24h",
                        help="how long the old key keeps working (default 24h; 0 stops it now)")
    _common(rotate, _rotate)

    limits = commands.add_parser(
        "limits", help="Show or set the limits of an organization, team, project, person or key.",
        description="Show (no options) or change the limits of a scope: org:ACME, team:ACME/ML, "
        "project:ACME/ML/TRAIN, user:EMAIL, key:KEY-ID (a bare path, email or key id works too). "
        "Each level only narrows what is above it. Options not given are kept; 'off' removes one.",
    )
    limits.add_argument("scope", metavar="SCOPE")
    limits.add_argument("--rpm", metavar="N", help="requests a minute, or off")
    limits.add_argument("--tpm", metavar="N", help="tokens a minute, or off")
    limits.add_argument("--budget", metavar="AMOUNT", help="money per period in prices.currency, like 250 or 12.50, or off")
    limits.add_argument("--period", choices=("day", "month"), help="the budget's period, in UTC (default month)")
    limits.add_argument("--models", metavar="A,B", help="the only models allowed here, or off for any")
    limits.add_argument("--clear", action="store_true", help="remove every limit of the scope")
    _common(limits, _limits)

    from llmgw.cli.keys_features import register as register_features

    register_features(commands)  # threads, memory, cache: a project's stored features

    from llmgw.cli.keys_rules import register as register_rules

    register_rules(commands)  # residency and lifetime caps: what scopes say about their keys

    from llmgw.cli.keys_kept import register as register_kept

    register_kept(commands)  # kept requests: whose requests and answers are kept, and those kept


def _common(parser: argparse.ArgumentParser, fn) -> None:
    add_json_flag(parser)
    add_store_arguments(parser)
    parser.set_defaults(handler=tenancy_command(fn))


def _usage(parser: argparse.ArgumentParser):
    def handler(args: argparse.Namespace) -> int:
        parser.print_usage(sys.stderr)
        print("llmgw keys: name a subcommand: create, list, show, revoke, rotate, limits, threads, memory, cache,"
              " residency, routing, lifetime or requests",
              file=sys.stderr)
        return 2

    return handler


# ---- printing ------------------------------------------------------------------


def key_json(key, now) -> dict:
    from llmgw.auth.tenancy import key_state

    data = to_json(key)
    data.pop("key_hash", None)
    data["kind"] = key.kind
    data["state"] = key_state(key, now)
    return data


def _row(key, now) -> dict:
    from llmgw.auth.tenancy import key_state

    return {"id": key.id, "prefix": key.prefix, "name": key.name, "kind": key.kind,
            "state": key_state(key, now), "expires": when(key.expires_at),
            "last_used": when(key.last_used_at), "band": key.priority_band,
            "models": ",".join(key.allowed_models) if key.allowed_models else ""}


def limits_lines(limits, currency: str = "") -> list[str]:
    """A scope's limits, one per line, in words."""
    from llmgw.accounting.prices import format_money

    if limits is None:
        return ["(none)"]
    lines = []
    if limits.rpm is not None:
        lines.append(f"rpm: {limits.rpm} requests a minute")
    if limits.tpm is not None:
        lines.append(f"tpm: {limits.tpm} tokens a minute")
    if limits.budget_micros is not None:
        lines.append(f"budget: {format_money(limits.budget_micros, currency)} a {limits.budget_period} (UTC)")
    if limits.allowed_models is not None:
        lines.append(f"models: {', '.join(limits.allowed_models)}")
    return lines or ["(none)"]


def _print_secret(issued, args, extra: dict | None = None) -> None:
    now = issued.key.created_at
    if args.json:
        print_json({**key_json(issued.key, now), **(extra or {}), "secret": issued.secret, "note": SHOWN_ONCE})
        return
    print(f"{issued.key.kind} key {issued.key.id} ({issued.key.prefix}…)"
          + (f", expires {when(issued.key.expires_at)} UTC" if issued.key.expires_at else ""))
    print()
    print(f"    {issued.secret}")
    print()
    print(SHOWN_ONCE)


# ---- handlers ------------------------------------------------------------------


async def _create(args, tenancy) -> int:
    issued = await tenancy.create_key(
        project=args.project, user=args.user, name=args.name,
        ttl=parse_duration(args.ttl, "--ttl") if args.ttl else None,
        band=args.band, models=parse_models(args.models) if args.models else None,
    )
    _print_secret(issued, args)
    return 0


async def _list(args, tenancy) -> int:
    keys = await tenancy.list_keys(project=args.project, user=args.user, include_unusable=args.all)
    now = tenancy.now()
    if args.json:
        print_json([key_json(k, now) for k in keys])
    else:
        print_table([_row(k, now) for k in keys],
                    ["id", "prefix", "name", "kind", "state", "expires", "last_used", "band", "models"])
    return 0


async def _show(args, tenancy) -> int:
    key = await tenancy.find_key(args.key)
    chain = await tenancy.chain_of(key)
    now = tenancy.now()
    project = await tenancy.path_of("project", key.project_id) if key.project_id else None
    user = await tenancy.path_of("user", key.user_id) if key.user_id else None
    labels = [await tenancy.path_of(lim.scope_kind, lim.scope_id) for lim in chain]
    routing, routing_set_by = await tenancy.routing_of(key)  # routing profiles: the narrowest set over it
    if args.json:
        print_json({**key_json(key, now), "project": project, "user": user,
                    "routing": routing or "default", "routing_set_by": routing_set_by or None,
                    "limits": [{**to_json(lim), "label": label} for lim, label in zip(chain, labels)]})
        return 0
    rows = _row(key, now)
    for field in ("id", "prefix", "name", "kind", "state"):
        print(f"{field}: {rows[field]}")
    print(f"project: {project or '-'}")
    print(f"user: {user or '-'}")
    print(f"created: {when(key.created_at)} UTC")
    print(f"expires: {when(key.expires_at) + ' UTC' if key.expires_at else 'never'}")
    print(f"last used: {when(key.last_used_at) + ' UTC' if key.last_used_at else 'never'}")
    print(f"band: {key.priority_band or '(default)'}")
    print(f"routing: {routing + ' (set on its ' + routing_set_by + ')' if routing else '(default)'}")
    print(f"models: {', '.join(key.allowed_models) if key.allowed_models else '(any the limits allow)'}")
    print("limits, widest first:" if chain else "limits: (none on its chain)")
    for lim, label in zip(chain, labels):
        print(f"  {lim.scope_kind} {label}: {'; '.join(limits_lines(lim))}")
    return 0


async def _revoke(args, tenancy) -> int:
    key = await tenancy.revoke_key(args.key)
    if args.json:
        print_json(key_json(key, tenancy.now()))
    else:
        print(f"revoked {key.id} ({key.prefix}…)")
    return 0


async def _rotate(args, tenancy) -> int:
    overlap = parse_duration(args.overlap, "--overlap")
    issued, old = await tenancy.rotate_key(args.key, overlap)
    if args.json:
        _print_secret(issued, args, {"replaces": key_json(old, tenancy.now())})
        return 0
    ends = old.revoked_at if old.revoked_at else old.expires_at
    print(f"{old.id} ({old.prefix}…) keeps working until {when(ends)} UTC")
    _print_secret(issued, args)
    return 0


def _number(text: str | None, what: str):
    from llmgw.auth.tenancy import UNCHANGED

    if text is None:
        return UNCHANGED
    if text.strip().lower() in _OFF:
        return None
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{what}: expected a whole number or off, got {text!r}") from None
    if value < 1:
        raise UsageError(f"{what}: must be at least 1 (off removes it), got {value}")
    return value


async def _limits(args, tenancy) -> int:
    from llmgw.accounting.prices import parse_money
    from llmgw.auth.tenancy import UNCHANGED

    scope = await tenancy.scope(args.scope)
    changes = {
        "rpm": _number(args.rpm, "--rpm"),
        "tpm": _number(args.tpm, "--tpm"),
        "budget_micros": UNCHANGED if args.budget is None else (
            None if args.budget.strip().lower() in _OFF else parse_money(args.budget, "--budget")),
        "budget_period": UNCHANGED if args.period is None else args.period,
        "allowed_models": UNCHANGED if args.models is None else (
            None if args.models.strip().lower() in _OFF else parse_models(args.models)),
    }
    if args.clear:
        if any(v is not UNCHANGED for v in changes.values()):
            raise UsageError("--clear removes every limit; give it alone")
        await tenancy.clear_limits(scope)
        limits = None
    elif any(v is not UNCHANGED for v in changes.values()):
        limits = await tenancy.set_limits(scope, **changes)
    else:
        limits = await tenancy.get_limits(scope)
    if args.json:
        print_json({"scope": scope.kind, "id": scope.id, "label": scope.label, "limits": to_json(limits)})
    else:
        print(f"{scope}:")
        for line in limits_lines(limits):
            print(f"  {line}")
    return 0
