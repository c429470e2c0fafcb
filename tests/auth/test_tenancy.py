"""Tenancy operations: paths, people, keys (rotation with overlap), limits, audit."""

from __future__ import annotations

import datetime as dt

import pytest

from llmgw.auth.keys import hash_secret
from llmgw.auth.tenancy import key_state
from llmgw.store import Conflict, Invalid, NotFound, Store

from .conftest import FakeClock, tenancy_for

DAY = dt.timedelta(days=1)


async def test_paths_name_orgs_teams_and_projects(sqlite_store: Store, clock: FakeClock) -> None:
    t = tenancy_for(sqlite_store, clock)
    org = await t.create("acme")
    team = await t.create("acme/search")
    in_team = await t.create(" acme / search / indexer ")
    direct = await t.create("acme/billing", project=True)
    assert [(n.kind, n.path) for n in (org, team, in_team, direct)] == [
        ("org", "acme"), ("team", "acme/search"), ("project", "acme/search/indexer"), ("project", "acme/billing")]
    assert (await t.find("acme/search")).id == team.id
    assert (await t.find("acme/billing")).id == direct.id
    assert (await t.find("acme/search/indexer")).team.id == team.id
    assert [n.path for n in await t.tree()] == ["acme", "acme/search", "acme/search/indexer", "acme/billing"]

    with pytest.raises(Conflict, match="already a project"):
        await t.create("acme/billing")
    with pytest.raises(Conflict, match="already a team"):
        await t.create("acme/search", project=True)
    with pytest.raises(NotFound, match="no team named 'nope' in acme"):
        await t.create("acme/nope/x")
    with pytest.raises(NotFound, match="no organization named 'globex'"):
        await t.find("globex/x")
    with pytest.raises(Invalid, match="empty part"):
        await t.find("acme//x")
    with pytest.raises(Invalid, match="at most ORG/TEAM/PROJECT"):
        await t.find("a/b/c/d")
    with pytest.raises(Conflict):
        await t.remove("acme/search")  # still holds a project
    await t.remove("acme/search/indexer")
    await t.remove("acme/search")
    assert [n.path for n in await t.tree()] == ["acme", "acme/billing"]


async def test_people_and_memberships(sqlite_store: Store, clock: FakeClock) -> None:
    t = tenancy_for(sqlite_store, clock)
    await t.create("acme")
    await t.create("acme/search")
    ann = await t.create_user("Ann@Example.com")
    assert (ann.email, ann.name, ann.state, ann.role) == ("ann@example.com", "Ann", "active", "none")
    assert (await t.set_user_role(ann.id, "operator")).role == "operator"
    assert (await t.set_user_state("ann@example.com", "suspended")).state == "suspended"
    assert [u.email for u in await t.list_users(state="suspended")] == ["ann@example.com"]
    await t.add_member("ann@example.com", "acme/search", "owner")
    assert [(u.email, m.role) for u, m in await t.members(await t.find("acme/search"))] == [("ann@example.com", "owner")]
    assert await t.remove_member("ann@example.com", "acme/search")
    with pytest.raises(NotFound, match="not a member"):
        await t.remove_member("ann@example.com", "acme/search")
    with pytest.raises(Invalid, match="role: 'boss' is not one of"):
        await t.set_user_role(ann.id, "boss")
    with pytest.raises(NotFound, match="no person with email"):
        await t.find_user("bob@example.com")


