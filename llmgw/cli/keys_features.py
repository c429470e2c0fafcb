"""`llmgw keys threads|memory|cache|strict-max-tokens|quota`: a project's stored conversations, memory
notes and answer cache, whether a max_tokens past the model's context is refused, and how much it may keep.

Each switch is off until turned on here; the quota is the server's
(router.clients.project_storage_bytes) until set here. With no option the
command shows the project's setting. A running gateway reads a change within
30 seconds.
"""

from __future__ import annotations

import argparse
import datetime as dt

from llmgw.cli.common import add_json_flag, print_json
from llmgw.cli.main import UsageError
from llmgw.cli.store_access import (
    add_store_arguments,
    parse_duration,
    tenancy_command,
    when,
)

_FEATURES = {
    "threads": (
        "Keep a project's conversations (x-llmgw-thread), or stop.",
        ("Turn stored conversations on or off for a project. With them on, a request naming a thread in "
         "x-llmgw-thread gets the thread's earlier turns in front of its own; each thread is kept --retention "
         "after its last turn. With them off, such a request is refused."),
        ("--retention", "how long a thread is kept after its last turn, like 720h (default 720h)"),
    ),
    "memory": (
        "Let a project's agents keep notes (/v1/memory, /mcp), or stop.",
        ("Turn memory notes on or off for a project: /v1/memory and the remember, recall and forget tools "
         "of /mcp. Notes already kept stay while they are off, unreachable."),
        None,
    ),
    "cache": (
        "Reuse a project's answers to exact repeats, or stop.",
        ("Turn the answer cache on or off for a project. With it on, a request repeated exactly within --ttl "
         "is answered from the gateway's memory, marked x-llmgw-cache: hit, with no tokens and no cost."),
        ("--ttl", "how long an answer is reused, like 10m (default 10m)"),
    ),
    "strict-max-tokens": (
        "Refuse a project's requests whose max_tokens the context cannot hold, instead of fitting them.",
        ("Off (the default), a request asking for more answer tokens (max_tokens, max_completion_tokens, "
         "max_output_tokens) than the model's context leaves after its prompt is sent with max_tokens lowered "
         "to what is left, and the answer carries x-llmgw-max-tokens-fitted with that number. On, such a "
         "request is refused with 400 context_length_exceeded, as the engine would."),
        None,
    ),
}


def register(commands) -> None:
    """Add `threads`, `memory`, `cache`, `strict-max-tokens` and `quota` under `llmgw keys`."""
    for name, (summary, description, extra) in _FEATURES.items():
        parser = commands.add_parser(name, help=summary, description=description)
        parser.add_argument("project", metavar="PROJECT", help="the project, as ORG/TEAM/PROJECT or ORG/PROJECT")
        switch = parser.add_mutually_exclusive_group()
        switch.add_argument("--on", action="store_true", help="turn it on")
        switch.add_argument("--off", action="store_true", help="turn it off")
        if extra is not None:
            parser.add_argument(extra[0], metavar="DURATION", help=extra[1])
        add_json_flag(parser)
        add_store_arguments(parser)
        parser.set_defaults(handler=tenancy_command(_handler(name.replace("-", "_"))), feature=name)
    parser = commands.add_parser(
        "quota", help="Set how much a project may keep (files, threads, notes, responses), or show it.",
        description=("Set a project's own storage quota: what its files, batch results, thread turns, memory "
                     "notes and stored responses may take together, like 50GiB; 0 is no limit. Past it, uploads, "
                     "batches, notes and thread turns are refused with 413 storage_quota_exceeded. --default "
                     "gives it the server's router.clients.project_storage_bytes again."))
    parser.add_argument("project", metavar="PROJECT", help="the project, as ORG/TEAM/PROJECT or ORG/PROJECT")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("size", metavar="SIZE", nargs="?", help="the quota, like 50GiB or 500MB; 0 is no limit")
    choice.add_argument("--default", action="store_true", help="use the server's quota again")
    add_json_flag(parser)
    add_store_arguments(parser)
    parser.set_defaults(handler=tenancy_command(_quota))


async def _quota(args: argparse.Namespace, tenancy) -> int:
    from llmgw.config.units import ByteSize
    from llmgw.store.client_data import SERVER_QUOTA

    node = await tenancy.find(args.project, "project")
    store = tenancy.store
    change: int | None = None
    if args.default:
        change = SERVER_QUOTA
    elif args.size is not None:
        try:
            change = int(ByteSize.parse(args.size))
        except ValueError as exc:
            raise UsageError(f"SIZE: {exc}") from None
    if change is not None:
        features = await store.set_project_features(node.id, actor=tenancy.actor, storage_quota_bytes=change)
        await store.append_audit(tenancy.actor, "keys.quota", f"project:{node.id}",
                                 {"path": node.path, "storage_quota_bytes": features.storage_quota_bytes})
    else:
        features = await store.get_project_features(node.id)
    used = await store.storage_used(node.id)
    own = features.storage_quota_bytes
    if args.json:
        print_json({"project": node.path, "project_id": node.id, "storage_quota_bytes": own,
                    "server_default": own is None, "used_bytes": used})
        return 0
    from llmgw.config.units import ByteSize

    quota = "the server's (router.clients.project_storage_bytes)" if own is None else (
        "no limit" if own == 0 else str(ByteSize(own)))
    print(f"{node.path}: storage quota {quota}; keeps {ByteSize(used)} now")
    if change is not None:
        print("A running gateway reads the change within 30 seconds.")
    return 0


def _handler(feature: str):
    async def handle(args: argparse.Namespace, tenancy) -> int:
        node = await tenancy.find(args.project, "project")
        store = tenancy.store
        changes: dict = {}
        if args.on or args.off:
            changes[feature] = bool(args.on)
        span = getattr(args, "retention", None) if feature == "threads" else getattr(args, "ttl", None)
        if span is not None:
            value = parse_duration(span, "--retention" if feature == "threads" else "--ttl")
            if value < dt.timedelta(seconds=1):
                raise UsageError(f"{'--retention' if feature == 'threads' else '--ttl'}: at least 1s")
            changes["thread_retention" if feature == "threads" else "cache_ttl"] = value
        if changes:
            features = await store.set_project_features(node.id, actor=tenancy.actor, **changes)
            detail = {k: (v.total_seconds() if isinstance(v, dt.timedelta) else v) for k, v in changes.items()}
            await store.append_audit(tenancy.actor, f"keys.{feature}", f"project:{node.id}", {"path": node.path, **detail})
        else:
            features = await store.get_project_features(node.id)
        on = getattr(features, feature)
        if args.json:
            out = {"project": node.path, "project_id": node.id, feature: on}
            if feature == "threads":
                out["retention_s"] = int(features.thread_retention.total_seconds())
            if feature == "cache":
                out["ttl_s"] = int(features.cache_ttl.total_seconds())
            out["updated_at"] = features.updated_at.isoformat() if features.updated_at else None
            print_json(out)
            return 0
        line = f"{node.path}: {feature} {'on' if on else 'off'}"
        if feature == "threads":
            line += f", kept {_span(features.thread_retention)} after the last turn"
        if feature == "cache":
            line += f", answers reused for {_span(features.cache_ttl)}"
        if features.updated_at:
            line += f" (changed {when(features.updated_at)} UTC by {features.actor})"
        print(line)
        if changes:
            print("A running gateway reads the change within 30 seconds.")
        return 0

    return handle


def _span(t: dt.timedelta) -> str:
    from llmgw.config.units import Duration

    return str(Duration(seconds=t.total_seconds()))
