"""`llmgw org`: manage organizations, teams and projects (against the store)."""

from __future__ import annotations

import argparse
import sys

from llmgw.cli.common import add_json_flag, print_json, print_table
from llmgw.cli.store_access import add_store_arguments, tenancy_command, to_json, when

HELP = "Manage organizations, teams and projects (against the store)."
PATHS = (
    "A PATH names a node the way people say it: ORG, ORG/TEAM, ORG/TEAM/PROJECT, "
    "or ORG/PROJECT for a project directly in its organization."
)


def register(sub) -> None:
    parser = sub.add_parser("org", help=HELP, description=f"{HELP} {PATHS}")
    commands = parser.add_subparsers(dest="org_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=_usage(parser))

    create = commands.add_parser(
        "create", help="Add an organization, a team or a project.",
        description="Add an organization (acme), a team (acme/search) or a project (acme/search/indexer; "
        "acme/indexer with --project for one directly in the organization).",
    )
    create.add_argument("path", metavar="PATH")
    create.add_argument("--project", action="store_true", help="ORG/NAME is a project, not a team")
    _common(create, _create)

    lister = commands.add_parser("list", help="List every organization, team and project.",
                                 description="List every organization, team and project, as paths.")
    _common(lister, _list)

    show = commands.add_parser("show", help="Show one node: its children, members and limits.",
                               description="Show an organization, team or project: what is in it, "
                               "its members and its limits.")
    show.add_argument("path", metavar="PATH")
    _common(show, _show)

    remove = commands.add_parser(
        "remove", help="Remove an empty organization, team or project.",
        description="Remove an organization, team or project. Only an empty one goes: remove what is "
        "inside first; a project's usable keys must be revoked first.",
    )
    remove.add_argument("path", metavar="PATH")
    _common(remove, _remove)

    scim = commands.add_parser(
        "scim-token", help="Make the organization's SCIM token (the one before stops working).",
        description="Make a new bearer token for the organization's SCIM client (/scim/v2: your identity "
        "provider creates, suspends and deletes the organization's people and teams with it). It is printed "
        "once; the store keeps only its hash, and the token made before stops working. --revoke removes it.",
    )
    scim.add_argument("path", metavar="ORG")
    scim.add_argument("--revoke", action="store_true", help="remove the token: SCIM requests are refused")
    _common(scim, _scim_token)


def _common(parser: argparse.ArgumentParser, fn) -> None:
    add_json_flag(parser)
    add_store_arguments(parser)
    parser.set_defaults(handler=tenancy_command(fn))


def _usage(parser: argparse.ArgumentParser):
    def handler(args: argparse.Namespace) -> int:
        parser.print_usage(sys.stderr)
        print("llmgw org: name a subcommand: create, list, show or remove", file=sys.stderr)
        return 2

    return handler


def _node_json(node) -> dict:
    return {"kind": node.kind, "id": node.id, "path": node.path}


async def _create(args, tenancy) -> int:
    node = await tenancy.create(args.path, project=args.project)
    if args.json:
        print_json(_node_json(node))
    else:
        print(f"created {node.kind} {node.path} ({node.id})")
    return 0


async def _list(args, tenancy) -> int:
    nodes = await tenancy.tree()
    rows = [{**_node_json(n), "created": when((n.project or n.team or n.org).created_at)} for n in nodes]
    if args.json:
        print_json(rows)
    else:
        print_table(rows, ["path", "kind", "id", "created"])
    return 0


async def _show(args, tenancy) -> int:
    node = await tenancy.find(args.path)
    children = await tenancy.children(node)
    members = await tenancy.members(node)
    limits = await tenancy.store.get_limits(node.kind, node.id)
    keys = await tenancy.list_keys(project=node.path) if node.kind == "project" else []
    if args.json:
        print_json({
            **_node_json(node),
            "children": [_node_json(c) for c in children],
            "members": [{"email": u.email if u else None, "user_id": m.user_id, "role": m.role} for u, m in members],
            "limits": to_json(limits),
            "keys": len(keys),
        })
        return 0
    print(f"{node.kind} {node.path} ({node.id})")
    if children:
        print("\ncontains:")
        print_table([_node_json(c) for c in children], ["path", "kind", "id"])
    print("\nmembers:")
    print_table([{"email": u.email if u else m.user_id, "role": m.role} for u, m in members], ["email", "role"])
    print("\nlimits:")
    from llmgw.cli.keys_cmd import limits_lines

    for line in limits_lines(limits):
        print(f"  {line}")
    if node.kind == "project":
        print(f"\nusable keys: {len(keys)} (llmgw keys list --project {node.path})")
    return 0


async def _remove(args, tenancy) -> int:
    node = await tenancy.remove(args.path)
    if args.json:
        print_json({**_node_json(node), "removed": True})
    else:
        print(f"removed {node.kind} {node.path}")
    return 0


async def _scim_token(args, tenancy) -> int:
    from llmgw.scim import tokens

    node = await tenancy.find(args.path, "org")
    if args.revoke:
        removed = await tokens.revoke(tenancy.store, node.id, actor=tenancy.actor)
        await tenancy.store.append_audit(tenancy.actor, "org.scim-token", f"org:{node.id}",
                                         {"path": node.path, "revoked": True})
        if args.json:
            print_json({"org": node.path, "revoked": removed})
        else:
            print(f"{node.path}: SCIM token removed" if removed else f"{node.path} had no SCIM token")
        return 0
    token = await tokens.issue(tenancy.store, node.id, actor=tenancy.actor)
    await tenancy.store.append_audit(tenancy.actor, "org.scim-token", f"org:{node.id}", {"path": node.path})
    if args.json:
        print_json({"org": node.path, "token": token})
    else:
        print(token)
        print(f"the SCIM token of {node.path}: give it to your identity provider with the base URL "
              "https://YOUR-GATEWAY/scim/v2; it is not shown again", file=sys.stderr)
    return 0
