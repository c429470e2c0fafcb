"""A person's own pages: the account (projects, limits, spend, keys), making
and revoking keys, "connect your editor", the password, and the chat page.

The chat page talks to the gateway's own `/v1/chat/completions` like any
client, with a short-lived key of the person's that the page asks for
(`POST /chat/key`): the request then passes the same checks, limits, budgets
and usage records as any other, and nothing in the router knows about
sessions. The key lives at most an hour and no longer than the session,
and is revoked when the session ends or the page asks for a new one.
"""

from __future__ import annotations

import datetime as dt

from aiohttp import web

from llmgw.auth.keys import new_secret, visible_prefix
from llmgw.auth.passwords import Busy, WeakPassword, check_strength
from llmgw.store import Conflict, Invalid, NotFound, StoreError
from llmgw.web import account as acc
from llmgw.web.pages_public import served_models
from llmgw.web.portal import Viewer, log_event, portal_of, signed_in
from llmgw.web.snippets import editor_snippets

#: The longest a chat page's key lives.
CHAT_KEY_TTL = dt.timedelta(hours=1)
#: The longest lifetime offered for a key made on the account page, in days.
MAX_KEY_DAYS = 3650


async def _me(request: web.Request) -> Viewer:
    viewer = await portal_of(request).viewer(request)
    assert viewer is not None
    return viewer


def _model_names(request: web.Request) -> list[str]:
    return [m["name"] for m in served_models(request)]


async def _account_page(request: web.Request, *, status: int = 200, problem: str | None = None,
                        detail: str = "") -> web.StreamResponse:
    portal = portal_of(request)
    me = await _me(request)
    store, now = portal.store, portal.now()
    projects = await acc.projects_of(store, me.user, now)
    keys = await acc.keys_of(store, me.user, projects, now)
    user_limits = await store.get_limits("user", me.user.id)
    return await portal.render(
        request, "account.html", status=status, problem=problem, detail=detail, projects=projects, keys=keys,
        user_limits=user_limits, models=_model_names(request),
        spent_month=await store.spend_since("user", me.user.id, acc.month_start(now)),
        spent_today=await store.spend_since("user", me.user.id, acc.day_start(now)),
        sessions=await store.list_web_sessions(me.user.id),
    )


@signed_in
async def account(request: web.Request) -> web.StreamResponse:
    return await _account_page(request)


