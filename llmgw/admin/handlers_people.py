"""Handlers of the people endpoints: the organization tree, people, keys and limits.

Each goes through `Tenancy` (llmgw/auth/tenancy.py), the same code as
`llmgw org|users|keys`, so the checks and the messages are those; Tenancy
writes the audit event itself, with the request's actor and via.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from llmgw.admin.api_types import Done
from llmgw.admin.dispatch import Call
from llmgw.admin.errors import ApiError
from llmgw.admin.fields import UNSET
from llmgw.admin.people_types import (
    IssuedKey,
    KeyInfo,
    KeyList,
    LimitsInfo,
    LimitValues,
    MembershipInfo,
    OrgNode,
    OrgTree,
    RotatedKey,
    UserDetail,
    UserInfo,
    UserList,
)
from llmgw.auth.tenancy import UNCHANGED, key_state
from llmgw.config.units import Duration
from llmgw.store import ApiKey, Limits, User

# ---------------------------------------------------------------- the tree


def _node(n: Any) -> OrgNode:
    return OrgNode(kind=n.kind, id=n.id, path=n.path)


async def list_orgs(call: Call) -> OrgTree:
    """Every organization, its teams and their projects, and its projects outside teams."""
    return OrgTree(nodes=[_node(n) for n in await call.tenancy().tree()])


async def create_org(call: Call) -> OrgNode:
    """Make an organization (acme), a team (acme/search), a project in a team (acme/search/indexer), or with
    `project` a project directly in the organization (acme/indexer)."""
    node = await call.tenancy().create(call.body.path, project=call.body.project)
    call.target = f"{node.kind}:{node.id}"
    return _node(node)


async def remove_org(call: Call) -> OrgNode:
    """Remove an organization, team or project with nothing left in it (409 otherwise)."""
    node = await call.tenancy().remove(call.query.path, call.query.kind)
    return _node(node)


# ---------------------------------------------------------------- people


def _user(u: User) -> UserInfo:
    return UserInfo(id=u.id, email=u.email, name=u.name, role=u.role, state=u.state,
                    has_password=u.password_hash is not None, created_at=u.created_at)


async def list_users(call: Call) -> UserList:
    """People, by email; only those in a state or with a staff role when asked."""
    users = await call.tenancy().list_users(state=call.query.state, role=call.query.role)
    return UserList(users=[_user(u) for u in users])


async def create_user(call: Call) -> UserInfo:
    """Add a person: active, or pending to wait for approval."""
    b = call.body
    user = await call.tenancy().create_user(b.email, b.name, role=b.role, state=b.state)
    call.target = f"user:{user.id}"
    return _user(user)


async def get_user(call: Call) -> UserDetail:
    """A person (by email or id) and the organizations, teams and projects they belong to."""
    tenancy = call.tenancy()
    user = await tenancy.find_user(call.params["user"])
    memberships = []
    for m in await call.store.list_memberships(user_id=user.id):
        memberships.append(MembershipInfo(scope_kind=m.scope_kind, scope_id=m.scope_id,
                                          path=await tenancy.path_of(m.scope_kind, m.scope_id), role=m.role))
    return UserDetail(user=_user(user), memberships=memberships)


async def set_user_state(call: Call) -> UserInfo:
    """Suspend a person (their keys stop working at once), or reinstate or approve one."""
    return _user(await call.tenancy().set_user_state(call.params["user"], call.body.state))


async def set_user_role(call: Call) -> UserInfo:
    """Give a person a staff role."""
    return _user(await call.tenancy().set_user_role(call.params["user"], call.body.role))


async def add_membership(call: Call) -> MembershipInfo:
    """Make a person a member (or owner) of an organization, team or project."""
    tenancy = call.tenancy()
    m = await tenancy.add_member(call.params["user"], call.body.path, call.body.role)
    return MembershipInfo(scope_kind=m.scope_kind, scope_id=m.scope_id,
                          path=await tenancy.path_of(m.scope_kind, m.scope_id), role=m.role)


async def remove_membership(call: Call) -> Done:
    """Take a person out of an organization, team or project (their keys there are not revoked)."""
    await call.tenancy().remove_member(call.params["user"], call.query.path)
    return Done(done=f"{call.params['user']} is no longer in {call.query.path}")


# ---------------------------------------------------------------- keys


def _key(k: ApiKey, now: dt.datetime) -> KeyInfo:
    return KeyInfo(id=k.id, prefix=k.prefix, name=k.name, kind=k.kind, state=key_state(k, now),
                   project_id=k.project_id, user_id=k.user_id, band=k.priority_band,
                   models=list(k.allowed_models) if k.allowed_models is not None else None,
                   created_at=k.created_at, expires_at=k.expires_at, revoked_at=k.revoked_at,
                   last_used_at=k.last_used_at)


def _duration(text: str | None, what: str) -> dt.timedelta | None:
    if text is None:
        return None
    try:
        return Duration.parse(text)
    except ValueError as exc:
        raise ApiError(400, f"{what}: {exc}") from None


async def list_keys(call: Call) -> KeyList:
    """Keys of a project or a person (or every key), newest first; revoked and expired ones with `all`."""
    q = call.query
    tenancy = call.tenancy()
    keys = await tenancy.list_keys(project=q.project, user=q.user, include_unusable=q.all)
    now = tenancy.now()
    return KeyList(keys=[_key(k, now) for k in keys])


async def create_key(call: Call) -> IssuedKey:
    """Issue a key. Its secret is in the answer and nowhere else (not in the audit log either)."""
    b = call.body
    tenancy = call.tenancy()
    issued = await tenancy.create_key(project=b.project, user=b.user, name=b.name,
                                      ttl=_duration(b.ttl, "ttl"), band=b.band, models=b.models)
    call.target = f"key:{issued.key.id}"
    return IssuedKey(key=_key(issued.key, tenancy.now()), secret=issued.secret)


async def revoke_key(call: Call) -> KeyInfo:
    """Revoke a key (by id or prefix) now."""
    tenancy = call.tenancy()
    return _key(await tenancy.revoke_key(call.params["key"]), tenancy.now())


async def rotate_key(call: Call) -> RotatedKey:
    """A new key with the old one's project, owner, limits and lifetime; the old one works on for `overlap`."""
    tenancy = call.tenancy()
    overlap = _duration(call.body.overlap, "overlap")
    assert overlap is not None
    issued, old = await tenancy.rotate_key(call.params["key"], overlap)
    now = tenancy.now()
    return RotatedKey(new=IssuedKey(key=_key(issued.key, now), secret=issued.secret), old=_key(old, now))


