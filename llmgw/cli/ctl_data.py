"""`llmgw ctl users forget`, `llmgw ctl residency` and `llmgw ctl key-lifetime`: forgetting a person, a
scope's residency and its key lifetime cap, through the admin API (the same as `llmgw users forget` and
`llmgw keys residency|lifetime` on the store). Registered by llmgw.cli.ctl_people."""

from __future__ import annotations

from typing import Any

from llmgw.cli.common import print_json
from llmgw.cli.ctl_client import AdminClient, register_leaf

_OFF = ("off", "none", "-")


def register_forget(users_commands) -> None:
    p = users_commands.add_parser(
        "forget", help="Forget a person: keys, sessions, files and kept answers go; usage stays, unnamed.",
        description="Forget a person (POST /users/forget): their keys are revoked, their sessions, reset links, "
        "memberships and own limits go, their personal files, batches and kept answers are deleted, and their "
        "usage is kept under a pseudonym. Run again, it says nothing is left. It cannot be undone: give --yes.")
    p.add_argument("user", metavar="USER", help="email or id")
    p.add_argument("--yes", action="store_true", help="forget them (without it, nothing is changed)")
    register_leaf(p, run_users_forget)


def register(sub) -> None:
    p = sub.add_parser(
        "residency", help="Keep a scope's requests on the cluster's own engines, or let them go anywhere.",
        description="Show (no option) or set where the requests of an organization, project or key may be "
        "served (GET/PUT /residency): --in-cluster only on the cluster's own engines (models served by external "
        "providers or federation peers are refused, with the reason); --anywhere lifts the scope's own rule. "
        "SCOPE is org:NAME, project:PATH or key:ID.")
    p.add_argument("scope", metavar="SCOPE")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--in-cluster", dest="in_cluster", action="store_const", const=True)
    where.add_argument("--anywhere", dest="in_cluster", action="store_const", const=False)
    register_leaf(p, run_residency)

    p = sub.add_parser(  # routing profiles
        "routing", help="Show or set the routing profile of an organization's, a project's or a key's keys.",
        description="Show (no PROFILE) or set how the keys of an organization, project or key choose their "
        "replica (GET/PUT /routing): latency-first, cost-first, pinned:POOL, default or one of server.yaml's "
        "router.profiles; --clear removes the scope's own (one set above it then holds). The narrowest scope "
        "that sets one wins. SCOPE is org:NAME, project:PATH or key:ID.")
    p.add_argument("scope", metavar="SCOPE")
    p.add_argument("profile", metavar="PROFILE", nargs="?")
    p.add_argument("--clear", action="store_true", help="remove the scope's own profile")
    register_leaf(p, run_routing)

    p = sub.add_parser(
        "key-lifetime", help="Show or cap how long keys made in an organization, team or project may live.",
        description="Show (no DURATION) or set the longest lifetime of a key made in an organization, team or "
        "project (GET/PUT /key-lifetime), like 90d; off removes the scope's own cap. Each level narrows the one "
        "above it, the server's auth.max_key_ttl above them all.")
    p.add_argument("path", metavar="PATH", help="ORG, ORG/TEAM, ORG/PROJECT or ORG/TEAM/PROJECT")
    p.add_argument("duration", metavar="DURATION", nargs="?", help="like 720h or 90d, or off")
    register_leaf(p, run_key_lifetime)
    register_mail(sub)


def _out(args, value: Any, line: str) -> int:
    print_json(value) if args.json else print(line)
    return 0


def run_users_forget(args, client: AdminClient) -> int:
    from llmgw.cli.ctl_client import CtlError

    if not args.yes:
        raise CtlError(f"this removes what is kept about {args.user} for good; give --yes to do it "
                       "(nothing changed)", 2)
    done = client.request("POST", "/users/forget", body={"user": args.user})
    lines = [done["message"] if not done["forgotten"] else f"forgot {args.user}; their usage is kept as "
             f"{done['pseudonym']}"]
    for name, count in (done.get("removed") or {}).items():
        lines.append(f"  {name.replace('_', ' ')}: {count}")
    return _out(args, done, "\n".join(lines))


def run_routing(args, client: AdminClient) -> int:
    """routing profiles: `llmgw ctl routing SCOPE [PROFILE | --clear]`."""
    from llmgw.cli.ctl_client import CtlError

    if args.clear and args.profile:
        raise CtlError("give a PROFILE or --clear, not both (nothing changed)", 2)
    if args.clear or args.profile:
        info = client.request("PUT", "/routing", body={"scope": args.scope,
                                                       "routing": None if args.clear else args.profile})
    else:
        info = client.get("/routing", scope=args.scope)
    if info["routing"]:
        line = f"{info['scope']}: routing profile {info['routing']}"
    elif info["in_force_set_by"]:
        line = f"{info['scope']}: routing profile {info['in_force']}, set on its {info['in_force_set_by']}"
    else:
        line = f"{info['scope']}: default routing (no routing profile of its own)"
    return _out(args, info, line)


def run_residency(args, client: AdminClient) -> int:
    if args.in_cluster is None:
        info = client.get("/residency", scope=args.scope)
    else:
        info = client.request("PUT", "/residency", body={"scope": args.scope, "in_cluster": args.in_cluster})
    if info["in_cluster"]:
        line = f"{info['scope']}: in the cluster only (external providers and federation peers are refused)"
    elif info["held_in_cluster"]:
        line = f"{info['scope']}: in the cluster only, by a rule above it"
    else:
        line = f"{info['scope']}: anywhere its models are served"
    return _out(args, info, line)


def run_key_lifetime(args, client: AdminClient) -> int:
    from llmgw.config.units import Duration

    if args.duration is None:
        info = client.request("GET", "/key-lifetime", query={"path": args.path})
    else:
        ttl = None if args.duration.strip().lower() in _OFF else args.duration
        info = client.request("PUT", "/key-lifetime", body={"path": args.path, "max_key_ttl": ttl})
    own = info["max_key_ttl_s"]
    line = f"{info['scope']}: cap {Duration(seconds=own) if own else 'none of its own'}"
    if info["in_force_s"] is None:
        line += "; keys made here may live until revoked"
    else:
        line += f"; keys made here live at most {Duration(seconds=info['in_force_s'])} (set by {info['in_force_set_by']})"
    return _out(args, info, line)


def register_mail(sub) -> None:
    p = sub.add_parser(
        "mail", help="The portal's mail queue: what was sent, what waits, what failed.",
        description="The portal's mail (GET /mail), newest first: reset links, sign-up approvals and budget "
        "notices, each with its state (waiting, sent, failed), attempts and the mail server's last answer. "
        "Bodies are never shown.")
    p.add_argument("--state", choices=("waiting", "sent", "failed"), help="only these")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    register_leaf(p, run_mail)


def run_mail(args, client: AdminClient) -> int:
    from llmgw.cli.common import print_table

    query: dict[str, Any] = {"limit": args.limit}
    if args.state:
        query["state"] = args.state
    info = client.request("GET", "/mail", query=query)
    if args.json:
        print_json(info)
        return 0
    if not info["configured"]:
        print("no mail server is set (mail.host in server.yaml): nothing is sent; reset links are made with "
              "llmgw users reset-link")
    print_table([{"at": m["created_at"][:16].replace("T", " "), "kind": m["kind"], "to": m["to"],
                  "state": m["state"], "attempts": m["attempts"], "last_error": m["last_error"] or ""}
                 for m in info["messages"]], ["at", "kind", "to", "state", "attempts", "last_error"])
    return 0
