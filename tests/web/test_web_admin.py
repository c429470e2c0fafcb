"""/admin: who sees it, who changes what, and the audit log of every change (refusals too)."""

from __future__ import annotations

import datetime as dt

from llmgw.store import UsageRow

from .conftest import Site

PAGES = ("/admin/people", "/admin/org", "/admin/usage", "/admin/cluster", "/admin/audit")


async def _staff(site: Site, role: str, address: str = "192.0.2.20"):
    await site.person(f"{role}@example.com", role=role, project=None)
    b = await site.browser(address)
    await b.sign_in(f"{role}@example.com")
    return b


async def test_people_without_a_staff_role_never_see_admin(site: Site) -> None:
    await site.person()
    b = await site.browser()
    anonymous = await b.get("/admin/people")
    assert anonymous.url.endswith("/signin?next=/admin/people")
    await b.sign_in("ayse@example.com")
    assert "/admin/people" not in (await b.get("/account")).text
    for path in PAGES:
        page = await b.get(path)
        assert page.status == 403 and "staff role does not allow" in page.text, path
    refused = await b.submit("/account", "/admin/org", {"action": "create", "path": "evil"})
    assert refused.status == 403
    assert await site.store.get_org_by_name("evil") is None
    event = (await site.store.list_audit(actor="ayse@example.com"))[0]
    assert event.detail["outcome"] == "refused" and event.detail["status"] == 403


async def test_every_staff_role_sees_every_page(site: Site) -> None:
    for i, role in enumerate(("viewer", "operator", "billing", "admin")):
        b = await _staff(site, role, f"192.0.2.{30 + i}")
        assert "/admin/people" in (await b.get("/account")).text
        for path in PAGES:
            page = await b.get(path)
            assert page.status == 200, (role, path)
            assert page.headers["Cache-Control"] == "no-store"


async def test_a_viewer_looks_and_changes_nothing(site: Site) -> None:
    pending = await site.person("new@example.com", state="pending", project=None)
    viewer = await _staff(site, "viewer")
    people = await viewer.get("/admin/people")
    assert "new@example.com" in people.text and "lets you look, not change" in people.text
    assert 'value="approve"' not in people.text
    page = await viewer.post(f"/admin/people/{pending.id}", {"csrf": people.csrf, "action": "approve"})
    assert page.status == 403
    assert (await site.store.get_user(pending.id)).state == "pending"
    page = await viewer.post("/admin/org", {"csrf": people.csrf, "action": "limits", "path": "org:acme", "rpm": "5"})
    assert page.status == 403 and await site.store.get_limits("org", (await site.store.get_org_by_name("acme")).id) is None
    refusals = await site.store.list_audit(actor="viewer@example.com")
    assert [e.action for e in refusals] == ["org.limits", "users.approve"]
    assert all(e.detail["outcome"] == "refused" for e in refusals)


async def test_an_admin_approves_into_a_project_and_it_is_audited(site: Site) -> None:
    pending = await site.person("new@example.com", state="pending", project=None)
    admin = await _staff(site, "admin")
    people = await admin.get("/admin/people?state=pending")
    assert "new@example.com" in people.text and "admin@example.com" not in people.text
    done = await admin.post(f"/admin/people/{pending.id}", {"csrf": people.csrf, "action": "approve",
                                                             "path": "acme/search/indexer"})
    assert done.status == 200 and done.url.endswith("/admin/people")
    assert (await site.store.get_user(pending.id)).state == "active"
    assert [m.scope_kind for m in await site.store.list_memberships(user_id=pending.id)] == ["project"]
    events = await site.store.list_audit(actor="admin@example.com")
    assert [e.action for e in events] == ["users.activate", "users.add-member"]
    assert all(e.detail["via"] == "portal" and e.detail["outcome"] == "ok" for e in events)
    assert events[0].detail["fields"]["path"] == "acme/search/indexer"
    assert "csrf" not in events[0].detail["fields"]
    # The approved person signs in and sees the project.
    b = await site.browser("192.0.2.99")
    assert "acme/search/indexer" in (await b.sign_in("new@example.com")).text


async def test_an_admin_suspends_gives_roles_and_memberships(site: Site) -> None:
    user = await site.person()
    b = await site.browser("192.0.2.5")
    await b.sign_in("ayse@example.com")
    admin = await _staff(site, "admin")
    page = await admin.get("/admin/people")
    for fields in ({"action": "role", "role": "billing"},
                   {"action": "add-member", "path": "acme/search", "role": "owner"},
                   {"action": "remove-member", "path": "acme/search/indexer"},
                   {"action": "suspend"}):
        done = await admin.post(f"/admin/people/{user.id}", {"csrf": page.csrf, **fields})
        assert done.status == 200 and done.url.endswith("/admin/people"), fields
    user = await site.store.get_user(user.id)
    assert (user.role, user.state) == ("billing", "suspended")
    assert [(m.scope_kind, m.role) for m in await site.store.list_memberships(user_id=user.id)] == [("team", "owner")]
    assert (await b.get("/account")).url.endswith("/signin?next=/account")  # suspended: signed out
    actions = [e.action for e in await site.store.list_audit(actor="admin@example.com")]
    assert actions == ["users.suspend", "users.remove-member", "users.add-member", "users.role"]
    # A mistake is refused, said, and recorded.
    bad = await admin.post(f"/admin/people/{user.id}", {"csrf": page.csrf, "action": "add-member", "path": "nope/x"})
    assert bad.status == 400 and "no organization named" in bad.text
    assert (await site.store.list_audit(actor="admin@example.com"))[0].detail["outcome"] == "refused"
    me = (await site.store.get_user_by_email("admin@example.com")).id
    own = await admin.post(f"/admin/people/{me}", {"csrf": page.csrf, "action": "role", "role": "viewer"})
    assert own.status == 400 and "your own admin role" in own.text