# ---------------------------------------------------------------- limits


def _limits(limits: Limits | None) -> LimitValues | None:
    if limits is None:
        return None
    return LimitValues(rpm=limits.rpm, tpm=limits.tpm, budget_micros=limits.budget_micros,
                       budget_period=limits.budget_period,
                       models=list(limits.allowed_models) if limits.allowed_models is not None else None)


async def get_limits(call: Call) -> LimitsInfo:
    """The limits set on one organization, team, project, person or key (not the ones above it)."""
    tenancy = call.tenancy()
    scope = await tenancy.scope(call.query.scope)
    return LimitsInfo(scope=str(scope), limits=_limits(await tenancy.get_limits(scope)))


async def set_limits(call: Call) -> LimitsInfo:
    """Change some limits of a scope, keeping the others; null removes one. Each level only narrows the
    levels above it."""
    b = call.body
    tenancy = call.tenancy()
    scope = await tenancy.scope(b.scope)
    call.target = f"{scope.kind}:{scope.id}"

    def given(value: Any) -> Any:
        return UNCHANGED if value is UNSET else value

    limits = await tenancy.set_limits(scope, rpm=given(b.rpm), tpm=given(b.tpm),
                                      budget_micros=given(b.budget_micros), budget_period=given(b.budget_period),
                                      allowed_models=given(b.models))
    return LimitsInfo(scope=str(scope), limits=_limits(limits))


async def clear_limits(call: Call) -> LimitsInfo:
    """Remove every limit set on a scope."""
    tenancy = call.tenancy()
    scope = await tenancy.scope(call.query.scope)
    call.target = f"{scope.kind}:{scope.id}"
    if not await tenancy.clear_limits(scope):
        raise ApiError(404, f"{scope}: has no limits set")
    return LimitsInfo(scope=str(scope), limits=None)
