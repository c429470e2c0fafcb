"""`llmgw keys residency`, `llmgw keys routing` and `llmgw keys lifetime`: what an organization, team,
project or key says about its keys (against the store). Registered by llmgw.cli.keys_cmd."""

from __future__ import annotations

import argparse

from llmgw.cli.common import add_json_flag, print_json
from llmgw.cli.store_access import add_store_arguments, parse_duration, tenancy_command

_OFF = ("off", "none", "-")


def register(commands) -> None:
    residency = commands.add_parser(
        "residency", help="Keep a key's requests on the cluster's own engines, or let them go anywhere.",
        description="Show (no option) or set where the requests of a key, of every key of a project, or of every "
        "key of an organization may be served: with --in-cluster only by the cluster's own engines (a model "
        "served by an external provider or a federation peer is refused, with the reason, and never used as a "
        "fallback); --anywhere lifts it. SCOPE is key:KEY (id or prefix), project:PATH or org:NAME (a bare key "
        "id or path works too). A guardrails policy with no_store keeps a key in the cluster as well.",
    )
    residency.add_argument("scope", metavar="SCOPE")
    where = residency.add_mutually_exclusive_group()
    where.add_argument("--in-cluster", dest="in_cluster", action="store_const", const=True,
                       help="only the cluster's own engines")
    where.add_argument("--anywhere", dest="in_cluster", action="store_const", const=False,
                       help="lift the scope's own residency rule (one set above it still holds)")
    _common(residency, _residency)

    routing = commands.add_parser(  # routing profiles (llmgw.router.routing_profiles)
        "routing", help="Show or set the routing profile a key, a project's keys or an organization's keys get.",
        description="Show (no PROFILE) or set how the requests of a key, of every key of a project, or of every "
        "key of an organization choose their replica: latency-first (the least busy replica), cost-first (the "
        "cluster's own engines, then server.yaml's endpoints, then federation peers), pinned:POOL (only the "
        "cluster's own replicas on nodes labelled pool: POOL; none up: refused) or a profile of server.yaml's "
        "router.profiles (checked with --config); default routes as without a profile, and --clear removes "
        "the scope's own (one set above it then holds). The narrowest scope that sets one wins. SCOPE is "
        "key:KEY (id or prefix), project:PATH or org:NAME (a bare key id or path works too). Running gateways "
        "take a change up within a minute (their key cache).",
    )
    routing.add_argument("scope", metavar="SCOPE")
    routing.add_argument("profile", metavar="PROFILE", nargs="?")
    routing.add_argument("--clear", action="store_true", help="remove the scope's own profile")
    _common(routing, _routing)

    lifetime = commands.add_parser(
        "lifetime", help="Show or cap how long keys made in an organization, team or project may live.",
        description="Show (no DURATION) or set the longest lifetime of a key made in an organization, team or "
        "project, like 90d; off removes the scope's own cap. Each level narrows the one above it "
        "(auth.max_key_ttl of server.yaml, with --config, is above them all): a longer cap is refused. A key "
        "asked for with a longer lifetime is refused, naming the cap and where it is set; a key asked for with "
        "none gets the narrowest cap. Keys made before keep their lifetimes.",
    )
    lifetime.add_argument("path", metavar="PATH", help="ORG, ORG/TEAM, ORG/PROJECT or ORG/TEAM/PROJECT")
    lifetime.add_argument("duration", metavar="DURATION", nargs="?", help="like 720h or 90d, or off")
    _common(lifetime, _lifetime)


def _common(parser: argparse.ArgumentParser, fn) -> None:
    add_json_flag(parser)
    add_store_arguments(parser)
    parser.set_defaults(handler=tenancy_command(fn))


async def _residency(args, tenancy) -> int:
    if args.in_cluster is None:
        scope = await tenancy.residency_scope(args.scope)
        rule = await tenancy.store.get_scope_rule(scope.kind, scope.id)
        own = bool(rule and rule.in_cluster)
        held = own
        if scope.kind == "key":
            held = bool(await tenancy.in_cluster_of(await tenancy.find_key(scope.id)))
    else:
        scope = await tenancy.set_residency(args.scope, args.in_cluster)
        own = args.in_cluster
        held = own if scope.kind != "key" else bool(await tenancy.in_cluster_of(await tenancy.find_key(scope.id)))
    if args.json:
        print_json({"scope": scope.kind, "id": scope.id, "label": scope.label, "in_cluster": own,
                    "held_in_cluster": held})
        return 0
    if own:
        print(f"{scope}: in the cluster only (external providers and federation peers are refused)")
    elif held:
        print(f"{scope}: in the cluster only, by a rule above it (its project or organization)")
    else:
        print(f"{scope}: anywhere its models are served (no residency rule of its own)")
    return 0


async def _routing(args, tenancy) -> int:
    """routing profiles: `llmgw keys routing SCOPE [PROFILE | --clear]`."""
    if args.clear and args.profile:
        raise ValueError("routing: give a PROFILE or --clear, not both")
    if args.clear or args.profile:
        scope = await tenancy.set_routing(args.scope, None if args.clear else args.profile)
    else:
        scope = await tenancy.residency_scope(args.scope)
    rule = await tenancy.store.get_scope_rule(scope.kind, scope.id)
    own = rule.routing if rule else None
    held, set_by = own, scope.kind if own else ""
    if scope.kind == "key":
        held, set_by = await tenancy.routing_of(await tenancy.find_key(scope.id))
    if args.json:
        print_json({"scope": scope.kind, "id": scope.id, "label": scope.label, "routing": own,
                    "in_force": held or "default", "in_force_set_by": set_by or None})
        return 0
    if own:
        print(f"{scope}: routing profile {own}")
    elif held:
        print(f"{scope}: routing profile {held}, set on its {'project' if set_by == 'project' else 'organization'}")
    else:
        print(f"{scope}: default routing (no routing profile of its own)")
    return 0


async def _lifetime(args, tenancy) -> int:
    node = await tenancy.find(args.path)
    if args.duration is not None:
        ttl = None if args.duration.strip().lower() in _OFF else parse_duration(args.duration, "DURATION")
        await tenancy.set_key_lifetime(args.path, ttl)
    rule = await tenancy.store.get_scope_rule(node.kind, node.id)
    own = rule.max_key_ttl_s if rule else None
    cap = await tenancy.key_lifetime_cap(node)
    if args.json:
        print_json({"scope": node.kind, "id": node.id, "path": node.path, "max_key_ttl_s": own,
                    "in_force_s": None if cap.ttl is None else int(cap.ttl.total_seconds()),
                    "in_force_set_by": cap.where or None})
        return 0
    mine = _span(own) if own else "none of its own"
    print(f"{node.kind} {node.path}: cap {mine}")
    if cap.ttl is None:
        print("  keys made here may live until revoked")
    else:
        print(f"  keys made here live at most {_span(cap.ttl.total_seconds())} (set by {cap.where})")
    return 0


def _span(seconds: float) -> str:
    from llmgw.config.units import Duration

    return str(Duration(seconds=seconds))
