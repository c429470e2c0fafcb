"""One organization's people and teams as SCIM Users and Groups.

A User is a person who is a member of the token's organization: userName is
their email address, displayName their name, active whether they may use
the gateway (false suspends them: their keys are refused at once, and their
portal sessions end). Deleting a User forgets the person (`llmgw users
forget`: keys revoked, their text deleted, usage kept under a pseudonym).
A person who already has an account (made by `llmgw users create` or a
single sign-on) is taken into the organization when a User with their
address is created, unless they belong to another organization: that
organization's people are out of this one's reach.

A Group is a team of the organization: displayName is its name, members
the people in it. Deleting a Group takes its members out and removes the
team (refused while it still holds projects).

Every change goes through llmgw.auth.tenancy, audited as `scim:ORG`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from llmgw.auth.tenancy import Tenancy
from llmgw.scim.schemas import GROUP, USER
from llmgw.store import Conflict, Invalid, NotFound, Organization, Store, Team, User
from llmgw.store import validate as store_validate
from llmgw.store.people import is_forgotten_email

__all__ = ["Directory", "ScimError"]


class ScimError(Exception):
    """An answer other than success: status, SCIM error type and what to do."""

    def __init__(self, status: int, detail: str, scim_type: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.scim_type = scim_type


def _bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ScimError(400, f"{where}: expected true or false, got {value!r}", "invalidValue")


def _field(body: dict[str, Any], name: str) -> Any:
    for key, value in body.items():
        if key.lower() == name.lower():
            return value
    prefix = (USER + ":").lower(), (GROUP + ":").lower()
    for key, value in body.items():
        if key.lower().startswith(prefix) and key.rsplit(":", 1)[-1].lower() == name.lower():
            return value
    return None


def etag_of(resource: dict[str, Any]) -> str:
    body = {k: v for k, v in resource.items() if k != "meta"}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode("utf-8")).hexdigest()
    return f'W/"{digest[:20]}"'


def default_name(email: str) -> str:
    return email.split("@", 1)[0]


class Directory:
    """SCIM's view of ``org`` in ``store``; ``base`` is where /scim/v2 is (for locations)."""

    def __init__(self, store: Store, org: Organization, tenancy: Tenancy, base: str) -> None:
        self.store = store
        self.org = org
        self.tenancy = tenancy
        self.base = base

    async def _audit(self, action: str, target: str, detail: dict[str, Any]) -> None:
        await self.tenancy.store.append_audit(self.tenancy.actor, action, target, detail)

    # ---- people ------------------------------------------------------------------------

    async def users(self) -> list[User]:
        ids = {m.user_id for m in await self.store.list_memberships(scope_kind="org", scope_id=self.org.id)}
        people = [u for u in await self.store.list_users() if u.id in ids and not is_forgotten_email(u.email)]
        return sorted(people, key=lambda u: (u.created_at, u.id))

    async def user(self, user_id: str) -> User:
        try:
            user = await self.store.get_user(user_id)
        except Invalid:
            user = None
        if user is None or is_forgotten_email(user.email) or not await self._in_org(user):
            raise ScimError(404, f"no User with id {user_id!r}")
        return user

    async def _in_org(self, user: User) -> bool:
        return any(m.scope_kind == "org" and m.scope_id == self.org.id
                   for m in await self.store.list_memberships(user_id=user.id))

    async def _elsewhere(self, user: User) -> bool:
        """True when the person is in another organization, or in a team or project of one."""
        for m in await self.store.list_memberships(user_id=user.id):
            if m.scope_kind == "org":
                org_id = m.scope_id
            elif m.scope_kind == "team":
                team = await self.store.get_team(m.scope_id)
                org_id = team.org_id if team else self.org.id
            else:
                project = await self.store.get_project(m.scope_id)
                org_id = project.org_id if project else self.org.id
            if org_id != self.org.id:
                return True
        return False

    async def teams(self) -> list[Team]:
        return sorted(await self.store.list_teams(self.org.id), key=lambda t: t.created_at)

    async def external_ids(self, kind: str) -> dict[str, str]:
        return await self.store.scim_external_ids(self.org.id, kind)

    async def render_user(self, user: User, external: dict[str, str] | None = None) -> dict[str, Any]:
        external = external if external is not None else await self.external_ids("user")
        team_ids = {m.scope_id for m in await self.store.list_memberships(user_id=user.id) if m.scope_kind == "team"}
        groups = []
        for team in await self.teams():
            if team.id in team_ids:
                groups.append({"value": team.id, "$ref": f"{self.base}/Groups/{team.id}", "display": team.name})
        resource: dict[str, Any] = {"schemas": [USER], "id": user.id}
        if user.id in external:
            resource["externalId"] = external[user.id]
        resource["userName"] = user.email
        if user.name and user.name != default_name(user.email):
            resource["displayName"] = user.name
        resource["active"] = user.state == "active"
        if groups:
            resource["groups"] = groups
        resource["meta"] = {"resourceType": "User", "created": _iso(user.created_at),
                            "location": f"{self.base}/Users/{user.id}"}
        resource["meta"]["version"] = etag_of(resource)
        return resource

    def _external(self, body: dict[str, Any]) -> str | None:
        value = _field(body, "externalId")
        if value is not None and (not isinstance(value, str) or not value.strip() or len(value) > 500):
            raise ScimError(400, "externalId: expected text of at most 500 characters", "invalidValue")
        return value

    def _user_fields(self, body: Any) -> tuple[str, str | None, bool]:
        if not isinstance(body, dict):
            raise ScimError(400, "expected a JSON object", "invalidSyntax")
        raw = _field(body, "userName")
        if raw is None:
            raise ScimError(400, "userName: required; give the person's email address", "invalidValue")
        try:
            email = store_validate.check_email(str(raw).strip())
        except Invalid:
            raise ScimError(400, f"userName: {raw!r} is not an email address; this server's people sign in "
                                 "with theirs", "invalidValue") from None
        name = _field(body, "displayName")
        if name is not None and not isinstance(name, str):
            raise ScimError(400, "displayName: expected text", "invalidValue")
        name = " ".join(name.split())[:200] if name else None
        active = _bool(_field(body, "active"), "active") if _field(body, "active") is not None else True
        return email, name, active

    async def create_user(self, body: Any) -> User:
        email, name, active = self._user_fields(body)
        user = await self.store.get_user_by_email(email)
        if user is not None:
            if await self._in_org(user):
                raise ScimError(409, f"userName: {email} is already a User here", "uniqueness")
            if await self._elsewhere(user):
                # Taking them in would let this organization's provider suspend or forget them.
                raise ScimError(409, f"userName: {email} belongs to another organization here; an administrator "
                                     "can add them to this one (llmgw users add-member)", "uniqueness")
        else:
            user = await self.tenancy.create_user(email, name or default_name(email),
                                                  state="active" if active else "suspended")
        await self.tenancy.add_member(user.id, self.org.name)
        await self.store.set_scim_external_id(self.org.id, "user", user.id, self._external(body))
        return await self._apply_user(user, email, name, active)

    async def replace_user(self, user: User, body: Any) -> User:
        email, name, active = self._user_fields(body)
        external = self._external(body)
        if external != (await self.external_ids("user")).get(user.id):
            await self.store.set_scim_external_id(self.org.id, "user", user.id, external)
        return await self._apply_user(user, email, name, active)

    async def _apply_user(self, user: User, email: str, name: str | None, active: bool) -> User:
        if email != user.email:
            try:
                user = await self.store.set_user_email(user.id, email)
            except Conflict:
                raise ScimError(409, f"userName: another person has {email}", "uniqueness") from None
            await self._audit("users.email", f"user:{user.id}", {"email": email})
        want_name = name or default_name(user.email)
        if want_name != user.name:
            user = await self.store.set_user_name(user.id, want_name)
            await self._audit("users.name", f"user:{user.id}", {"email": user.email})
        state = "active" if active else "suspended"
        if state != user.state:
            if user.state == "pending" and not active:
                pass  # waiting for approval stays so until someone approves
            else:
                user = await self.tenancy.set_user_state(user.id, state)
        return user

    async def delete_user(self, user: User) -> None:
        """Forget the person: keys revoked, their text gone, usage kept under a pseudonym."""
        await self.tenancy.set_user_state(user.id, "suspended")  # keys stop first, whatever follows
        await self.store.set_scim_external_id(self.org.id, "user", user.id, None)
        await self.store.forget_user(user.id)
        await self._audit("users.forget", f"user:{user.id}", {})

    # ---- teams ---------------------------------------------------------------------------

    async def team(self, team_id: str) -> Team:
        try:
            team = await self.store.get_team(team_id)
        except Invalid:
            team = None
        if team is None or team.org_id != self.org.id:
            raise ScimError(404, f"no Group with id {team_id!r}")
        return team

    async def render_group(self, team: Team, external: dict[str, str] | None = None) -> dict[str, Any]:
        external = external if external is not None else await self.external_ids("team")
        members = []
        for m in await self.store.list_memberships(scope_kind="team", scope_id=team.id):
            user = await self.store.get_user(m.user_id)
            if user is not None:
                members.append({"value": user.id, "$ref": f"{self.base}/Users/{user.id}"})
        resource: dict[str, Any] = {"schemas": [GROUP], "id": team.id}
        if team.id in external:
            resource["externalId"] = external[team.id]
        resource["displayName"] = team.name
        if members:
            resource["members"] = members
        resource["meta"] = {"resourceType": "Group", "created": _iso(team.created_at),
                            "location": f"{self.base}/Groups/{team.id}"}
        resource["meta"]["version"] = etag_of(resource)
        return resource

    async def _group_fields(self, body: Any) -> tuple[str, list[str]]:
        if not isinstance(body, dict):
            raise ScimError(400, "expected a JSON object", "invalidSyntax")
        name = _field(body, "displayName")
        try:
            name = store_validate.check_name(name, "displayName")
        except Invalid as exc:
            raise ScimError(400, str(exc), "invalidValue") from None
        raw = _field(body, "members") or []
        if not isinstance(raw, list):
            raise ScimError(400, "members: expected a list of {value: USER_ID}", "invalidValue")
        ids = []
        for index, member in enumerate(raw):
            value = member.get("value") if isinstance(member, dict) else None
            if not isinstance(value, str):
                raise ScimError(400, f"members[{index}].value: expected a User's id", "invalidValue")
            user = await self.store.get_user(value) if value.startswith("usr") else None
            if user is None or not await self._in_org(user):
                raise ScimError(400, f"members[{index}].value: no User with id {value!r} here", "invalidValue")
            if value not in ids:
                ids.append(value)
        return name, ids

    async def create_group(self, body: Any) -> Team:
        name, ids = await self._group_fields(body)
        if await self.store.get_team_by_name(self.org.id, name) is not None:
            raise ScimError(409, f"displayName: a Group named {name!r} exists already", "uniqueness")
        try:
            node = await self.tenancy.create(f"{self.org.name}/{name}")
        except Conflict as exc:
            raise ScimError(409, f"displayName: {exc}", "uniqueness") from None
        team = node.team
        assert team is not None
        await self.store.set_scim_external_id(self.org.id, "team", team.id, self._external(body))
        await self._set_members(team, ids)
        return team

    async def replace_group(self, team: Team, body: Any) -> Team:
        name, ids = await self._group_fields(body)
        if name != team.name:
            other = await self.store.get_team_by_name(self.org.id, name)
            if other is not None and other.id != team.id:
                raise ScimError(409, f"displayName: a Group named {name!r} exists already", "uniqueness")
            team = await self.store.rename_team(team.id, name)
            await self._audit("org.rename", f"team:{team.id}", {"name": name})
        external = self._external(body)
        if external != (await self.external_ids("team")).get(team.id):
            await self.store.set_scim_external_id(self.org.id, "team", team.id, external)
        await self._set_members(team, ids)
        return team

    async def _set_members(self, team: Team, ids: list[str]) -> None:
        path = f"{self.org.name}/{team.name}"
        have = {m.user_id for m in await self.store.list_memberships(scope_kind="team", scope_id=team.id)}
        for user_id in ids:
            if user_id not in have:
                await self.tenancy.add_member(user_id, path)
        for user_id in have - set(ids):
            await self.tenancy.remove_member(user_id, path)

    async def delete_group(self, team: Team) -> None:
        await self._set_members(team, [])
        await self.store.set_scim_external_id(self.org.id, "team", team.id, None)
        try:
            await self.tenancy.remove(f"{self.org.name}/{team.name}", "team")
        except (Conflict, Invalid) as exc:
            raise ScimError(409, f"the team cannot be removed: {exc}") from None
        except NotFound:
            raise ScimError(404, f"no Group with id {team.id!r}") from None


def _iso(value) -> str:
    return value.isoformat().replace("+00:00", "Z")
