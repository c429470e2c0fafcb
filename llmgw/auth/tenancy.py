"""Tenancy: organizations, teams, projects, people, keys and limits, changed
the way `llmgw org|users|keys` (and later the admin API) change them.

Everything is named the way people type it: a path like ``acme/search/indexer``
(organization / team / project; ``acme/indexer`` is a team, or a project
directly in the organization), an email, a key id (``key-…``) or its visible
prefix (``llmgw-ab12cd``). Each operation checks its input first and raises
the store's errors (Invalid, NotFound, Conflict) with a message naming the
field; then it writes, appends an audit event with the actor, and tells
``on_change`` (a key resolver's ``invalidate``) which cached principals to
forget.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from llmgw.auth.key_hash import KeyHasher
from llmgw.auth.keys import new_secret, visible_prefix
from llmgw.store import (
    BUDGET_PERIODS,
    LIMIT_SCOPES,
    MEMBER_ROLES,
    STAFF_ROLES,
    USER_STATES,
    ApiKey,
    Conflict,
    Invalid,
    Limits,
    Membership,
    NotFound,
    Organization,
    Project,
    Store,
    Team,
    User,
)
from llmgw.store.people import FORGET_PARTS, ForgetReport

UTC = dt.UTC

class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


#: Passed for a limit field to leave it as it is.
UNCHANGED: Any = _Unchanged()


@attrs.frozen
class Node:
    """An organization, team or project, with its path."""

    kind: str  # "org", "team" or "project"
    id: str
    path: str
    org: Organization
    team: Team | None = None
    project: Project | None = None

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@attrs.frozen
class Scope:
    """Anything limits can be set on: a node, a person or a key."""

    kind: str  # one of LIMIT_SCOPES
    id: str
    label: str  # the path, email or key id people know it by

    def __str__(self) -> str:
        return f"{self.kind}:{self.label}"


#: Where the server's own cap on key lifetimes is set, as refusals name it.
SERVER_CAP = "auth.max_key_ttl in server.yaml"


@attrs.frozen
class LifetimeCap:
    """The longest a key may live somewhere (None: no cap), and what sets it."""

    ttl: dt.timedelta | None
    where: str


@attrs.frozen
class IssuedKey:
    """A key just made: its record and its secret, which is never shown again."""

    key: ApiKey
    secret: str = attrs.field(repr=False)


def key_state(key: ApiKey, now: dt.datetime) -> str:
    """``active``, ``revoked``, ``expired`` or ``expiring`` (revoked or expiring later)."""
    if key.revoked_at is not None and key.revoked_at <= now:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return "active"


class Tenancy:
    """The tenancy operations against one store, made on behalf of ``actor``.

    ``max_key_ttl`` caps how long a key may live (and is the lifetime of one
    made without any); ``bands`` and ``models`` (name or alias -> model, see
    ``llmgw.auth.keys.model_aliases``), when given, are what a key's band and
    model list are checked against. ``hasher`` hashes new keys' secrets
    (llmgw.auth.key_hash; plain SHA-256 when not given). ``clock`` gives
    aware datetimes (tests).
    """

    def __init__(
        self,
        store: Store,
        *,
        actor: str,
        max_key_ttl: dt.timedelta | None = None,
        bands: Sequence[str] | None = None,
        models: Mapping[str, str] | None = None,
        routing_profiles: Any = None,
        on_change: Callable[[str | None], None] | None = None,
        hasher: KeyHasher | None = None,
        clock: Callable[[], dt.datetime] | None = None,
    ) -> None:
        if not actor or not actor.strip():
            raise Invalid("actor: say who makes the changes")
        self.store = store
        self.actor = actor.strip()
        self.max_key_ttl = max_key_ttl if max_key_ttl and max_key_ttl > dt.timedelta(0) else None
        self.bands = tuple(bands) if bands else None
        #: routing profiles: a llmgw.router.routing_profiles.RoutingProfiles names are checked against; None: any
        self.routing_profiles = routing_profiles
        self.models = dict(models) if models else None
        self._on_change = on_change
        self.hasher = hasher or KeyHasher()
        self._clock = clock or (lambda: dt.datetime.now(UTC))

    def now(self) -> dt.datetime:
        return self._clock().astimezone(UTC)

    async def _audit(self, action: str, target: str, detail: Mapping[str, Any] | None = None) -> None:
        await self.store.append_audit(self.actor, action, target, dict(detail) if detail else None)

    def _changed(self, key_id: str | None = None) -> None:
        if self._on_change is not None:
            self._on_change(key_id)

    # ---- organizations, teams, projects ------------------------------------

    async def find(self, path: str, kind: str | None = None) -> Node:
        """The node at ``path``; ``kind`` ("team" or "project") settles ``org/x``."""
        parts = split_path(path)
        org = await self.store.get_org_by_name(parts[0])
        if org is None:
            raise NotFound(f"no organization named {parts[0]!r}")
        if len(parts) == 1:
            if kind not in (None, "org"):
                raise Invalid(f"{path!r}: a {kind} path has more than one part")
            return Node("org", org.id, org.name, org)
        if len(parts) == 2:
            if kind != "project":
                team = await self.store.get_team_by_name(org.id, parts[1])
                if team is not None:
                    return Node("team", team.id, f"{org.name}/{team.name}", org, team)
            if kind != "team":
                project = await self.store.get_project_by_name(org.id, parts[1])
                if project is not None:
                    return Node("project", project.id, f"{org.name}/{project.name}", org, None, project)
            what = {"team": "team", "project": "project"}.get(kind or "", "team or project")
            raise NotFound(f"no {what} named {parts[1]!r} in {org.name}")
        if kind not in (None, "project"):
            raise Invalid(f"{path!r}: a path of three parts names a project")
        team = await self.store.get_team_by_name(org.id, parts[1])
        if team is None:
            raise NotFound(f"no team named {parts[1]!r} in {org.name}")
        project = await self.store.get_project_by_name(org.id, parts[2], team.id)
        if project is None:
            raise NotFound(f"no project named {parts[2]!r} in {org.name}/{team.name}")
        return Node("project", project.id, f"{org.name}/{team.name}/{project.name}", org, team, project)

    async def create(self, path: str, *, project: bool = False) -> Node:
        """A new organization (``acme``), team (``acme/search``), project in a
        team (``acme/search/indexer``) or, with ``project``, a project directly
        in the organization (``acme/indexer``)."""
        parts = split_path(path)
        if len(parts) == 1:
            if project:
                raise Invalid(f"{path!r}: a project needs its organization: ORG/PROJECT or ORG/TEAM/PROJECT")
            org = await self.store.create_org(parts[0])
            node = Node("org", org.id, org.name, org)
        elif len(parts) == 2:
            org = (await self.find(parts[0])).org
            # A team and a project directly in the organization would share the path org/x.
            taken = await (
                self.store.get_team_by_name(org.id, parts[1]) if project
                else self.store.get_project_by_name(org.id, parts[1])
            )
            if taken is not None:
                raise Conflict(f"{org.name}/{parts[1]} is already a {'team' if project else 'project'}")
            if project:
                prj = await self.store.create_project(org.id, parts[1])
                node = Node("project", prj.id, f"{org.name}/{prj.name}", org, None, prj)
            else:
                team = await self.store.create_team(org.id, parts[1])
                node = Node("team", team.id, f"{org.name}/{team.name}", org, team)
        else:
            parent = await self.find("/".join(parts[:2]), "team")
            prj = await self.store.create_project(parent.org.id, parts[2], parent.id)
            node = Node("project", prj.id, f"{parent.path}/{prj.name}", parent.org, parent.team, prj)
        await self._audit("org.create", f"{node.kind}:{node.id}", {"kind": node.kind, "path": node.path})
        return node

    async def remove(self, path: str, kind: str | None = None) -> Node:
        """Remove an empty organization, team or project (the store refuses one
        with contents, or a project with usable keys)."""
        node = await self.find(path, kind)
        remove = {"org": self.store.delete_org, "team": self.store.delete_team, "project": self.store.delete_project}
        await remove[node.kind](node.id)
        await self._audit("org.remove", f"{node.kind}:{node.id}", {"kind": node.kind, "path": node.path})
        self._changed()
        return node

    async def tree(self) -> list[Node]:
        """Every organization, then its teams with their projects, then its projects outside teams."""
        nodes: list[Node] = []
        for org in await self.store.list_orgs():
            nodes += [Node("org", org.id, org.name, org), *await self.children(Node("org", org.id, org.name, org), deep=True)]
        return nodes

    async def children(self, node: Node, *, deep: bool = False) -> list[Node]:
        """The teams and projects right under a node (``deep``: and theirs)."""
        if node.kind == "project":
            return []
        if node.kind == "team":
            assert node.team is not None
            return [
                Node("project", p.id, f"{node.path}/{p.name}", node.org, node.team, p)
                for p in await self.store.list_projects(team_id=node.id)
            ]
        out: list[Node] = []
        for team in await self.store.list_teams(node.id):
            child = Node("team", team.id, f"{node.path}/{team.name}", node.org, team)
            out.append(child)
            if deep:
                out += await self.children(child)
        for p in await self.store.list_projects(org_id=node.id):
            if p.team_id is None:
                out.append(Node("project", p.id, f"{node.path}/{p.name}", node.org, None, p))
        return out

    async def path_of(self, kind: str, scope_id: str) -> str:
        """The path (or email, or key id) of a scope given by id; the id when it is gone."""
        if kind == "org":
            org = await self.store.get_org(scope_id)
            return org.name if org else scope_id
        if kind == "team":
            team = await self.store.get_team(scope_id)
            return f"{await self.path_of('org', team.org_id)}/{team.name}" if team else scope_id
        if kind == "project":
            p = await self.store.get_project(scope_id)
            if p is None:
                return scope_id
            parent = await self.path_of("team", p.team_id) if p.team_id else await self.path_of("org", p.org_id)
            return f"{parent}/{p.name}"
        if kind == "user":
            user = await self.store.get_user(scope_id)
            return user.email if user else scope_id
        return scope_id

    # ---- people ------------------------------------------------------------

    async def create_user(self, email: str, name: str = "", *, role: str = "none", state: str = "active") -> User:
        _choice(role, STAFF_ROLES, "role")
        _choice(state, USER_STATES, "state")
        name = name.strip() if isinstance(name, str) else name
        if not name and isinstance(email, str):
            name = email.split("@", 1)[0]
        user = await self.store.create_user(email, name, role=role, state=state)
        await self._audit("users.create", f"user:{user.id}", {"email": user.email, "role": role, "state": state})
        return user

    async def find_user(self, ref: str) -> User:
        """A person by email or id."""
        if not isinstance(ref, str) or not ref.strip():
            raise Invalid("user: give an email or a user id")
        ref = ref.strip()
        user = await (self.store.get_user_by_email(ref) if "@" in ref else self.store.get_user(ref))
        if user is None:
            raise NotFound(f"no person with {'email' if '@' in ref else 'id'} {ref!r}")
        return user

    async def list_users(self, *, state: str | None = None, role: str | None = None) -> list[User]:
        if state is not None:
            _choice(state, USER_STATES, "state")
        if role is not None:
            _choice(role, STAFF_ROLES, "role")
        return await self.store.list_users(state=state, role=role)

    async def set_user_state(self, ref: str, state: str) -> User:
        """Suspend (``suspended``) or reinstate (``active``) a person; their keys follow at once."""
        _choice(state, USER_STATES, "state")
        user = await self.find_user(ref)
        updated = await self.store.set_user_state(user.id, state)
        verb = {"active": "activate", "suspended": "suspend"}.get(state, "state")
        await self._audit(f"users.{verb}", f"user:{user.id}", {"email": user.email, "from": user.state, "to": state})
        self._changed()
        # Every other gateway forgets its cached keys within a second (llmgw.auth.key_changes).
        from llmgw.auth.key_changes import keys_changed

        await keys_changed(self.store, self.actor)
        return updated

    async def set_user_role(self, ref: str, role: str) -> User:
        _choice(role, STAFF_ROLES, "role")
        user = await self.find_user(ref)
        updated = await self.store.set_user_role(user.id, role)
        await self._audit("users.role", f"user:{user.id}", {"email": user.email, "from": user.role, "to": role})
        return updated

    async def forget_user(self, ref: str) -> ForgetReport | None:
        """Forget a person (llmgw.store.sql_people says what goes and what stays under a pseudonym).
        None when no one has that email or id any more: nothing of them is left to forget."""
        try:
            user = await self.find_user(ref)
        except NotFound:
            return None
        report = await self.store.forget_user(user.id)
        if not report.already_forgotten:
            # The event names the pseudonym, never the email: it is written after the forget.
            await self._audit("users.forget", f"user:{report.pseudonym}", {
                "pseudonym": report.pseudonym,
                "removed": {name: getattr(report, name) for name, _ in FORGET_PARTS},
            })
        self._changed()
        return report

    async def add_member(self, ref: str, path: str, role: str = "member") -> Membership:
        _choice(role, MEMBER_ROLES, "role")
        user = await self.find_user(ref)
        node = await self.find(path)
        m = await self.store.add_membership(user.id, node.kind, node.id, role)
        await self._audit("users.add-member", f"user:{user.id}",
                          {"email": user.email, "scope": f"{node.kind}:{node.id}", "path": node.path, "role": role})
        return m

    async def remove_member(self, ref: str, path: str) -> bool:
        user = await self.find_user(ref)
        node = await self.find(path)
        removed = await self.store.remove_membership(user.id, node.kind, node.id)
        if not removed:
            raise NotFound(f"{user.email} is not a member of {node.path}")
        await self._audit("users.remove-member", f"user:{user.id}",
                          {"email": user.email, "scope": f"{node.kind}:{node.id}", "path": node.path})
        return True

    async def members(self, node: Node) -> list[tuple[User | None, Membership]]:
        out = []
        for m in await self.store.list_memberships(scope_kind=node.kind, scope_id=node.id):
            out.append((await self.store.get_user(m.user_id), m))
        return out

    # ---- keys --------------------------------------------------------------

    async def create_key(
        self,
        *,
        project: str | None = None,
        user: str | None = None,
        name: str = "",
        ttl: dt.timedelta | None = None,
        band: str | None = None,
        models: Sequence[str] | None = None,
    ) -> IssuedKey:
        """A service key (``project``), a personal key (``user``) or a member
        key (both: the person's, within the project). The secret is in the
        answer and nowhere else."""
        if project is None and user is None:
            raise Invalid("a key needs a project (a service key), a user (a personal key), or both (a member key)")
        node = await self.find(project, "project") if project is not None else None
        person = await self.find_user(user) if user is not None else None
        expires_at = self._expiry(ttl, await self.key_lifetime_cap(node))
        self._check_band(band)
        models = self._check_models(models)
        if person is not None:
            if person.state != "active":
                raise Conflict(f"user: {person.email} is {person.state}; activate them before issuing a key")
            if node is not None and not await self._is_member(person, node):
                raise Conflict(
                    f"user: {person.email} is not a member of {node.path} (or of its team or organization);"
                    f" add them first: llmgw users add-member {person.email} {node.path}"
                )
        issued = await self._issue(
            name=name, project_id=node.id if node else None, user_id=person.id if person else None,
            expires_at=expires_at, band=band, models=models,
        )
        await self._audit("keys.create", f"key:{issued.key.id}", {
            **_key_detail(issued.key), "project": node.path if node else None, "user": person.email if person else None,
        })
        return issued

    async def _issue(self, *, name: str, project_id: str | None, user_id: str | None,
                     expires_at: dt.datetime | None, band: str | None, models: Sequence[str] | None) -> IssuedKey:
        for attempt in range(3):  # a clash of 240 random bits means a broken generator, but stay correct
            secret = new_secret()
            try:
                key = await self.store.create_key(
                    key_hash=self.hasher.hash(secret), prefix=visible_prefix(secret), name=name,
                    project_id=project_id, user_id=user_id, expires_at=expires_at,
                    priority_band=band, allowed_models=models,
                )
                return IssuedKey(key, secret)
            except Conflict:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _expiry(self, ttl: dt.timedelta | None, cap: LifetimeCap | None = None) -> dt.datetime | None:
        """When a key made now with ``ttl`` ends: no longer than ``cap`` (the server's alone when not
        given), and the cap itself when no ttl is given."""
        if ttl is not None and ttl <= dt.timedelta(0):
            raise Invalid("ttl: must be more than zero")
        if cap is None:
            cap = LifetimeCap(self.max_key_ttl, SERVER_CAP) if self.max_key_ttl else LifetimeCap(None, "")
        if cap.ttl is not None:
            if ttl is None:
                ttl = cap.ttl
            elif ttl > cap.ttl:
                raise Invalid(f"ttl: {_span(ttl)} is longer than a key may live here: at most {_span(cap.ttl)},"
                              f" set by {cap.where}")
        return None if ttl is None else self.now() + ttl

    # ---- what scopes say about their keys: lifetime caps and residency ---------

    async def key_lifetime_cap(self, node: Node | None, *, above_only: bool = False) -> LifetimeCap:
        """The narrowest lifetime cap on a key made in ``node`` (a project; None: a personal key): the
        server's (auth.max_key_ttl), the organization's, the team's and the project's. ``above_only``
        leaves out the node's own cap: what a cap set on it may not exceed."""
        caps = [LifetimeCap(self.max_key_ttl, SERVER_CAP)] if self.max_key_ttl else []
        if node is not None:
            rules = await self.store.scope_rules_chain(
                org_id=node.org.id, team_id=node.team.id if node.team else None,
                project_id=node.project.id if node.project else None)
            where = {"org": node.org.name, "team": f"{node.org.name}/{node.team.name}" if node.team else "",
                     "project": node.path}
            for rule in rules:
                if rule.max_key_ttl_s and not (above_only and rule.scope_kind == node.kind):
                    caps.append(LifetimeCap(dt.timedelta(seconds=rule.max_key_ttl_s),
                                            f"{rule.scope_kind} {where[rule.scope_kind]}"))
        return min(caps, key=lambda c: c.ttl) if caps else LifetimeCap(None, "")

    async def set_key_lifetime(self, path: str, ttl: dt.timedelta | None) -> LifetimeCap:
        """Cap how long keys made in an organization, team or project may live (None: no cap of its own);
        a cap may not be longer than the one above it. Returns the cap now in force there."""
        node = await self.find(path)
        if ttl is not None:
            if not isinstance(ttl, dt.timedelta) or ttl < dt.timedelta(seconds=1):
                raise Invalid("max_key_ttl: expected a duration of at least 1s, like 90d, or none to remove it")
            above = await self.key_lifetime_cap(node, above_only=True)
            if above.ttl is not None and ttl > above.ttl:
                raise Invalid(f"max_key_ttl: {_span(ttl)} is longer than {above.where} allows ({_span(above.ttl)});"
                              f" a cap can only narrow the one above it")
        await self.store.set_scope_rule(node.kind, node.id, actor=self.actor,
                                        max_key_ttl_s=None if ttl is None else int(ttl.total_seconds()))
        await self._audit("keys.lifetime", f"{node.kind}:{node.id}", {
            "path": node.path, "max_key_ttl_s": None if ttl is None else int(ttl.total_seconds())})
        return await self.key_lifetime_cap(node)

    async def residency_scope(self, ref: str) -> Scope:
        """An organization, project or key (``org:acme``, ``project:acme/ml/train``, ``key:…`` or by shape)."""
        scope = await self.scope(ref)
        if scope.kind not in ("org", "project", "key"):
            raise Invalid(f"scope: residency is kept by an organization, a project or a key, not a {scope.kind}")
        return scope

    async def set_residency(self, ref: str, in_cluster: bool) -> Scope:
        """Keep a scope's requests on the cluster's own engines (``in_cluster``), or let them go anywhere."""
        if not isinstance(in_cluster, bool):
            raise Invalid(f"in_cluster: expected true or false, got {in_cluster!r}")
        scope = await self.residency_scope(ref)
        await self.store.set_scope_rule(scope.kind, scope.id, actor=self.actor, in_cluster=in_cluster)
        await self._audit("keys.residency", f"{scope.kind}:{scope.id}",
                          {"label": scope.label, "in_cluster": in_cluster})
        self._changed()
        return scope

    async def in_cluster_of(self, key: ApiKey) -> str:
        """Which scope over a key keeps its requests in the cluster (org, project or key); "" when none."""
        project = await self.store.get_project(key.project_id) if key.project_id else None
        rules = await self.store.scope_rules_chain(
            org_id=project.org_id if project else None, team_id=project.team_id if project else None,
            project_id=key.project_id, key_id=key.id)
        return next((r.scope_kind for r in rules if r.in_cluster), "")

    async def set_routing(self, ref: str, profile: str | None) -> Scope:
        """routing profiles: route a scope's keys by `profile` (checked against ``routing_profiles`` when
        given), or by nothing of its own (None: the one set above it, else the default)."""
        scope = await self.residency_scope(ref)
        if profile is not None and self.routing_profiles is not None:
            try:
                profile = self.routing_profiles.check_name(profile)
            except ValueError as exc:
                raise Invalid(str(exc)) from None
        await self.store.set_scope_rule(scope.kind, scope.id, actor=self.actor, routing=profile)
        await self._audit("keys.routing", f"{scope.kind}:{scope.id}", {"label": scope.label, "routing": profile})
        self._changed()
        return scope

    async def routing_of(self, key: ApiKey) -> tuple[str | None, str]:
        """routing profiles: the profile a key is routed by and the scope that sets it; (None, "") when none."""
        project = await self.store.get_project(key.project_id) if key.project_id else None
        rules = await self.store.scope_rules_chain(
            org_id=project.org_id if project else None, team_id=project.team_id if project else None,
            project_id=key.project_id, key_id=key.id)
        return next(((r.routing, r.scope_kind) for r in reversed(rules) if r.routing), (None, ""))

    def _check_band(self, band: str | None) -> None:
        if band is not None and self.bands is not None and band not in self.bands:
            raise Invalid(f"band: {band!r} is not one of the configured bands: {', '.join(self.bands)}")

    def _check_models(self, models: Sequence[str] | None) -> list[str] | None:
        if models is None:
            return None
        if isinstance(models, str):
            raise Invalid("models: expected a list of model names")
        cleaned = [m.strip() for m in models if isinstance(m, str) and m.strip()]
        if not cleaned:
            raise Invalid("models: the list is empty; leave it out to allow every model")
        if self.models is not None:
            unknown = [m for m in cleaned if m not in self.models]
            if unknown:
                raise Invalid(
                    f"models: {', '.join(map(repr, unknown))} not in server.yaml"
                    f" (known: {', '.join(sorted(set(self.models.values())))})"
                )
        return list(dict.fromkeys(cleaned))

    async def _is_member(self, user: User, node: Node) -> bool:
        scopes = {("project", node.id), ("org", node.org.id)}
        if node.team is not None:
            scopes.add(("team", node.team.id))
        return any((m.scope_kind, m.scope_id) in scopes for m in await self.store.list_memberships(user_id=user.id))

    async def _node_of(self, project_id: str | None) -> Node | None:
        if project_id is None:
            return None
        return await self.find(await self.path_of("project", project_id), "project")

    async def find_key(self, ref: str) -> ApiKey:
        """A key by id (``key-…``) or by its visible prefix (``llmgw-ab12cd``)."""
        if not isinstance(ref, str) or not ref.strip():
            raise Invalid("key: give a key id (key-…) or its prefix")
        ref = ref.strip()
        key = await self.store.get_key(ref)
        if key is not None:
            return key
        matches = [k for k in await self.store.list_keys() if k.prefix == ref]
        if len(matches) > 1:
            raise Conflict(f"key: {len(matches)} keys have the prefix {ref!r}; give the key id")
        if not matches:
            raise NotFound(f"no key with id or prefix {ref!r}")
        return matches[0]

    async def list_keys(self, *, project: str | None = None, user: str | None = None,
                        include_unusable: bool = False) -> list[ApiKey]:
        """Keys of a project and/or person (or all), newest first; revoked and
        expired ones only with ``include_unusable``."""
        project_id = (await self.find(project, "project")).id if project else None
        user_id = (await self.find_user(user)).id if user else None
        keys = await self.store.list_keys(project_id=project_id, user_id=user_id, include_revoked=include_unusable)
        if include_unusable:
            return keys
        now = self.now()
        return [k for k in keys if k.usable_at(now)]

    async def revoke_key(self, ref: str) -> ApiKey:
        key = await self.find_key(ref)
        revoked = await self.store.revoke_key(key.id)
        await self._audit("keys.revoke", f"key:{key.id}", _key_detail(key))
        self._changed(key.id)
        return revoked

    async def rotate_key(self, ref: str, overlap: dt.timedelta) -> tuple[IssuedKey, ApiKey]:
        """A new key with the old one's project, owner, name, band, models,
        lifetime and key limits; the old one works on for ``overlap`` (zero:
        it stops now). Returns the new key and the old one as it now is."""
        if not isinstance(overlap, dt.timedelta) or overlap < dt.timedelta(0):
            raise Invalid("overlap: expected a duration of zero or more, like 24h")
        old = await self.find_key(ref)
        now = self.now()
        if not old.usable_at(now):
            raise Conflict(f"key: {old.id} is {key_state(old, now)}; issue a new key instead of rotating it")
        if old.user_id is not None:
            person = await self.store.get_user(old.user_id)
            if person is not None and person.state != "active":
                raise Conflict(f"key: its owner {person.email} is {person.state}; activate them first")
        ttl = None if old.expires_at is None else old.expires_at - old.created_at
        cap = await self.key_lifetime_cap(await self._node_of(old.project_id))
        if ttl is not None and cap.ttl is not None:
            ttl = min(ttl, cap.ttl)
        issued = await self._issue(
            name=old.name, project_id=old.project_id, user_id=old.user_id, expires_at=self._expiry(ttl, cap),
            band=old.priority_band, models=old.allowed_models,
        )
        limits = await self.store.get_limits("key", old.id)
        if limits is not None:
            await self.store.set_limits(
                "key", issued.key.id, rpm=limits.rpm, tpm=limits.tpm, budget_micros=limits.budget_micros,
                budget_period=limits.budget_period, allowed_models=limits.allowed_models,
            )
        end = now + overlap
        if overlap == dt.timedelta(0):
            old = await self.store.revoke_key(old.id, end)
        elif old.expires_at is None or end < old.expires_at:
            old = await self.store.set_key_expiry(old.id, end)
        await self._audit("keys.rotate", f"key:{old.id}", {
            **_key_detail(old), "new_key_id": issued.key.id, "new_prefix": issued.key.prefix,
            "overlap_s": int(overlap.total_seconds()),
        })
        self._changed(old.id)
        return issued, old

    # ---- limits ------------------------------------------------------------

    async def scope(self, ref: str) -> Scope:
        """Read ``org:acme``, ``team:acme/ml``, ``project:acme/ml/train``,
        ``user:ann@example.com`` or ``key:key-…``; without a kind, a path, an
        email or a key id/prefix is recognised by its shape."""
        if not isinstance(ref, str) or not ref.strip():
            raise Invalid("scope: give org:NAME, team:ORG/TEAM, project:PATH, user:EMAIL or key:ID")
        ref = ref.strip()
        kind, sep, rest = ref.partition(":")
        if not sep or kind not in LIMIT_SCOPES:
            kind, rest = "", ref
        if kind == "user" or (not kind and "@" in rest):
            user = await self.find_user(rest)
            return Scope("user", user.id, user.email)
        if kind == "key" or (not kind and rest.startswith(("key-", "llmgw-"))):
            key = await self.find_key(rest)
            return Scope("key", key.id, key.id)
        node = await self.find(rest, kind or None)
        return Scope(node.kind, node.id, node.path)

    async def get_limits(self, scope: Scope) -> Limits | None:
        return await self.store.get_limits(scope.kind, scope.id)

    async def set_limits(
        self,
        scope: Scope,
        *,
        rpm: int | None = UNCHANGED,
        tpm: int | None = UNCHANGED,
        budget_micros: int | None = UNCHANGED,
        budget_period: str | None = UNCHANGED,
        allowed_models: Sequence[str] | None = UNCHANGED,
    ) -> Limits | None:
        """Change some limits of a scope, keeping the others; None removes one.
        A budget without a period is per month. Returns the limits now in force
        (None when nothing is left)."""
        old = await self.store.get_limits(scope.kind, scope.id) or Limits(scope_kind=scope.kind, scope_id=scope.id)
        for name, value, least in (("rpm", rpm, 1), ("tpm", tpm, 1), ("budget", budget_micros, 0)):
            if value is UNCHANGED or value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise Invalid(f"{name}: expected a whole number of at least {least}, or none to remove it")
        if budget_period is not UNCHANGED and budget_period is not None:
            _choice(budget_period, BUDGET_PERIODS, "budget_period")
        new = {
            "rpm": old.rpm if rpm is UNCHANGED else rpm,
            "tpm": old.tpm if tpm is UNCHANGED else tpm,
            "budget_micros": old.budget_micros if budget_micros is UNCHANGED else budget_micros,
            "budget_period": old.budget_period if budget_period is UNCHANGED else budget_period,
            "allowed_models": old.allowed_models if allowed_models is UNCHANGED else (
                None if allowed_models is None else self._check_models(allowed_models)),
        }
        if new["budget_micros"] is None:
            if budget_period not in (UNCHANGED, None) and old.budget_micros is None:
                raise Invalid("budget_period: give a budget with it")
            new["budget_period"] = None
        elif new["budget_period"] is None:
            new["budget_period"] = "month"
        if all(v is None for v in new.values()):
            await self.store.clear_limits(scope.kind, scope.id)
            limits = None
        else:
            limits = await self.store.set_limits(scope.kind, scope.id, **new)
        await self._audit("keys.limits", f"{scope.kind}:{scope.id}", {
            "label": scope.label, **{k: list(v) if isinstance(v, tuple) else v for k, v in new.items()},
        })
        self._changed(scope.id if scope.kind == "key" else None)
        return limits

    async def clear_limits(self, scope: Scope) -> bool:
        cleared = await self.store.clear_limits(scope.kind, scope.id)
        if cleared:
            await self._audit("keys.limits-clear", f"{scope.kind}:{scope.id}", {"label": scope.label})
            self._changed(scope.id if scope.kind == "key" else None)
        return cleared

    async def chain_of(self, key: ApiKey) -> list[Limits]:
        """The limits that apply to a key, widest first."""
        project = await self.store.get_project(key.project_id) if key.project_id else None
        return await self.store.get_limits_chain(
            org_id=project.org_id if project else None, team_id=project.team_id if project else None,
            project_id=key.project_id, user_id=key.user_id, key_id=key.id,
        )


# ---- helpers ---------------------------------------------------------------


def split_path(path: str) -> list[str]:
    """``acme/search/indexer`` -> its names; Invalid for an empty part or more than three."""
    if not isinstance(path, str) or not path.strip():
        raise Invalid("path: give ORG, ORG/TEAM, ORG/PROJECT or ORG/TEAM/PROJECT")
    parts = [p.strip() for p in path.strip().strip("/").split("/")]
    if any(not p for p in parts):
        raise Invalid(f"path: {path!r} has an empty part")
    if len(parts) > 3:
        raise Invalid(f"path: {path!r} has {len(parts)} parts; at most ORG/TEAM/PROJECT")
    return parts


def _choice(value: Any, choices: Sequence[str], what: str) -> None:
    if value not in choices:
        raise Invalid(f"{what}: {value!r} is not one of {', '.join(choices)}")


def _span(t: dt.timedelta) -> str:
    from llmgw.config.units import Duration

    return str(Duration(seconds=t.total_seconds()))


def _key_detail(key: ApiKey) -> dict[str, Any]:
    return {
        "prefix": key.prefix, "name": key.name, "kind": key.kind,
        "expires_at": key.expires_at.isoformat() if key.expires_at else None,
        "band": key.priority_band, "models": list(key.allowed_models) if key.allowed_models else None,
    }
