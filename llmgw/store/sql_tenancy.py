"""Organizations, teams, projects, people and memberships: the shared SQL
implementation both backends use."""

from __future__ import annotations

from . import validate as v
from .errors import Conflict, Invalid, NotFound
from .records import (
    MEMBER_ROLES,
    MEMBER_SCOPES,
    STAFF_ROLES,
    USER_STATES,
    Membership,
    Organization,
    Project,
    Team,
    User,
)
from .sqlbase import (
    MEMBERSHIP_COLS,
    ORG_COLS,
    PROJECT_COLS,
    TEAM_COLS,
    USER_COLS,
    SQLStoreBase,
    Tx,
    name_key,
    new_id,
)


class SQLTenancy(SQLStoreBase):
    # ---- organizations -----------------------------------------------------

    async def create_org(self, name: str) -> Organization:
        name = v.check_name(name, "organization name")
        org = Organization(id=new_id("org"), name=name, created_at=self._now())

        async def work(tx: Tx) -> None:
            if await tx.fetchval("SELECT 1 FROM orgs WHERE name_key = ?", name_key(name)):
                raise Conflict(f"an organization named {name!r} already exists")
            await tx.execute(
                "INSERT INTO orgs (id, name, name_key, created_at) VALUES (?, ?, ?, ?)",
                org.id, name, name_key(name), self._t(org.created_at),
            )

        await self._write(work)
        return org

    async def get_org(self, org_id: str) -> Organization | None:
        r = await self._one(f"SELECT {ORG_COLS} FROM orgs WHERE id = ?", v.check_id(org_id, "org_id"))
        return None if r is None else self._org(r)

    async def get_org_by_name(self, name: str) -> Organization | None:
        key = name_key(v.check_name(name, "organization name"))
        r = await self._one(f"SELECT {ORG_COLS} FROM orgs WHERE name_key = ?", key)
        return None if r is None else self._org(r)

    async def list_orgs(self) -> list[Organization]:
        return [self._org(r) for r in await self._all(f"SELECT {ORG_COLS} FROM orgs ORDER BY name_key, id")]

    async def rename_org(self, org_id: str, name: str) -> Organization:
        org_id = v.check_id(org_id, "org_id")
        name = v.check_name(name, "organization name")

        async def work(tx: Tx) -> Organization:
            await self._must_exist(tx, "org", org_id)
            taken = await tx.fetchval(
                "SELECT 1 FROM orgs WHERE name_key = ? AND id <> ?", name_key(name), org_id
            )
            if taken:
                raise Conflict(f"an organization named {name!r} already exists")
            r = await tx.fetchrow(
                f"UPDATE orgs SET name = ?, name_key = ? WHERE id = ? RETURNING {ORG_COLS}",
                name, name_key(name), org_id,
            )
            return self._org(r)

        return await self._write(work)

    async def delete_org(self, org_id: str) -> None:
        org_id = v.check_id(org_id, "org_id")

        async def work(tx: Tx) -> None:
            name = await tx.fetchval("SELECT name FROM orgs WHERE id = ?", org_id)
            if name is None:
                raise NotFound(f"no organization with id {org_id!r}")
            teams = await tx.fetchval("SELECT COUNT(*) FROM teams WHERE org_id = ?", org_id)
            projects = await tx.fetchval("SELECT COUNT(*) FROM projects WHERE org_id = ?", org_id)
            if teams or projects:
                raise Conflict(
                    f"organization {name!r} still has {teams} team(s) and {projects} project(s):"
                    " remove them first"
                )
            await self._drop_attachments(tx, "org", org_id)
            await tx.execute("DELETE FROM orgs WHERE id = ?", org_id)

        await self._write(work)

    # ---- teams -------------------------------------------------------------

    async def create_team(self, org_id: str, name: str) -> Team:
        org_id = v.check_id(org_id, "org_id")
        name = v.check_name(name, "team name")
        team = Team(id=new_id("team"), org_id=org_id, name=name, created_at=self._now())

        async def work(tx: Tx) -> None:
            await self._must_exist(tx, "org", org_id)
            await self._team_name_free(tx, org_id, name, None)
            await tx.execute(
                "INSERT INTO teams (id, org_id, name, name_key, created_at) VALUES (?, ?, ?, ?, ?)",
                team.id, org_id, name, name_key(name), self._t(team.created_at),
            )

        await self._write(work)
        return team

    async def _team_name_free(self, tx: Tx, org_id: str, name: str, team_id: str | None) -> None:
        other = await tx.fetchval(
            "SELECT id FROM teams WHERE org_id = ? AND name_key = ?", org_id, name_key(name)
        )
        if other is not None and other != team_id:
            raise Conflict(f"the organization already has a team named {name!r}")

    async def get_team(self, team_id: str) -> Team | None:
        r = await self._one(f"SELECT {TEAM_COLS} FROM teams WHERE id = ?", v.check_id(team_id, "team_id"))
        return None if r is None else self._team(r)

    async def get_team_by_name(self, org_id: str, name: str) -> Team | None:
        r = await self._one(
            f"SELECT {TEAM_COLS} FROM teams WHERE org_id = ? AND name_key = ?",
            v.check_id(org_id, "org_id"), name_key(v.check_name(name, "team name")),
        )
        return None if r is None else self._team(r)

    async def list_teams(self, org_id: str | None = None) -> list[Team]:
        if org_id is None:
            rows = await self._all(f"SELECT {TEAM_COLS} FROM teams ORDER BY name_key, id")
        else:
            rows = await self._all(
                f"SELECT {TEAM_COLS} FROM teams WHERE org_id = ? ORDER BY name_key, id",
                v.check_id(org_id, "org_id"),
            )
        return [self._team(r) for r in rows]

    async def rename_team(self, team_id: str, name: str) -> Team:
        team_id = v.check_id(team_id, "team_id")
        name = v.check_name(name, "team name")

        async def work(tx: Tx) -> Team:
            org_id = await tx.fetchval("SELECT org_id FROM teams WHERE id = ?", team_id)
            if org_id is None:
                raise NotFound(f"no team with id {team_id!r}")
            await self._team_name_free(tx, org_id, name, team_id)
            r = await tx.fetchrow(
                f"UPDATE teams SET name = ?, name_key = ? WHERE id = ? RETURNING {TEAM_COLS}",
                name, name_key(name), team_id,
            )
            return self._team(r)

        return await self._write(work)

    async def delete_team(self, team_id: str) -> None:
        team_id = v.check_id(team_id, "team_id")

        async def work(tx: Tx) -> None:
            name = await tx.fetchval("SELECT name FROM teams WHERE id = ?", team_id)
            if name is None:
                raise NotFound(f"no team with id {team_id!r}")
            projects = await tx.fetchval("SELECT COUNT(*) FROM projects WHERE team_id = ?", team_id)
            if projects:
                raise Conflict(f"team {name!r} still has {projects} project(s): remove them first")
            await self._drop_attachments(tx, "team", team_id)
            await tx.execute("DELETE FROM teams WHERE id = ?", team_id)

        await self._write(work)

    # ---- projects ----------------------------------------------------------

    async def create_project(self, org_id: str, name: str, team_id: str | None = None) -> Project:
        org_id = v.check_id(org_id, "org_id")
        team_id = v.check_opt_id(team_id, "team_id")
        name = v.check_name(name, "project name")
        project = Project(
            id=new_id("prj"), org_id=org_id, team_id=team_id, name=name, created_at=self._now()
        )

        async def work(tx: Tx) -> None:
            await self._must_exist(tx, "org", org_id)
            if team_id is not None:
                team_org = await tx.fetchval("SELECT org_id FROM teams WHERE id = ?", team_id)
                if team_org is None:
                    raise NotFound(f"no team with id {team_id!r}")
                if team_org != org_id:
                    raise Invalid(f"team {team_id!r} is not in organization {org_id!r}")
            await self._project_name_free(tx, team_id or org_id, name, None)
            await tx.execute(
                "INSERT INTO projects (id, org_id, team_id, parent_id, name, name_key, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                project.id, org_id, team_id, team_id or org_id, name, name_key(name),
                self._t(project.created_at),
            )

        await self._write(work)
        return project

    async def _project_name_free(self, tx: Tx, parent_id: str, name: str, project_id: str | None) -> None:
        other = await tx.fetchval(
            "SELECT id FROM projects WHERE parent_id = ? AND name_key = ?", parent_id, name_key(name)
        )
        if other is not None and other != project_id:
            where = "team" if parent_id.startswith("team-") else "organization"
            raise Conflict(f"the {where} already has a project named {name!r}")

    async def get_project(self, project_id: str) -> Project | None:
        r = await self._one(
            f"SELECT {PROJECT_COLS} FROM projects WHERE id = ?", v.check_id(project_id, "project_id")
        )
        return None if r is None else self._project(r)

    async def get_project_by_name(self, org_id: str, name: str, team_id: str | None = None) -> Project | None:
        org_id = v.check_id(org_id, "org_id")
        team_id = v.check_opt_id(team_id, "team_id")
        r = await self._one(
            f"SELECT {PROJECT_COLS} FROM projects WHERE org_id = ? AND parent_id = ? AND name_key = ?",
            org_id, team_id or org_id, name_key(v.check_name(name, "project name")),
        )
        return None if r is None else self._project(r)

    async def list_projects(self, org_id: str | None = None, team_id: str | None = None) -> list[Project]:
        where, args = [], []
        if org_id is not None:
            where.append("org_id = ?")
            args.append(v.check_id(org_id, "org_id"))
        if team_id is not None:
            where.append("team_id = ?")
            args.append(v.check_id(team_id, "team_id"))
        cond = f" WHERE {' AND '.join(where)}" if where else ""
        rows = await self._all(f"SELECT {PROJECT_COLS} FROM projects{cond} ORDER BY name_key, id", *args)
        return [self._project(r) for r in rows]

    async def rename_project(self, project_id: str, name: str) -> Project:
        project_id = v.check_id(project_id, "project_id")
        name = v.check_name(name, "project name")

        async def work(tx: Tx) -> Project:
            parent = await tx.fetchval("SELECT parent_id FROM projects WHERE id = ?", project_id)
            if parent is None:
                raise NotFound(f"no project with id {project_id!r}")
            await self._project_name_free(tx, parent, name, project_id)
            r = await tx.fetchrow(
                f"UPDATE projects SET name = ?, name_key = ? WHERE id = ? RETURNING {PROJECT_COLS}",
                name, name_key(name), project_id,
            )
            return self._project(r)

        return await self._write(work)

    async def delete_project(self, project_id: str) -> None:
        project_id = v.check_id(project_id, "project_id")
        now = self._now()

        async def work(tx: Tx) -> None:
            name = await tx.fetchval("SELECT name FROM projects WHERE id = ?", project_id)
            if name is None:
                raise NotFound(f"no project with id {project_id!r}")
            usable = await tx.fetchval(
                "SELECT COUNT(*) FROM api_keys WHERE project_id = ?"
                " AND (revoked_at IS NULL OR revoked_at > ?) AND (expires_at IS NULL OR expires_at > ?)",
                project_id, self._t(now), self._t(now),
            )
            if usable:
                raise Conflict(f"project {name!r} still has {usable} usable key(s): revoke them first")
            await tx.execute(
                "DELETE FROM limits WHERE scope_kind = 'key'"
                " AND scope_id IN (SELECT id FROM api_keys WHERE project_id = ?)",
                project_id,
            )
            await tx.execute("DELETE FROM api_keys WHERE project_id = ?", project_id)
            await self._drop_attachments(tx, "project", project_id)
            await tx.execute("DELETE FROM projects WHERE id = ?", project_id)

        await self._write(work)

    # ---- people ------------------------------------------------------------

    async def create_user(
        self,
        email: str,
        name: str,
        *,
        role: str = "none",
        state: str = "active",
        password_hash: str | None = None,
    ) -> User:
        user = User(
            id=new_id("usr"),
            email=v.check_email(email),
            name=v.check_text(name.strip() if isinstance(name, str) else name, "name", max_len=200),
            role=v.check_choice(role, STAFF_ROLES, "role"),
            state=v.check_choice(state, USER_STATES, "state"),
            password_hash=_check_password_hash(password_hash),
            created_at=self._now(),
        )

        async def work(tx: Tx) -> None:
            if await tx.fetchval("SELECT 1 FROM users WHERE email = ?", user.email):
                raise Conflict(f"a person with email {user.email!r} already exists")
            await tx.execute(
                f"INSERT INTO users ({USER_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                user.id, user.email, user.name, user.role, user.state, user.password_hash,
                self._t(user.created_at),
            )

        await self._write(work)
        return user

    async def get_user(self, user_id: str) -> User | None:
        r = await self._one(f"SELECT {USER_COLS} FROM users WHERE id = ?", v.check_id(user_id, "user_id"))
        return None if r is None else self._user(r)

    async def get_user_by_email(self, email: str) -> User | None:
        r = await self._one(f"SELECT {USER_COLS} FROM users WHERE email = ?", v.check_email(email))
        return None if r is None else self._user(r)

    async def list_users(self, *, state: str | None = None, role: str | None = None) -> list[User]:
        where, args = [], []
        if state is not None:
            where.append("state = ?")
            args.append(v.check_choice(state, USER_STATES, "state"))
        if role is not None:
            where.append("role = ?")
            args.append(v.check_choice(role, STAFF_ROLES, "role"))
        cond = f" WHERE {' AND '.join(where)}" if where else ""
        rows = await self._all(f"SELECT {USER_COLS} FROM users{cond} ORDER BY email", *args)
        return [self._user(r) for r in rows]

    async def _update_user(self, user_id: str, column: str, value: object) -> User:
        user_id = v.check_id(user_id, "user_id")

        async def work(tx: Tx) -> User:
            r = await tx.fetchrow(
                f"UPDATE users SET {column} = ? WHERE id = ? RETURNING {USER_COLS}", value, user_id
            )
            if r is None:
                raise NotFound(f"no person with id {user_id!r}")
            return self._user(r)

        return await self._write(work)

    async def set_user_state(self, user_id: str, state: str) -> User:
        return await self._update_user(user_id, "state", v.check_choice(state, USER_STATES, "state"))

    async def set_user_role(self, user_id: str, role: str) -> User:
        return await self._update_user(user_id, "role", v.check_choice(role, STAFF_ROLES, "role"))

    async def set_password_hash(self, user_id: str, password_hash: str | None) -> User:
        return await self._update_user(user_id, "password_hash", _check_password_hash(password_hash))

    async def set_user_name(self, user_id: str, name: str) -> User:
        return await self._update_user(
            user_id, "name", v.check_text(name.strip() if isinstance(name, str) else name, "name", max_len=200))

    async def scim_external_ids(self, org_id: str, resource_kind: str) -> dict[str, str]:
        kind = v.check_choice(resource_kind, ("user", "team"), "resource_kind")
        rows = await self._all("SELECT resource_id, external_id FROM scim_external_ids"
                               " WHERE org_id = ? AND resource_kind = ?", v.check_id(org_id, "org_id"), kind)
        return {r["resource_id"]: r["external_id"] for r in rows}

    async def set_scim_external_id(self, org_id: str, resource_kind: str, resource_id: str,
                                   external_id: str | None) -> None:
        org_id = v.check_id(org_id, "org_id")
        kind = v.check_choice(resource_kind, ("user", "team"), "resource_kind")
        resource_id = v.check_id(resource_id, "resource_id")
        if external_id is not None:
            external_id = v.check_text(external_id, "externalId", max_len=500)

        async def work(tx: Tx) -> None:
            await tx.execute("DELETE FROM scim_external_ids WHERE org_id = ? AND resource_kind = ? AND resource_id = ?",
                             org_id, kind, resource_id)
            if external_id is not None:
                await tx.execute("INSERT INTO scim_external_ids (org_id, resource_kind, resource_id, external_id)"
                                 " VALUES (?, ?, ?, ?)", org_id, kind, resource_id, external_id)

        await self._write(work)

    async def set_user_email(self, user_id: str, email: str) -> User:
        email = v.check_email(email)
        user_id = v.check_id(user_id, "user_id")

        async def work(tx: Tx) -> User:
            if await tx.fetchval("SELECT 1 FROM users WHERE email = ? AND id <> ?", email, user_id):
                raise Conflict(f"a person with email {email!r} already exists")
            r = await tx.fetchrow(f"UPDATE users SET email = ? WHERE id = ? RETURNING {USER_COLS}", email, user_id)
            if r is None:
                raise NotFound(f"no person with id {user_id!r}")
            return self._user(r)

        return await self._write(work)

    # ---- memberships -------------------------------------------------------

    async def add_membership(
        self, user_id: str, scope_kind: str, scope_id: str, role: str = "member"
    ) -> Membership:
        user_id = v.check_id(user_id, "user_id")
        scope_kind = v.check_choice(scope_kind, MEMBER_SCOPES, "scope kind")
        scope_id = v.check_id(scope_id, "scope id")
        role = v.check_choice(role, MEMBER_ROLES, "membership role")
        now = self._now()

        async def work(tx: Tx) -> Membership:
            await self._must_exist(tx, "user", user_id)
            await self._must_exist(tx, scope_kind, scope_id)
            r = await tx.fetchrow(
                f"INSERT INTO memberships ({MEMBERSHIP_COLS}) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (user_id, scope_kind, scope_id) DO UPDATE SET role = excluded.role"
                f" RETURNING {MEMBERSHIP_COLS}",
                user_id, scope_kind, scope_id, role, self._t(now),
            )
            return self._membership(r)

        return await self._write(work)

    async def remove_membership(self, user_id: str, scope_kind: str, scope_id: str) -> bool:
        args = (
            v.check_id(user_id, "user_id"),
            v.check_choice(scope_kind, MEMBER_SCOPES, "scope kind"),
            v.check_id(scope_id, "scope id"),
        )

        async def work(tx: Tx) -> int:
            return await tx.execute(
                "DELETE FROM memberships WHERE user_id = ? AND scope_kind = ? AND scope_id = ?", *args
            )

        return await self._write(work) > 0

    async def list_memberships(
        self,
        *,
        user_id: str | None = None,
        scope_kind: str | None = None,
        scope_id: str | None = None,
    ) -> list[Membership]:
        where, args = [], []
        if user_id is not None:
            where.append("user_id = ?")
            args.append(v.check_id(user_id, "user_id"))
        if scope_kind is not None:
            where.append("scope_kind = ?")
            args.append(v.check_choice(scope_kind, MEMBER_SCOPES, "scope kind"))
        if scope_id is not None:
            where.append("scope_id = ?")
            args.append(v.check_id(scope_id, "scope id"))
        cond = f" WHERE {' AND '.join(where)}" if where else ""
        rows = await self._all(
            f"SELECT {MEMBERSHIP_COLS} FROM memberships{cond} ORDER BY user_id, scope_kind, scope_id", *args
        )
        return [self._membership(r) for r in rows]


def _check_password_hash(value: object) -> str | None:
    if value is None:
        return None
    return v.check_text(value, "password_hash", max_len=1024)
