"""`llmgw ctl orgs|users|keys|limits|storage-quota`: people, keys, limits and projects' storage quotas
through the admin API.

The same operations as `llmgw org|users|keys` (which work on the store
directly, on the control plane), for a machine that reaches only the admin
API. The checks and messages are Tenancy's, so they read the same.
"""

from __future__ import annotations

import argparse
from typing import Any

from llmgw.cli.common import print_json, print_table
from llmgw.cli.ctl_client import AdminClient, quote, register_leaf, usage_of

STAFF_ROLES = ("none", "viewer", "operator", "billing", "admin")


def _group(sub, name: str, text: str):
    parser = sub.add_parser(name, help=text, description=text)
    parser.set_defaults(handler=usage_of(parser, f"ctl {name}"))
    return parser.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND")


def register(sub) -> None:
    cmds = _group(sub, "orgs", "The organization tree through the admin API: list, create, remove.")
    p = cmds.add_parser("list", help="The tree.", description="Every organization, team and project.")
    register_leaf(p, run_orgs_list)
    p = cmds.add_parser("create", help="Make an organization, team or project.",
                        description="Make acme (an organization), acme/search (a team), acme/search/indexer (a "
                        "project in a team), or with --project acme/indexer (a project in the organization).")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--project", action="store_true", help="ORG/NAME is a project, not a team")
    register_leaf(p, run_orgs_create)
    p = cmds.add_parser("remove", help="Remove an empty organization, team or project.",
                        description="Remove an organization, team or project with nothing left in it.")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--kind", choices=("team", "project"), help="when ORG/NAME could be either")
    register_leaf(p, run_orgs_remove)

    cmds = _group(sub, "users", "People through the admin API: list, show, create, state, role, memberships.")
    p = cmds.add_parser("list", help="People, by email.", description="People, by email.")
    p.add_argument("--state", choices=("active", "pending", "suspended"))
    p.add_argument("--role", choices=STAFF_ROLES)
    register_leaf(p, run_users_list)
    p = cmds.add_parser("show", help="A person and where they belong.", description="A person and where they belong.")
    p.add_argument("user", metavar="USER", help="email or id")
    register_leaf(p, run_users_show)
    p = cmds.add_parser("create", help="Add a person.", description="Add a person, active unless --pending.")
    p.add_argument("email", metavar="EMAIL")
    p.add_argument("--name", default="")
    p.add_argument("--role", default="none", choices=STAFF_ROLES)
    p.add_argument("--pending", action="store_true", help="waiting for approval")
    register_leaf(p, run_users_create)
    for name, state, text in (("suspend", "suspended", "Suspend a person; their keys stop working."),
                              ("activate", "active", "Reinstate or approve a person.")):
        p = cmds.add_parser(name, help=text, description=text)
        p.add_argument("user", metavar="USER")
        p.set_defaults(state=state)
        register_leaf(p, run_users_state)
    p = cmds.add_parser("role", help="Give a person a staff role.", description="Give a person a staff role.")
    p.add_argument("user", metavar="USER")
    p.add_argument("role", choices=STAFF_ROLES)
    register_leaf(p, run_users_role)
    p = cmds.add_parser("add-member", help="Make a person a member of an org, team or project.",
                        description="Make a person a member (or --owner) of an organization, team or project.")
    p.add_argument("user", metavar="USER")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--owner", action="store_true")
    register_leaf(p, run_users_add_member)
    p = cmds.add_parser("remove-member", help="Take a person out of an org, team or project.",
                        description="Take a person out of an organization, team or project.")
    p.add_argument("user", metavar="USER")
    p.add_argument("path", metavar="PATH")
    register_leaf(p, run_users_remove_member)
    from llmgw.cli.ctl_data import register_forget

    register_forget(cmds)

    cmds = _group(sub, "keys", "API keys through the admin API: list, create, revoke, rotate.")
    p = cmds.add_parser("list", help="Keys, newest first.", description="Keys of a project or person, newest first.")
    p.add_argument("--project")
    p.add_argument("--user")
    p.add_argument("--all", action="store_true", help="revoked and expired ones too")
    register_leaf(p, run_keys_list)
    p = cmds.add_parser("create", help="Issue a key; its secret is printed once.",
                        description="Issue a service (--project), personal (--user) or member (both) key. The "
                        "secret is printed once and kept nowhere.")
    p.add_argument("--project")
    p.add_argument("--user")
    p.add_argument("--name", default="")
    p.add_argument("--ttl", help="how long it lives, like 90d")
    p.add_argument("--band")
    p.add_argument("--models", help="models it may use, separated by commas")
    register_leaf(p, run_keys_create)
    p = cmds.add_parser("revoke", help="Revoke a key now.", description="Revoke a key (id or prefix) now.")
    p.add_argument("key", metavar="KEY")
    register_leaf(p, run_keys_revoke)
    p = cmds.add_parser("rotate", help="A new key; the old one works on for --overlap.",
                        description="Issue a key like KEY; the old one works on for --overlap.")
    p.add_argument("key", metavar="KEY")
    p.add_argument("--overlap", default="24h")
    register_leaf(p, run_keys_rotate)

    cmds = _group(sub, "limits", "Limits on an org, team, project, person or key: show, set, clear.")
    p = cmds.add_parser("show", help="The limits set on a scope.", description="The limits set on SCOPE.")
    p.add_argument("scope", metavar="SCOPE", help="org:NAME, team:ORG/TEAM, project:PATH, user:EMAIL or key:ID")
    register_leaf(p, run_limits_show)
    p = cmds.add_parser("set", help="Change some limits of a scope.",
                        description="Change some limits of SCOPE, keeping the others; 'none' removes one.")
    p.add_argument("scope", metavar="SCOPE")
    p.add_argument("--rpm")
    p.add_argument("--tpm")
    p.add_argument("--budget-micros")
    p.add_argument("--budget-period", choices=("day", "month"))
    p.add_argument("--models", help="models allowed, separated by commas, or none")
    register_leaf(p, run_limits_set)
    p = cmds.add_parser("clear", help="Remove every limit on a scope.", description="Remove every limit on SCOPE.")
    p.add_argument("scope", metavar="SCOPE")
    register_leaf(p, run_limits_clear)

    p = sub.add_parser("storage-quota", help="Show or set how much a project may keep (files, batch results, "
                       "threads, notes, responses).",
                       description="Show PROJECT's storage quota and what it keeps now; with SIZE (like 50GiB; 0 "
                       "is no limit) give it its own quota, with --default the server's "
                       "router.clients.project_storage_bytes again. A running gateway reads a change within 30 "
                       "seconds. The same as `llmgw keys quota`, through the admin API.")
    p.add_argument("project", metavar="PROJECT", help="ORG/PROJECT or ORG/TEAM/PROJECT")
    choice = p.add_mutually_exclusive_group()
    choice.add_argument("size", metavar="SIZE", nargs="?", help="the quota, like 50GiB or 500MB; 0 is no limit")
    choice.add_argument("--default", action="store_true", help="use the server's quota again")
    register_leaf(p, run_storage_quota)

    from llmgw.cli import ctl_data

    ctl_data.register(sub)  # residency and key lifetime caps


