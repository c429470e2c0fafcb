"""/admin: people, the organization tree and its limits, usage charts, the
cluster as the gateway sees it, and the audit log.

Every staff role sees every page. What each may change:

    admin    people (approve, suspend, staff roles, memberships), the tree, limits
    billing  limits and budgets
    operator nothing here: the cluster is steered with `llmgw ctl` and the console
    viewer   nothing

Changes go through the same Tenancy operations as `llmgw users|org|keys`,
against the store, and each is in the audit log with `via: portal` and the
form's fields; a refused one is recorded too.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json

from aiohttp import web

from llmgw.admin.audit import split_detail
from llmgw.store import (
    MEMBER_ROLES,
    STAFF_ROLES,
    USER_STATES,
    Conflict,
    Invalid,
    NotFound,
)
from llmgw.web import account as acc
from llmgw.web.charts import bar_chart
from llmgw.web.portal import Viewer, portal_of, staff

MAY = {"people": ("admin",), "tree": ("admin",), "limits": ("admin", "billing")}
USAGE_GROUPS = ("org", "project", "user", "model")


async def _me(request: web.Request) -> Viewer:
    viewer = await portal_of(request).viewer(request)
    assert viewer is not None
    return viewer


def _fields(form) -> dict:
    return {k: str(v) for k, v in form.items() if k not in ("csrf",)}


async def _refuse(request: web.Request, me: Viewer, what: str, action: str, target: str, fields: dict):
    portal = portal_of(request)
    await portal.audit_refused(me.user.email, action, target, fields,
                               f"staff role {me.user.role!r} may not change {what}", 403)
    return await portal.error(request, 403, "error.forbidden")


@staff()
async def home(request: web.Request) -> web.StreamResponse:
    return portal_of(request).redirect(request, "/admin/people")


# ---- people ----------------------------------------------------------------------------------


async def _people_page(request: web.Request, *, status: int = 200, problem: str | None = None,
                       detail: str = "") -> web.StreamResponse:
    portal = portal_of(request)
    me = await _me(request)
    state = request.query.get("state") or None
    state = state if state in USER_STATES else None
    query = request.query.get("q", "").strip().lower()
    store = portal.store
    tenancy = portal.tenancy(me.user.email)
    people = []
    for user in await store.list_users(state=state):
        if query and query not in user.email and query not in user.name.lower():
            continue
        members = [(m, await tenancy.path_of(m.scope_kind, m.scope_id))
                   for m in await store.list_memberships(user_id=user.id)]
        people.append((user, members))
    people.sort(key=lambda p: (p[0].state != "pending", p[0].email))
    paths = [n.path for n in await tenancy.tree()]
    return await portal.render(
        request, "admin_people.html", status=status, problem=problem, detail=detail, people=people, paths=paths,
        state=state or "", q=query, states=USER_STATES, roles=STAFF_ROLES, member_roles=MEMBER_ROLES,
        may_change=me.user.role in MAY["people"], section="people",
    )


@staff()
async def people(request: web.Request) -> web.StreamResponse:
    return await _people_page(request)


@staff()
async def change_person(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    form = await portal.read_form(request)
    if isinstance(form, web.StreamResponse):
        return form
    me = await _me(request)
    user_id = request.match_info["user_id"]
    action = str(form.get("action", ""))
    fields = {**_fields(form), "user": user_id}
    if me.user.role not in MAY["people"]:
        return await _refuse(request, me, "people", f"users.{action or 'change'}", f"user:{user_id}", fields)
    if action == "forget":
        return await _forget(request, me, user_id, str(form.get("confirm", "")))
    tenancy = portal.tenancy(me.user.email, fields)
    path = str(form.get("path", "")).strip()
    try:
        if action == "approve":
            if path:  # into a project (or team, or organization) as they are let in
                await tenancy.add_member(user_id, path, "member")
            approved = await tenancy.set_user_state(user_id, "active")
            mailer = portal.mailer
            if mailer is not None and hasattr(mailer, "send_approved"):  # mail: they hear they may sign in
                await mailer.send_approved(approved.email, portal.default_language)
        elif action in ("suspend", "activate"):
            if action == "suspend" and user_id == me.user.id:
                raise Conflict("you cannot suspend yourself")
            await tenancy.set_user_state(user_id, "suspended" if action == "suspend" else "active")
            if action == "suspend":
                await portal.sessions.close_all(user_id)
        elif action == "role":
            role = str(form.get("role", ""))
            if user_id == me.user.id and role != "admin":
                raise Conflict("you cannot take away your own admin role; ask another admin")
            await tenancy.set_user_role(user_id, role)
        elif action == "add-member":
            await tenancy.add_member(user_id, path, str(form.get("role", "member")))
        elif action == "remove-member":
            await tenancy.remove_member(user_id, path)
        else:
            raise Invalid(f"action: {action!r} is not one this page knows")
    except (Invalid, Conflict, NotFound) as exc:
        await portal.audit_refused(me.user.email, f"users.{action or 'change'}", f"user:{user_id}", fields,
                                   str(exc), 400)
        return await _people_page(request, status=400, problem="admin.refused", detail=str(exc))
    return portal.redirect(request, "/admin/people")


async def _forget(request: web.Request, me: Viewer, user_id: str, confirm: str) -> web.StreamResponse:
    """Forget a person once their email is typed back; the report of what went, in the page's language.
    The audit event (Tenancy's) names the pseudonym, never the email: no form fields go with it."""
    from llmgw.store.people import FORGET_PARTS

    portal = portal_of(request)
    person = await portal.store.get_user(user_id)
    if person is not None and user_id == me.user.id:
        return await _people_page(request, status=400, problem="admin.refused", detail="you cannot forget yourself")
    if person is not None and confirm.strip().lower() != person.email:
        return await _people_page(request, status=400, problem="admin.forget_mismatch")
    # Signed out first, the way the portal ends a session (its chat key revoked with it); counted in the report.
    closed = await portal.sessions.close_all(user_id) if person is not None else []
    report = await portal.tenancy(me.user.email).forget_user(user_id)
    removed = None
    if report is not None and not report.already_forgotten:
        counts = {name: getattr(report, name) for name, _ in FORGET_PARTS}
        counts["sessions"] += len(closed)
        removed = list(counts.items())
    return await portal.render(request, "admin_forgotten.html", removed=removed,
                               pseudonym=report.pseudonym if report else "", section="people")


# ---- the organization tree and its limits --------------------------------------------------------


def _money_to_micros(text: str) -> int | None:
    text = text.strip().replace(",", ".")
    if not text:
        return None
    try:
        amount = decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise Invalid(f"budget: {text!r} is not an amount like 250 or 12.50") from None
    if amount < 0 or amount > 10**12:
        raise Invalid(f"budget: {text!r} is out of range")
    return int(amount * 1_000_000)


def _whole(text: str, what: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise Invalid(f"{what}: {text!r} is not a whole number of at least 1")
    return int(text)


async def _org_page(request: web.Request, *, status: int = 200, problem: str | None = None,
                    detail: str = "") -> web.StreamResponse:
    portal = portal_of(request)
    me = await _me(request)
    store = portal.store
    since = acc.month_start(portal.now())
    rows = []
    for node in await portal.tenancy(me.user.email).tree():
        rows.append((node, node.path.count("/"), await store.get_limits(node.kind, node.id),
                     await store.spend_since(node.kind, node.id, since)))
    return await portal.render(request, "admin_org.html", status=status, problem=problem, detail=detail,
                               rows=rows, may_tree=me.user.role in MAY["tree"],
                               may_limits=me.user.role in MAY["limits"], section="org")


@staff()
async def org(request: web.Request) -> web.StreamResponse:
    return await _org_page(request)


@staff()
async def change_org(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    form = await portal.read_form(request)
    if isinstance(form, web.StreamResponse):
        return form
    me = await _me(request)
    action = str(form.get("action", ""))
    path = str(form.get("path", "")).strip()
    fields = _fields(form)
    what = "tree" if action == "create" else "limits"
    if me.user.role not in MAY[what]:
        return await _refuse(request, me, what, f"org.{action or 'change'}", path, fields)
    tenancy = portal.tenancy(me.user.email, fields)
    try:
        if action == "create":
            await tenancy.create(path, project=form.get("project") == "on")
        elif action in ("limits", "clear"):
            scope = await tenancy.scope(f"{form.get('kind', '')}:{path}" if form.get("kind") else path)
            if action == "clear":
                await tenancy.clear_limits(scope)
            else:
                models = [m.strip() for m in str(form.get("models", "")).split(",") if m.strip()]
                await tenancy.set_limits(
                    scope, rpm=_whole(str(form.get("rpm", "")), "rpm"), tpm=_whole(str(form.get("tpm", "")), "tpm"),
                    budget_micros=_money_to_micros(str(form.get("budget", ""))),
                    budget_period=str(form.get("period", "")) or None, allowed_models=models or None,
                )
        else:
            raise Invalid(f"action: {action!r} is not one this page knows")
    except (Invalid, Conflict, NotFound) as exc:
        await portal.audit_refused(me.user.email, f"org.{action or 'change'}", path, fields, str(exc), 400)
        return await _org_page(request, status=400, problem="admin.refused", detail=str(exc))
    return portal.redirect(request, "/admin/org")


# ---- usage --------------------------------------------------------------------------------------


@staff()
async def usage(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    me = await _me(request)
    t = portal.translator(request)
    try:
        days = min(90, max(1, int(request.query.get("days", "30"))))
    except ValueError:
        days = 30
    by = request.query.get("by", "org")
    by = by if by in USAGE_GROUPS else "org"
    until = acc.day_start(portal.now()) + dt.timedelta(days=1)
    since = until - dt.timedelta(days=days)
    store = portal.store
    per_day = {s.bucket: s for s in await store.usage_sums(None, "day", since, until)}
    buckets = [since + dt.timedelta(days=i) for i in range(days)]
    labels = [t.day(b) for b in buckets]

    def series(value) -> list[tuple[str, float]]:
        return [(label, float(value(per_day[b])) if b in per_day else 0.0) for label, b in zip(labels, buckets)]

    charts = [
        (t("usage.requests"), bar_chart(series(lambda s: s.requests), title=t("usage.requests"),
                                        fmt=lambda v: t.number(v), whole=True)),
        (t("usage.tokens"), bar_chart(series(lambda s: s.tokens), title=t("usage.tokens"),
                                      fmt=lambda v: t.number(v), css="bars tokens", whole=True)),
        (t("usage.cost"), bar_chart(series(lambda s: s.cost_micros), title=t("usage.cost"),
                                    fmt=lambda v: t.money(int(v), portal.currency), css="bars cost")),
    ]
    totals: dict[str | None, list[int]] = {}
    for s in await store.usage_sums(by, "day", since, until):
        row = totals.setdefault(s.group, [0, 0, 0, 0])
        row[0] += s.requests
        row[1] += s.errors
        row[2] += s.tokens
        row[3] += s.cost_micros
    tenancy = portal.tenancy(me.user.email)
    table = []
    for group, (requests, errors, tokens, cost) in sorted(totals.items(), key=lambda kv: (-kv[1][3], -kv[1][0])):
        name = group if by == "model" or not group else await tenancy.path_of(by, group)
        table.append((name or "–", requests, errors, tokens, cost))
    return await portal.render(request, "admin_usage.html", charts=charts, table=table, days=days, by=by,
                               groups=USAGE_GROUPS, section="usage")


# ---- the cluster and the audit log ------------------------------------------------------------------


@staff()
async def cluster(request: web.Request) -> web.StreamResponse:
    from llmgw.router.gateway import GATEWAY

    portal = portal_of(request)
    gateway = request.app.get(GATEWAY)
    models = []
    if gateway is not None:
        depths: dict[str, int] = {}
        for model, _band, depth in gateway.admission.depths():
            depths[model] = depths.get(model, 0) + depth
        for name in gateway.catalog.names():
            replicas = [r.describe() for r in gateway.replicas.replicas_for(name)]
            models.append({"name": name, "aliases": gateway.catalog.get(name).aliases, "replicas": replicas,
                           "ready": gateway.admission.healthy(name), "waiting": depths.get(name, 0)})
    return await portal.render(request, "admin_cluster.html", models=models, section="cluster")


@staff()
async def audit(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    actor = request.query.get("actor", "").strip() or None
    action = request.query.get("action", "").strip() or None
    before = request.query.get("before", "")
    before_id = int(before) if before.isdigit() else None
    events = await portal.store.list_audit(actor=actor, action=action, before_id=before_id, limit=50)
    rows = []
    for e in events:
        via, outcome, reason, rest = split_detail(e.detail)
        rows.append((e, via, outcome, reason, json.dumps(rest, sort_keys=True, ensure_ascii=False) if rest else ""))
    older = events[-1].id if len(events) == 50 else None
    return await portal.render(request, "admin_audit.html", rows=rows, actor=actor or "", action=action or "",
                               older=older, section="audit")
