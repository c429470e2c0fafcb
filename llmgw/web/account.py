"""What the account pages know about a person: their projects, the limits
that apply to them, what they spent, their keys, and the models they may use.
Read from the store on each page; nothing here changes anything."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import attrs

from llmgw.store import ApiKey, Limits, Project, Store, User

#: The name of the chat page's short-lived keys (not listed among a person's keys).
CHAT_KEY_NAME = "portal chat"


@attrs.frozen
class ProjectView:
    project: Project
    path: str
    role: str  # owner or member
    via: str  # what the membership is of: the project itself, its team or its organization
    limits: tuple[Limits, ...]  # org, team, project: widest first
    spent_month: int


@attrs.frozen
class KeyView:
    key: ApiKey
    project_path: str | None


def month_start(now: dt.datetime) -> dt.datetime:
    return now.astimezone(dt.UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def day_start(now: dt.datetime) -> dt.datetime:
    return now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)


async def project_path(store: Store, project: Project) -> str:
    org = await store.get_org(project.org_id)
    parts = [org.name if org else project.org_id]
    if project.team_id:
        team = await store.get_team(project.team_id)
        parts.append(team.name if team else project.team_id)
    return "/".join([*parts, project.name])


async def projects_of(store: Store, user: User, now: dt.datetime) -> list[ProjectView]:
    """Every project a person may make keys in: theirs, and those of their teams and organizations."""
    found: dict[str, tuple[Project, str, str]] = {}
    for m in await store.list_memberships(user_id=user.id):
        if m.scope_kind == "project":
            project = await store.get_project(m.scope_id)
            projects = [project] if project else []
        else:
            projects = await (store.list_projects(team_id=m.scope_id) if m.scope_kind == "team"
                              else store.list_projects(org_id=m.scope_id))
        for p in projects:
            if p.id not in found or m.scope_kind == "project":
                found[p.id] = (p, m.role, m.scope_kind)
    since = month_start(now)
    views = []
    for project, role, via in found.values():
        chain = await store.get_limits_chain(org_id=project.org_id, team_id=project.team_id, project_id=project.id)
        views.append(ProjectView(project, await project_path(store, project), role, via, tuple(chain),
                                 await store.spend_since("project", project.id, since)))
    return sorted(views, key=lambda v: v.path.lower())


async def keys_of(store: Store, user: User, projects: Sequence[ProjectView], now: dt.datetime) -> list[KeyView]:
    paths = {p.project.id: p.path for p in projects}
    out = []
    for key in await store.list_keys(user_id=user.id, include_revoked=False):
        if key.name == CHAT_KEY_NAME or not key.usable_at(now):
            continue
        path = None
        if key.project_id:
            path = paths.get(key.project_id)
            if path is None:
                project = await store.get_project(key.project_id)
                path = await project_path(store, project) if project else key.project_id
        out.append(KeyView(key, path))
    return out


def allowed_models(names: Sequence[str], limits: Sequence[Limits]) -> list[str]:
    """The models of ``names`` that every allowlist in ``limits`` lets through."""
    allowed = [m for m in names]
    for lim in limits:
        if lim.allowed_models is not None:
            allowed = [m for m in allowed if m in lim.allowed_models]
    return allowed


def model_has_tools(config, model: str) -> bool:
    """Whether the catalog says a model calls tools (a `tools: true` on its entry)."""
    entry = config.model(model) if hasattr(config, "model") else None
    return bool(getattr(entry, "tools", False))