def _out(args: argparse.Namespace, value: Any, line: str) -> int:
    print_json(value) if args.json else print(line)
    return 0


def run_orgs_list(args, client: AdminClient) -> int:
    tree = client.get("/orgs")
    if args.json:
        print_json(tree)
    else:
        print_table([{"path": n["path"], "kind": n["kind"], "id": n["id"]} for n in tree["nodes"]],
                    ["path", "kind", "id"])
    return 0


def run_orgs_create(args, client: AdminClient) -> int:
    node = client.post("/orgs", {"path": args.path, "project": args.project})
    return _out(args, node, f"{node['path']}: {node['kind']} {node['id']}")


def run_orgs_remove(args, client: AdminClient) -> int:
    node = client.request("DELETE", "/orgs", query={"path": args.path, "kind": args.kind})
    return _out(args, node, f"{node['path']}: removed")


def _user_rows(users: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"email": u["email"], "name": u["name"], "state": u["state"], "role": u["role"], "id": u["id"]}
            for u in users]


def run_users_list(args, client: AdminClient) -> int:
    users = client.get("/users", state=args.state, role=args.role)
    if args.json:
        print_json(users)
    else:
        print_table(_user_rows(users["users"]), ["email", "name", "state", "role", "id"])
    return 0


def run_users_show(args, client: AdminClient) -> int:
    d = client.get(f"/users/{quote(args.user)}")
    if args.json:
        print_json(d)
        return 0
    u = d["user"]
    print(f"{u['email']} ({u['name']}): {u['state']}, staff role {u['role']}, id {u['id']}")
    for m in d["memberships"]:
        print(f"  {m['role']} of {m['path']}")
    return 0


def run_users_create(args, client: AdminClient) -> int:
    u = client.post("/users", {"email": args.email, "name": args.name, "role": args.role,
                               "state": "pending" if args.pending else "active"})
    return _out(args, u, f"{u['email']}: {u['state']}, id {u['id']}")


def run_users_state(args, client: AdminClient) -> int:
    u = client.post(f"/users/{quote(args.user)}/state", {"state": args.state})
    return _out(args, u, f"{u['email']}: {u['state']}")


def run_users_role(args, client: AdminClient) -> int:
    u = client.post(f"/users/{quote(args.user)}/role", {"role": args.role})
    return _out(args, u, f"{u['email']}: staff role {u['role']}")


