"""The data endpoints: forgetting a person, a scope's residency, its routing profile and its key lifetime cap.

Each goes through `Tenancy`, the same code as `llmgw users forget` and `llmgw keys residency|lifetime`,
so the checks and the messages are those. A forget's audit event names the person by their pseudonym
alone: the request's fields (their email) are left out of it.
"""

from __future__ import annotations

from llmgw.admin.data_types import ForgetRemoved, ForgetResult, KeyLifetime, Residency, Routing
from llmgw.admin.dispatch import Call
from llmgw.admin.errors import ApiError
from llmgw.config.units import Duration
from llmgw.store.people import FORGET_PARTS


def forget_result(report, ref: str) -> ForgetResult:
    """A Tenancy.forget_user report as the API answers it (the portal's /admin says the same)."""
    if report is None:
        return ForgetResult(forgotten=False, nothing_left=True, pseudonym=None, removed=None,
                            message=f"nothing is kept about {ref}: no one has that email or id "
                                    "(forgotten already, or never here)")
    if report.already_forgotten:
        return ForgetResult(forgotten=False, nothing_left=True, pseudonym=report.pseudonym, removed=None,
                            message=f"forgotten already, as {report.pseudonym}; nothing is left to remove")
    removed = ForgetRemoved(**{name: getattr(report, name) for name, _ in FORGET_PARTS})
    words = ", ".join(f"{words}: {getattr(report, name)}" for name, words in FORGET_PARTS)
    return ForgetResult(forgotten=True, nothing_left=False, pseudonym=report.pseudonym, removed=removed,
                        message=f"forgotten; their usage is kept as {report.pseudonym} ({words})")


async def forget_user(call: Call) -> ForgetResult:
    """Forget a person: keys revoked, sessions, reset links, memberships, own limits, personal files,
    batches and kept answers deleted, usage kept under a pseudonym. Run again, it says nothing is left."""
    ref = call.body.user
    call.fields = {}  # the audit log keeps the pseudonym, never the email asked for
    call.target = "user:forgotten"
    report = await call.tenancy().forget_user(ref)
    if report is not None:
        call.target = f"user:{report.pseudonym}"
    return forget_result(report, "that person" if report is None else ref)


async def _residency(call: Call, tenancy, scope) -> Residency:
    rule = await call.store.get_scope_rule(scope.kind, scope.id)
    own = bool(rule and rule.in_cluster)
    held = own
    if scope.kind == "key":
        held = bool(await tenancy.in_cluster_of(await tenancy.find_key(scope.id)))
    return Residency(scope=str(scope), in_cluster=own, held_in_cluster=held)


async def get_residency(call: Call) -> Residency:
    """Where an organization's, a project's or a key's requests may be served."""
    tenancy = call.tenancy()
    return await _residency(call, tenancy, await tenancy.residency_scope(call.query.scope))


async def set_residency(call: Call) -> Residency:
    """Keep the requests of an organization, project or key on the cluster's own engines (external providers
    and federation peers are refused, with the reason), or lift that. A no_store policy keeps keys in too."""
    tenancy = call.tenancy()
    scope = await tenancy.set_residency(call.body.scope, call.body.in_cluster)
    call.target = f"{scope.kind}:{scope.id}"
    return await _residency(call, tenancy, scope)


async def _routing(call: Call, tenancy, scope) -> Routing:  # routing profiles
    rule = await call.store.get_scope_rule(scope.kind, scope.id)
    own = rule.routing if rule else None
    held, set_by = own, scope.kind if own else ""
    if scope.kind == "key":
        held, set_by = await tenancy.routing_of(await tenancy.find_key(scope.id))
    return Routing(scope=str(scope), routing=own, in_force=held or "default", in_force_set_by=set_by or None)


async def get_routing(call: Call) -> Routing:
    """The routing profile an organization, a project or a key sets, and the one in force."""
    tenancy = call.tenancy()
    return await _routing(call, tenancy, await tenancy.residency_scope(call.query.scope))


async def set_routing(call: Call) -> Routing:
    """Route the keys of an organization, project or key by a routing profile (the narrowest set wins), or
    remove the scope's own; a name that is not a built-in profile or one of router.profiles is refused."""
    tenancy = call.tenancy()
    scope = await tenancy.set_routing(call.body.scope, call.body.routing)
    call.target = f"{scope.kind}:{scope.id}"
    return await _routing(call, tenancy, scope)


async def _lifetime(call: Call, tenancy, node) -> KeyLifetime:
    rule = await call.store.get_scope_rule(node.kind, node.id)
    cap = await tenancy.key_lifetime_cap(node)
    return KeyLifetime(scope=f"{node.kind}:{node.path}", max_key_ttl_s=rule.max_key_ttl_s if rule else None,
                       in_force_s=None if cap.ttl is None else int(cap.ttl.total_seconds()),
                       in_force_set_by=cap.where or None)


async def get_key_lifetime(call: Call) -> KeyLifetime:
    """How long keys made in an organization, team or project may live: its own cap and the one in force."""
    tenancy = call.tenancy()
    return await _lifetime(call, tenancy, await tenancy.find(call.query.path))


async def set_key_lifetime(call: Call) -> KeyLifetime:
    """Cap how long keys made in an organization, team or project may live; each level narrows the one above
    it. Keys made before keep their lifetimes."""
    b = call.body
    ttl = None
    if b.max_key_ttl is not None:
        try:
            ttl = Duration.parse(b.max_key_ttl)
        except ValueError as exc:
            raise ApiError(400, f"max_key_ttl: {exc}") from None
    tenancy = call.tenancy()
    await tenancy.set_key_lifetime(b.path, ttl)
    node = await tenancy.find(b.path)
    call.target = f"{node.kind}:{node.id}"
    return await _lifetime(call, tenancy, node)


__all__ = ["forget_result", "forget_user", "get_key_lifetime", "get_residency", "get_routing", "set_key_lifetime",
           "set_residency", "set_routing"]