@signed_in
async def create_key(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    form = await portal.read_form(request)
    if isinstance(form, web.StreamResponse):
        return form
    me = await _me(request)
    name = " ".join(str(form.get("name", "")).split())[:100] or "portal"
    project_id = str(form.get("project", ""))
    projects = await acc.projects_of(portal.store, me.user, portal.now())
    project = next((p for p in projects if p.project.id == project_id), None)
    if project_id and project is None:
        return await _account_page(request, status=400, problem="keys.not_your_project")
    ttl = None
    days = str(form.get("days", "")).strip()
    if days:
        if not days.isdigit() or not 1 <= int(days) <= MAX_KEY_DAYS:
            return await _account_page(request, status=400, problem="keys.bad_days")
        ttl = dt.timedelta(days=int(days))
    fields = {"name": name, "project": project.path if project else None, "days": days or None}
    try:
        issued = await portal.tenancy(me.user.email, fields).create_key(
            project=project.path if project else None, user=me.user.email, name=name, ttl=ttl)
    except (Invalid, Conflict, NotFound) as exc:
        return await _account_page(request, status=400, problem="keys.refused", detail=str(exc))
    log_event("key made on the portal", user_id=me.user.id, key_id=issued.key.id)
    models = _model_names(request)
    chosen = str(form.get("model", "")) or (models[0] if models else "MODEL")
    return await _snippets_page(request, chosen, issued.secret, issued.key)


@signed_in
async def revoke_key(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    form = await portal.read_form(request)
    if isinstance(form, web.StreamResponse):
        return form
    me = await _me(request)
    key = await portal.store.get_key(request.match_info["key_id"])
    if key is None or key.user_id != me.user.id:
        await portal.audit_refused(me.user.email, "keys.revoke", f"key:{request.match_info['key_id']}", None,
                                   "not a key of theirs", 404)
        return await _account_page(request, status=404, problem="keys.not_yours")
    await portal.tenancy(me.user.email, {"key": key.id}).revoke_key(key.id)
    return portal.redirect(request, "/account#keys")


async def _snippets_page(request: web.Request, model: str, secret: str | None, key=None) -> web.StreamResponse:
    portal = portal_of(request)
    models = _model_names(request)
    if model not in models and models:
        model = models[0]
    snippets = editor_snippets(portal.base_url(request), model, secret,
                               tools=acc.model_has_tools(portal.config, model),
                               anthropic=portal.serves_anthropic, responses=portal.serves_responses)
    return await portal.render(request, "connect.html", model=model, models=models, snippets=snippets,
                               secret=secret, key=key, base=portal.base_url(request))


@signed_in
async def connect(request: web.Request) -> web.StreamResponse:
    return await _snippets_page(request, request.query.get("model", ""), None)


# ---- the password ---------------------------------------------------------------------


@signed_in
async def password_form(request: web.Request) -> web.StreamResponse:
    return await portal_of(request).render(request, "password.html", problem=None)


@signed_in
async def change_password(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    form = await portal.read_form(request)
    if isinstance(form, web.StreamResponse):
        return form
    me = await _me(request)

    async def again(problem: str, status: int = 400, headers: dict | None = None) -> web.StreamResponse:
        return await portal.render(request, "password.html", status=status, headers=headers, problem=problem)

    if not portal.throttle.password_change(me.user.id):
        return await again("signin.throttled_short", 429, {"Retry-After": "900"})
    current, new, repeat = (str(form.get(k, "")) for k in ("current", "password", "password2"))
    try:
        if not await portal.passwords.verify(me.user.password_hash, current):
            return await again("password.wrong_current", 403)
        check_strength(new, email=me.user.email)
        if new != repeat:
            return await again("password.mismatch")
        new_hash = await portal.passwords.hash(new)
    except WeakPassword as exc:
        return await again(f"password.{exc.code}")
    except Busy:
        return await again("signin.busy", 503, {"Retry-After": "5"})
    await portal.store.set_password_hash(me.user.id, new_hash)
    closed = await portal.sessions.close_all(me.user.id, keep=me.session)
    await portal.store.append_audit(me.user.email, "users.password", f"user:{me.user.id}",
                                    {"email": me.user.email, "via": "portal", "outcome": "ok",
                                     "sessions_closed": len(closed)})
    log_event("password changed", user_id=me.user.id, sessions_closed=len(closed))
    return await portal.render(request, "message.html", heading="password.title", message="password.changed")


# ---- chat -----------------------------------------------------------------------------------


async def _chat_choices(request: web.Request, me: Viewer) -> tuple[list[acc.ProjectView], dict[str, list[str]]]:
    """The person's projects, and for each ("" for none) the models they may use there."""
    portal = portal_of(request)
    names = _model_names(request)
    projects = await acc.projects_of(portal.store, me.user, portal.now())
    user_limits = [lim for lim in [await portal.store.get_limits("user", me.user.id)] if lim is not None]
    models = {"": acc.allowed_models(names, user_limits)}
    for p in projects:
        models[p.project.id] = acc.allowed_models(names, [*p.limits, *user_limits])
    return projects, models


@signed_in
async def chat(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    me = await _me(request)
    projects, models = await _chat_choices(request, me)
    default_project = projects[0].project.id if projects else ""
    return await portal.render(request, "chat.html", projects=projects, models=models,
                               default_project=default_project,
                               keys_required=portal.config.auth.keys_required)


@signed_in
async def chat_key(request: web.Request) -> web.StreamResponse:
    """A short-lived key for the chat page's requests, in JSON; the session's previous one is revoked."""
    portal = portal_of(request)
    form = await portal.read_form(request)
    if isinstance(form, web.StreamResponse):
        return form
    me = await _me(request)
    if not portal.config.auth.keys_required:
        return portal.finish(request, web.json_response({"key": None, "expires_at": None}))
    projects, _ = await _chat_choices(request, me)
    project_id = str(form.get("project", ""))
    if project_id and project_id not in {p.project.id for p in projects}:
        return portal.finish(request, web.json_response({"error": "not a project of yours"}, status=403))
    now = portal.now()
    ends = [now + CHAT_KEY_TTL, me.session.expires_at]
    max_ttl = portal.config.auth.max_key_ttl.total_seconds()
    if max_ttl > 0:
        ends.append(now + dt.timedelta(seconds=max_ttl))
    secret = new_secret()
    store = portal.store
    try:
        key = await store.create_key(key_hash=portal.key_hasher.hash(secret), prefix=visible_prefix(secret),
                                     name=acc.CHAT_KEY_NAME, project_id=project_id or None, user_id=me.user.id,
                                     expires_at=min(ends))
    except StoreError as exc:
        return portal.finish(request, web.json_response({"error": str(exc)}, status=503))
    previous = me.session.chat_key_id
    await store.set_web_session_key(me.session.token_hash, key.id)
    if previous:
        try:
            await store.revoke_key(previous)
        except NotFound:
            pass
        portal.invalidate_key(previous)
    await store.append_audit(me.user.email, "keys.chat", f"key:{key.id}", {
        "via": "portal", "outcome": "ok", "prefix": key.prefix, "project_id": key.project_id,
        "expires_at": key.expires_at.isoformat() if key.expires_at else None, "replaces": previous,
    })
    body = {"key": secret, "expires_at": key.expires_at.isoformat() if key.expires_at else None}
    return portal.finish(request, web.json_response(body))
