"""What the people endpoints read and answer: the organization tree, people,
keys and limits, as `llmgw org|users|keys` change them (through Tenancy)."""

from __future__ import annotations

import datetime as dt

import attrs

from llmgw.admin import forms
from llmgw.admin.fields import UNSET, field

# ---------------------------------------------------------------- the tree


@attrs.frozen(kw_only=True)
class OrgNode:
    """An organization, team or project."""

    kind: str = field("org, team or project.")
    id: str = field("Its id.")
    path: str = field("Its path: ORG, ORG/TEAM, ORG/PROJECT or ORG/TEAM/PROJECT.")


@attrs.frozen(kw_only=True)
class OrgTree:
    """Every organization, then its teams with their projects, then its projects outside teams."""

    nodes: list[OrgNode] = field("The tree, flattened in that order.")


@attrs.frozen(kw_only=True)
class OrgCreate:
    """A new organization, team or project, by its path."""

    path: str = field("acme (an organization), acme/search (a team), acme/search/indexer (a project in a team).",
                      schema=forms.ORG_PATH)
    project: bool = field("Make ORG/NAME a project directly in the organization rather than a team.", False)

    #: a project is in an organization: with project true the path has two parts or three
    __schema__ = {"if": {"properties": {"project": {"const": True}}, "required": ["project"]},
                  "then": {"properties": {"path": {"pattern": "/"}}}}


@attrs.frozen(kw_only=True)
class OrgPathQuery:
    path: str = field("The path of the organization, team or project.", schema=forms.ORG_PATH)
    kind: str | None = field("team or project, when ORG/NAME could be either.", None,
                             schema={"enum": ["team", "project"]})


# ---------------------------------------------------------------- people


@attrs.frozen(kw_only=True)
class UserInfo:
    """A person."""

    id: str = field("Their id, usr-….")
    email: str = field("Their email, in lower case.")
    name: str = field("Their name.")
    role: str = field("Their staff role: none, viewer, operator, billing or admin.")
    state: str = field("active, pending or suspended.")
    has_password: bool = field("They can sign in with a password (otherwise only through single sign-on).")
    created_at: dt.datetime = field("When the account was made.")


@attrs.frozen(kw_only=True)
class UserList:
    """People, by email."""

    users: list[UserInfo] = field("The people.")


@attrs.frozen(kw_only=True)
class UserQuery:
    state: str | None = field("Only people in this state: active, pending or suspended.", None,
                              schema={"enum": ["active", "pending", "suspended"]})
    role: str | None = field("Only people with this staff role.", None, schema={"enum": ["none", "viewer", "operator", "billing", "admin"]})


@attrs.frozen(kw_only=True)
class UserCreate:
    """A new person."""

    email: str = field("Their email; unique.", schema=forms.EMAIL)
    name: str = field("Their name; default the email's local part.", "", schema=forms.NAME)
    role: str = field("Their staff role: none, viewer, operator, billing or admin.", "none", schema={"enum": ["none", "viewer", "operator", "billing", "admin"]})
    state: str = field("active, or pending to wait for approval.", "active", schema={"enum": ["active", "pending"]})


@attrs.frozen(kw_only=True)
class MembershipInfo:
    """A person's place in the tree."""

    scope_kind: str = field("org, team or project.")
    scope_id: str = field("Its id.")
    path: str = field("Its path.")
    role: str = field("owner or member.")


@attrs.frozen(kw_only=True)
class UserDetail:
    """A person and where they belong."""

    user: UserInfo = field("The person.")
    memberships: list[MembershipInfo] = field("The organizations, teams and projects they are in.")


@attrs.frozen(kw_only=True)
class UserState:
    state: str = field("active (reinstate or approve) or suspended (their keys stop working).",
                       schema={"enum": ["active", "suspended"]})


@attrs.frozen(kw_only=True)
class UserRole:
    role: str = field("none, viewer, operator, billing or admin.", schema={"enum": ["none", "viewer", "operator", "billing", "admin"]})


@attrs.frozen(kw_only=True)
class MemberAdd:
    path: str = field("The organization, team or project.", schema=forms.ORG_PATH)
    role: str = field("member or owner.", "member", schema={"enum": ["member", "owner"]})


@attrs.frozen(kw_only=True)
class MemberPathQuery:
    path: str = field("The organization, team or project to take them out of.", schema=forms.ORG_PATH)