def run_users_add_member(args, client: AdminClient) -> int:
    m = client.post(f"/users/{quote(args.user)}/memberships",
                    {"path": args.path, "role": "owner" if args.owner else "member"})
    return _out(args, m, f"{args.user}: {m['role']} of {m['path']}")


def run_users_remove_member(args, client: AdminClient) -> int:
    done = client.request("DELETE", f"/users/{quote(args.user)}/memberships", query={"path": args.path})
    return _out(args, done, done["done"])


def _key_rows(keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": k["id"], "prefix": k["prefix"], "name": k["name"], "kind": k["kind"], "state": k["state"],
             "expires": (k["expires_at"] or "")[:10]} for k in keys]


def run_keys_list(args, client: AdminClient) -> int:
    keys = client.get("/keys", project=args.project, user=args.user, all=args.all or None)
    if args.json:
        print_json(keys)
    else:
        print_table(_key_rows(keys["keys"]), ["id", "prefix", "name", "kind", "state", "expires"])
    return 0


def run_keys_create(args, client: AdminClient) -> int:
    body = {"project": args.project, "user": args.user, "name": args.name, "ttl": args.ttl, "band": args.band,
            "models": [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None}
    issued = client.post("/keys", body)
    return _out(args, issued, f"{issued['key']['id']} ({issued['key']['kind']}): {issued['secret']}\n"
                              "  shown once: give it to its user now")


def run_keys_revoke(args, client: AdminClient) -> int:
    k = client.post(f"/keys/{quote(args.key)}/revoke")
    return _out(args, k, f"{k['id']}: {k['state']}")


def run_keys_rotate(args, client: AdminClient) -> int:
    r = client.post(f"/keys/{quote(args.key)}/rotate", {"overlap": args.overlap})
    return _out(args, r, f"{r['new']['key']['id']}: {r['new']['secret']}\n  shown once; {r['old']['id']} ends "
                         f"{r['old']['revoked_at'] or r['old']['expires_at'] or 'now'}")


def _limits_line(info: dict[str, Any]) -> str:
    limits = info["limits"]
    if not limits:
        return f"{info['scope']}: no limits"
    parts = [f"{k} {v if not isinstance(v, list) else ','.join(v)}" for k, v in limits.items() if v is not None]
    return f"{info['scope']}: " + ", ".join(parts)


def run_limits_show(args, client: AdminClient) -> int:
    info = client.get("/limits", scope=args.scope)
    return _out(args, info, _limits_line(info))


def _limit_value(text: str | None, *, number: bool) -> Any:
    if text is None or text.lower() != "none" and not number:
        return text
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        from llmgw.cli.ctl_client import CtlError

        raise CtlError(f"expected a whole number or none, got {text!r}", 2) from None


def run_limits_set(args, client: AdminClient) -> int:
    body: dict[str, Any] = {"scope": args.scope}
    for name in ("rpm", "tpm", "budget_micros"):
        if getattr(args, name) is not None:
            body[name] = _limit_value(getattr(args, name), number=True)
    if args.budget_period is not None:
        body["budget_period"] = args.budget_period
    if args.models is not None:
        body["models"] = None if args.models.lower() == "none" else [m.strip() for m in args.models.split(",")]
    info = client.request("PUT", "/limits", body=body)
    return _out(args, info, _limits_line(info))


def run_limits_clear(args, client: AdminClient) -> int:
    info = client.request("DELETE", "/limits", query={"scope": args.scope})
    return _out(args, info, f"{info['scope']}: limits removed")


def _storage_line(info: dict[str, Any]) -> str:
    from llmgw.config.units import ByteSize

    def size(n: int) -> str:
        return "no limit" if n == 0 else str(ByteSize(n))

    own = info["storage_quota_bytes"]
    quota = (f"the server's, {size(info['server_quota_bytes'])} (router.clients.project_storage_bytes)"
             if own is None else size(own))
    return f"{info['project']}: storage quota {quota}; keeps {ByteSize(info['used_bytes'])} now"


def run_storage_quota(args, client: AdminClient) -> int:
    from llmgw.cli.ctl_client import CtlError
    from llmgw.config.units import ByteSize

    if not args.default and args.size is None:
        info = client.get("/storage-quota", project=args.project)
        return _out(args, info, _storage_line(info))
    size = None
    if not args.default:
        try:
            size = int(ByteSize.parse(args.size))
        except ValueError as exc:
            raise CtlError(f"SIZE: {exc}", 2) from None
    info = client.request("PUT", "/storage-quota", body={"project": args.project, "storage_quota_bytes": size})
    return _out(args, info, _storage_line(info) + "\nA running gateway reads the change within 30 seconds.")