async def test_key_checks_name_the_field(sqlite_store: Store, clock: FakeClock) -> None:
    t = tenancy_for(sqlite_store, clock, max_key_ttl=dt.timedelta(days=90), bands=["gold", "silver"],
                    models={"qwen3-8b": "qwen3-8b", "qwen": "qwen3-8b"})
    await t.create("acme")
    await t.create("acme/app", project=True)
    await t.create_user("ann@example.com")
    await t.create_user("bob@example.com", state="pending")

    issued = await t.create_key(project="acme/app")
    assert issued.key.expires_at == clock.now + dt.timedelta(days=90)  # the cap is the default
    assert issued.key.key_hash == hash_secret(issued.secret)
    cases = [
        ({"project": "acme/app", "ttl": dt.timedelta(days=91)}, Invalid, "ttl: 91d|ttl: 2184h"),
        ({"project": "acme/app", "ttl": dt.timedelta(0)}, Invalid, "ttl: must be more than zero"),
        ({"project": "acme/app", "band": "platinum"}, Invalid, "band: 'platinum' is not one of"),
        ({"project": "acme/app", "models": ["gpt-5"]}, Invalid, "models: 'gpt-5' not in server.yaml"),
        ({"project": "acme/app", "user": "ann@example.com"}, Conflict, "not a member of acme/app"),
        ({"user": "bob@example.com"}, Conflict, "bob@example.com is pending"),
        ({}, Invalid, "needs a project"),
        ({"project": "acme/nope"}, NotFound, "no project named 'nope'"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            await t.create_key(**kwargs)
    ok = await t.create_key(project="acme/app", models=["qwen"], band="gold")
    assert ok.key.allowed_models == ("qwen",)
    await t.add_member("ann@example.com", "acme")  # membership of the organization covers its projects
    assert (await t.create_key(project="acme/app", user="ann@example.com")).key.kind == "member"


async def test_rotation_keeps_the_settings_and_lets_the_old_key_work_for_the_overlap(
    store: Store, clock: FakeClock
) -> None:
    t = tenancy_for(store, clock)
    await t.create("acme")
    await t.create("acme/app", project=True)
    old = await t.create_key(project="acme/app", name="ci", ttl=30 * DAY, band="gold", models=["a", "b"])
    await t.set_limits(await t.scope(f"key:{old.key.id}"), rpm=10, tpm=500)
    clock.advance(3600)

    new, old_now = await t.rotate_key(old.key.prefix, dt.timedelta(hours=24))
    assert new.secret != old.secret and new.key.id != old.key.id
    assert (new.key.name, new.key.project_id, new.key.user_id, new.key.priority_band, new.key.allowed_models) == (
        "ci", old.key.project_id, None, "gold", ("a", "b"))
    assert new.key.expires_at == clock.now + 30 * DAY
    assert old_now.expires_at == clock.now + dt.timedelta(hours=24)
    limits = await store.get_limits("key", new.key.id)
    assert (limits.rpm, limits.tpm) == (10, 500)
    clock.advance(24 * 3600)
    assert key_state(await store.get_key(old.key.id), clock.now) == "expired"
    assert key_state(await store.get_key(new.key.id), clock.now) == "active"

    _, stopped = await t.rotate_key(new.key.id, dt.timedelta(0))
    assert key_state(stopped, clock.now) == "revoked"
    with pytest.raises(Conflict, match="is revoked"):
        await t.rotate_key(new.key.id, dt.timedelta(hours=1))
    events = await store.list_audit(action="keys.*")
    assert [e.action for e in events] == ["keys.rotate", "keys.rotate", "keys.limits", "keys.create"]
    assert events[1].detail["new_key_id"] == new.key.id and events[1].detail["overlap_s"] == 86400


async def test_an_overlap_never_lengthens_a_key(sqlite_store: Store, clock: FakeClock) -> None:
    t = tenancy_for(sqlite_store, clock)
    await t.create("acme")
    await t.create("acme/app", project=True)
    old = await t.create_key(project="acme/app", ttl=dt.timedelta(hours=2))
    _, old_now = await t.rotate_key(old.key.id, dt.timedelta(hours=48))
    assert old_now.expires_at == old.key.expires_at


async def test_limits_change_field_by_field(store: Store, clock: FakeClock) -> None:
    t = tenancy_for(store, clock)
    await t.create("acme")
    await t.create("acme/app", project=True)
    scope = await t.scope("project:acme/app")
    assert (scope.kind, scope.label) == ("project", "acme/app")
    lim = await t.set_limits(scope, rpm=60, budget_micros=25_000_000)
    assert (lim.rpm, lim.tpm, lim.budget_micros, lim.budget_period) == (60, None, 25_000_000, "month")
    lim = await t.set_limits(scope, tpm=1000, budget_period="day")
    assert (lim.rpm, lim.tpm, lim.budget_micros, lim.budget_period) == (60, 1000, 25_000_000, "day")
    lim = await t.set_limits(scope, rpm=None, budget_micros=None)
    assert (lim.rpm, lim.tpm, lim.budget_micros, lim.budget_period) == (None, 1000, None, None)
    assert await t.set_limits(scope, tpm=None) is None
    assert await t.get_limits(scope) is None
    with pytest.raises(Invalid, match="rpm: expected a whole number of at least 1"):
        await t.set_limits(scope, rpm=0)
    with pytest.raises(Invalid, match="budget_period: 'week' is not one of"):
        await t.set_limits(scope, budget_micros=1, budget_period="week")
    with pytest.raises(Invalid, match="budget_period: give a budget with it"):
        await t.set_limits(scope, budget_period="day")
    await t.set_limits(scope, rpm=5)
    assert await t.clear_limits(scope) and not await t.clear_limits(scope)


async def test_scopes_are_read_by_kind_or_by_shape(sqlite_store: Store, clock: FakeClock) -> None:
    t = tenancy_for(sqlite_store, clock)
    await t.create("acme")
    await t.create("acme/ml")
    ann = await t.create_user("ann@example.com")
    key = (await t.create_key(user="ann@example.com")).key
    assert str(await t.scope("acme")) == "org:acme"
    assert str(await t.scope("team:acme/ml")) == "team:acme/ml"
    assert (await t.scope("ann@example.com")).id == ann.id
    assert (await t.scope(f"user:{ann.id}")).id == ann.id
    assert (await t.scope(key.prefix)).id == key.id
    assert (await t.scope(f"key:{key.id}")).id == key.id
    with pytest.raises(NotFound, match="no project named 'ml'"):
        await t.scope("project:acme/ml")


async def test_every_change_is_audited_with_its_actor(store: Store, clock: FakeClock) -> None:
    forgotten: list[str | None] = []
    t = tenancy_for(store, clock, actor="alice", on_change=forgotten.append)
    await t.create("acme")
    await t.create("acme/app", project=True)
    await t.create_user("ann@example.com")
    await t.add_member("ann@example.com", "acme/app")
    issued = await t.create_key(project="acme/app", user="ann@example.com")
    await t.set_limits(await t.scope("acme"), rpm=5)
    await t.set_user_state("ann@example.com", "suspended")
    await t.revoke_key(issued.key.id)
    events = list(reversed(await store.list_audit()))
    assert [e.action for e in events] == [
        "org.create", "org.create", "users.create", "users.add-member", "keys.create", "keys.limits",
        "users.suspend", "keys.revoke",
    ]
    assert {e.actor for e in events} == {"alice"}
    assert events[4].target == f"key:{issued.key.id}"
    assert all(issued.secret not in str(e.detail) and issued.key.key_hash not in str(e.detail) for e in events)
    assert forgotten == [None, None, issued.key.id]  # limits and a person's state touch many keys