# ---------------------------------------------------------------- keys


@attrs.frozen(kw_only=True)
class KeyInfo:
    """An API key, without its secret (which is never kept)."""

    id: str = field("Its id, key-….")
    prefix: str = field("The start of its secret, shown to tell keys apart.")
    name: str = field("Its name.")
    kind: str = field("service (a project's), member (a person's in a project) or personal.")
    state: str = field("active, revoked or expired.")
    project_id: str | None = field("Its project.", None)
    user_id: str | None = field("Its owner.", None)
    band: str | None = field("Its priority band; null uses the default.", None)
    models: list[str] | None = field("Models it may use; null is whatever its limits allow.", None)
    created_at: dt.datetime = field("When it was issued.")
    expires_at: dt.datetime | None = field("When it stops working by itself.", None)
    revoked_at: dt.datetime | None = field("When it was (or will be) revoked.", None)
    last_used_at: dt.datetime | None = field("When it was last used.", None)


@attrs.frozen(kw_only=True)
class KeyList:
    """Keys, newest first."""

    keys: list[KeyInfo] = field("The keys.")


@attrs.frozen(kw_only=True)
class KeyQuery:
    project: str | None = field("Only this project's keys (its path).", None, schema=forms.ORG_PATH)
    user: str | None = field("Only this person's keys (email or id).", None, schema=forms.PERSON)
    all: bool = field("Revoked and expired keys too.", False)


@attrs.frozen(kw_only=True)
class KeyCreate:
    """A new key: a project's (service), a person's (personal), or a person's within a project (member)."""

    project: str | None = field("The project's path.", None, schema=forms.ORG_PATH)
    user: str | None = field("The owner's email or id.", None, schema=forms.PERSON)
    name: str = field("A name to know it by.", "", schema=forms.NAME)
    ttl: str | None = field("How long it lives, like 90d; null lives until revoked (or auth.max_key_ttl).", None,
                            schema=forms.POSITIVE_DURATION)
    band: str | None = field("Its priority band.", None)
    models: list[str] | None = field("Models it may use; null is whatever its limits allow.", None)

    #: a key belongs to a project, a person, or both
    __schema__ = {"anyOf": [{"properties": {"project": {"type": "string"}}, "required": ["project"]},
                            {"properties": {"user": {"type": "string"}}, "required": ["user"]}]}


@attrs.frozen(kw_only=True)
class IssuedKey:
    """A key just made. The secret is in this answer and nowhere else."""

    key: KeyInfo = field("The key.")
    secret: str = field("The key itself, to give to its user; it cannot be shown again.")


@attrs.frozen(kw_only=True)
class KeyRotate:
    overlap: str = field("How long the old key keeps working, like 24h; 0s stops it now.", "24h",
                         schema=forms.DURATION)


@attrs.frozen(kw_only=True)
class RotatedKey:
    """A rotation: the new key and the old one as it now is."""

    new: IssuedKey = field("The new key, with its secret.")
    old: KeyInfo = field("The old key, ending after the overlap.")


# ---------------------------------------------------------------- limits


@attrs.frozen(kw_only=True)
class LimitValues:
    """Limits on one scope; null is no limit at this level."""

    rpm: int | None = field("Requests a minute.", None)
    tpm: int | None = field("Tokens a minute.", None)
    budget_micros: int | None = field("Money per period, in millionths of the currency.", None)
    budget_period: str | None = field("day or month.", None)
    models: list[str] | None = field("Models allowed.", None)


@attrs.frozen(kw_only=True)
class LimitsInfo:
    """The limits set on one scope."""

    scope: str = field("The scope, as kind:label.")
    limits: LimitValues | None = field("Its limits; null when none are set.", None)


@attrs.frozen(kw_only=True)
class LimitsSet:
    """Change some limits of a scope; fields left out keep their value, null removes one."""

    scope: str = field("org:NAME, team:ORG/TEAM, project:PATH, user:EMAIL or key:ID.",
                       schema=forms.SCOPE)
    rpm: int | None = field("Requests a minute.", UNSET)
    tpm: int | None = field("Tokens a minute.", UNSET)
    budget_micros: int | None = field("Money per period, in millionths of the currency.", UNSET)
    budget_period: str | None = field("day or month (a budget without one is per month).", UNSET)
    models: list[str] | None = field("Models allowed.", UNSET)