async def test_billing_sets_limits_but_not_people_or_the_tree(site: Site) -> None:
    pending = await site.person("new@example.com", state="pending", project=None)
    billing = await _staff(site, "billing")
    org = await billing.get("/admin/org")
    assert "Set limits" in org.text and "Add an organization" not in org.text
    done = await billing.post("/admin/org", {"csrf": org.csrf, "action": "limits", "path": "team:acme/search",
                                             "rpm": "60", "tpm": "", "budget": "12.50", "period": "month",
                                             "models": "m, n"})
    assert done.status == 200, done.text
    team = await site.store.get_team_by_name((await site.store.get_org_by_name("acme")).id, "search")
    limits = await site.store.get_limits("team", team.id)
    assert (limits.rpm, limits.tpm, limits.budget_micros, limits.budget_period, limits.allowed_models) == (
        60, None, 12_500_000, "month", ("m", "n"))
    assert "60 requests a minute" in done.text and "12.50 USD a month" in done.text
    assert (await billing.post("/admin/org", {"csrf": org.csrf, "action": "create", "path": "x"})).status == 403
    assert (await billing.post(f"/admin/people/{pending.id}", {"csrf": org.csrf, "action": "approve"})).status == 403
    cleared = await billing.post("/admin/org", {"csrf": org.csrf, "action": "clear", "path": "team:acme/search"})
    assert cleared.status == 200 and await site.store.get_limits("team", team.id) is None
    bad = await billing.post("/admin/org", {"csrf": org.csrf, "action": "limits", "path": "org:acme", "rpm": "lots"})
    assert bad.status == 400 and "whole number" in bad.text
    actions = [e.action for e in await site.store.list_audit(actor="billing@example.com")]
    assert actions[:4] == ["org.limits", "keys.limits-clear", "users.approve", "org.create"]


async def test_an_admin_grows_the_tree(site: Site) -> None:
    admin = await _staff(site, "admin")
    org = await admin.get("/admin/org")
    for path, project in (("beta", False), ("beta/web", True)):
        fields = {"csrf": org.csrf, "action": "create", "path": path, **({"project": "on"} if project else {})}
        assert (await admin.post("/admin/org", fields)).status == 200
    page = await admin.get("/admin/org")
    assert "beta/web" in page.text
    assert [p.name for p in await site.store.list_projects(org_id=(await site.store.get_org_by_name("beta")).id)] == ["web"]


async def test_usage_is_charted_and_grouped(site: Site) -> None:
    user = await site.person()
    org = await site.store.get_org_by_name("acme")
    now = dt.datetime.now(dt.UTC)
    rows = [UsageRow(request_id=f"req_{i}", at=now - dt.timedelta(days=i % 5), org_id=org.id, user_id=user.id,
                     model_requested="m", model_served="m", prompt_tokens=10, completion_tokens=5,
                     cost_micros=1500, status=200) for i in range(20)]
    await site.store.insert_usage_rows(rows)
    viewer = await _staff(site, "viewer")
    page = await viewer.get("/admin/usage?days=7&by=org")
    assert page.text.count("<svg class=\"chart") == 3
    assert "<title>Requests a day</title>" in page.text
    assert "<td><code>acme</code></td>" in page.text and "0.03 USD" in page.text
    page = await viewer.get("/admin/usage?days=30&by=user")
    assert "ayse@example.com" in page.text
    page = await viewer.get("/admin/usage?days=abc&by=<b>")
    assert page.status == 200


async def test_the_cluster_page_shows_models_and_replicas(site: Site) -> None:
    viewer = await _staff(site, "operator")
    page = await viewer.get("/admin/cluster")
    assert "<code>m</code>" in page.text and "<code>n</code>" in page.text
    assert site.engine.url in page.text and "small" in page.text


async def test_the_audit_page_lists_and_filters(site: Site) -> None:
    await site.person()
    admin = await _staff(site, "admin")
    page = await admin.get("/admin/audit")
    assert "users.create" in page.text and "org.create" in page.text
    only = await admin.get("/admin/audit?action=org.*")
    assert "org.create" in only.text and "users.create" not in only.text
    by_actor = await admin.get("/admin/audit?actor=nobody")
    assert "Nothing recorded" in by_actor.text
