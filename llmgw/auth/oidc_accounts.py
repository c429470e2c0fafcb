"""From a provider's claims to a person here: their account, staff role and organizations.

`identity_of` reads the claims with `auth.oidc.claims` and `auth.oidc.rules`;
`account_for` finds the person by email (making an active account, with no
password, at their first sign-in), sets the staff role the rules give and
adds them to the organizations the rules name (an organization is made if
it does not exist yet). Each change is audited as the same change made with
`llmgw users` would be, by `oidc:<issuer>`.

Roles: when any rule gives a role, the rules decide the role at every
sign-in (the first rule that matches and gives one; no match is no staff
role), so taking someone out of a group at the provider takes the role away
here at their next sign-in. When no rule gives a role, roles are left to
administrators. Organizations are only ever added.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from llmgw.auth.oidc import OIDCError
from llmgw.auth.tenancy import Tenancy
from llmgw.config.server import OIDCConfig, OIDCRule
from llmgw.store import Invalid, NotFound, User
from llmgw.store import validate as store_validate


@attrs.frozen
class Identity:
    """Who the provider says signed in, and what the rules give them."""

    email: str
    name: str
    role: str | None  # None: the rules say nothing of roles
    orgs: tuple[str, ...] = ()


def _values(claim: Any) -> list[str]:
    if isinstance(claim, (list, tuple)):
        return [str(v) for v in claim if isinstance(v, (str, int, float, bool))]
    if claim is None or isinstance(claim, dict):
        return []
    return [str(claim)]


def rule_matches(rule: OIDCRule, claims: Mapping[str, Any]) -> bool:
    claim = claims.get(rule.claim)
    values = _values(claim)
    if rule.equals:
        return rule.equals in values
    if rule.suffix:
        return any(v.lower().endswith(rule.suffix.lower()) for v in values)
    if rule.contains:
        if isinstance(claim, str):
            return rule.contains in claim
        return rule.contains in values
    return False


def identity_of(claims: Mapping[str, Any], config: OIDCConfig) -> Identity:
    """The person in the claims; OIDCError when they carry no usable address."""
    raw_email = claims.get(config.claims.email)
    if claims.get("email_verified") is False and config.claims.email == "email":
        raise OIDCError("the provider says this email address is not verified; verify it there and sign in again")
    try:
        email = store_validate.check_email(raw_email)
    except Invalid:
        raise OIDCError(f"the provider's {config.claims.email!r} claim holds no email address "
                        "(set auth.oidc.claims.email to the claim that does)") from None
    name = " ".join(str(claims.get(config.claims.name) or "").split())[:100] or email.split("@", 1)[0]
    role: str | None = None
    if any(rule.role for rule in config.rules):
        role = next((r.role for r in config.rules if r.role and rule_matches(r, claims)), "none")
    orgs: list[str] = []
    for rule in config.rules:
        if rule.org and rule.org not in orgs and rule_matches(rule, claims):
            orgs.append(rule.org)
    return Identity(email, name, role, tuple(orgs))


class Refused(OIDCError):
    """The person is known here but may not sign in (``state`` says why: pending or suspended)."""

    def __init__(self, state: str) -> None:
        super().__init__(f"the account is {state}")
        self.state = state


async def account_for(tenancy: Tenancy, identity: Identity) -> User:
    """The person's account, made or brought in line with the rules; Refused when it is not active."""
    store = tenancy.store
    user = await store.get_user_by_email(identity.email)
    if user is None:
        user = await tenancy.create_user(identity.email, identity.name, role=identity.role or "none")
    if user.state != "active":
        raise Refused(user.state)
    if identity.role is not None and user.role != identity.role:
        user = await tenancy.set_user_role(user.id, identity.role)
    if identity.orgs:
        have = {(m.scope_kind, m.scope_id) for m in await store.list_memberships(user_id=user.id)}
        for org in identity.orgs:
            try:
                node = await tenancy.find(org, "org")
            except NotFound:
                node = await tenancy.create(org)
            if ("org", node.id) not in have:
                await tenancy.add_member(user.id, node.path)
    return user
