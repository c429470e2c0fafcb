"""API keys and limits."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest

from llmgw.store import Conflict, Invalid, NotFound, Store

from .conftest import FakeClock, Tree


def sha(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


async def test_key_lookup_by_hash(store: Store, tree: Tree, clock: FakeClock) -> None:
    key = await store.create_key(
        key_hash=sha("sk-llmgw-secret-1"),
        prefix="sk-llmgw-sec",
        name="ci",
        project_id=tree.project.id,
        priority_band="gold",
        allowed_models=["qwen3-8b", "llama-3.1-8b"],
    )
    assert key.kind == "service" and key.created_at == clock.now
    assert key.allowed_models == ("qwen3-8b", "llama-3.1-8b")
    assert await store.get_key_by_hash(sha("sk-llmgw-secret-1")) == key
    assert await store.get_key(key.id) == key
    assert await store.get_key_by_hash(sha("another")) is None

    with pytest.raises(Conflict, match="hash already exists"):
        await store.create_key(key_hash=key.key_hash, prefix="p", name="dup", project_id=tree.project.id)


async def test_key_validation(store: Store, tree: Tree, clock: FakeClock) -> None:
    good = {"key_hash": sha("k"), "prefix": "sk-abc", "name": "n", "project_id": tree.project.id}
    bad_cases = [
        ({"key_hash": "ABC"}, "64 lower-case hex"),
        ({"key_hash": sha("k").upper()}, "64 lower-case hex"),
        ({"prefix": "sk abc"}, "spaces"),
        ({"project_id": None}, "needs a project_id"),
        ({"expires_at": clock.now - dt.timedelta(seconds=1)}, "already passed"),
        ({"expires_at": dt.datetime(2030, 1, 1)}, "no timezone"),
        ({"priority_band": "Gold Plus"}, "band name"),
        ({"allowed_models": "qwen"}, "list of model names"),
        ({"allowed_models": ["a", "a"]}, "listed twice"),
    ]
    for change, message in bad_cases:
        with pytest.raises(Invalid, match=message):
            await store.create_key(**{**good, **change})
    with pytest.raises(NotFound, match="no project"):
        await store.create_key(**{**good, "project_id": "prj-missing"})
    with pytest.raises(NotFound, match="no person"):
        await store.create_key(**{**good, "user_id": "usr-missing"})
    assert await store.list_keys() == []


async def test_key_kinds_and_listing(store: Store, tree: Tree, clock: FakeClock) -> None:
    service = await store.create_key(key_hash=sha("1"), prefix="a", name="svc", project_id=tree.project.id)
    clock.advance(1)
    member = await store.create_key(
        key_hash=sha("2"), prefix="b", name="mine", project_id=tree.project.id, user_id=tree.user.id
    )
    clock.advance(1)
    personal = await store.create_key(key_hash=sha("3"), prefix="c", name="me", user_id=tree.user.id)
    assert (service.kind, member.kind, personal.kind) == ("service", "member", "personal")

    assert [k.id for k in await store.list_keys(project_id=tree.project.id)] == [member.id, service.id]
    assert [k.id for k in await store.list_keys(user_id=tree.user.id)] == [personal.id, member.id]
    assert len(await store.list_keys()) == 3
    await store.revoke_key(member.id)
    assert [k.id for k in await store.list_keys(user_id=tree.user.id, include_revoked=False)] == [personal.id]


async def test_revoke_expiry_and_touch(store: Store, tree: Tree, clock: FakeClock) -> None:
    key = await store.create_key(key_hash=sha("x"), prefix="x", name="x", project_id=tree.project.id)
    assert key.usable_at(clock.now)

    later = clock.now + dt.timedelta(days=30)
    expiring = await store.set_key_expiry(key.id, later)
    assert expiring.expires_at == later and not expiring.usable_at(later)
    assert (await store.set_key_expiry(key.id, None)).expires_at is None

    t1 = clock.advance(60)
    t2 = clock.advance(60)
    assert await store.touch_keys({key.id: t2, "key-unknown": t2}) == 1
    assert await store.touch_keys({key.id: t1}) == 0  # older than the time kept
    assert (await store.get_key(key.id)).last_used_at == t2
    assert await store.touch_keys({}) == 0

    revoked = await store.revoke_key(key.id)
    assert revoked.revoked_at == clock.now and not revoked.usable_at(clock.now)
    clock.advance(5)
    again = await store.revoke_key(key.id)
    assert again.revoked_at == revoked.revoked_at  # the first revocation stands
    assert (await store.get_key_by_hash(sha("x"))).revoked_at == revoked.revoked_at
    with pytest.raises(NotFound):
        await store.revoke_key("key-missing")


async def test_scheduled_revocation(store: Store, tree: Tree, clock: FakeClock) -> None:
    """A rotation's overlap: the old key works until its revocation time."""
    key = await store.create_key(key_hash=sha("old"), prefix="o", name="old", project_id=tree.project.id)
    in_two_days = clock.now + dt.timedelta(days=2)
    scheduled = await store.revoke_key(key.id, at=in_two_days)
    assert scheduled.revoked_at == in_two_days and scheduled.usable_at(clock.now)
    assert [k.id for k in await store.list_keys(project_id=tree.project.id, include_revoked=False)] == [key.id]
    with pytest.raises(Conflict, match="usable key"):
        await store.delete_project(tree.project.id)
    # A later time does not delay it; an earlier one brings it forward.
    assert (await store.revoke_key(key.id, at=in_two_days + dt.timedelta(days=1))).revoked_at == in_two_days
    now = await store.revoke_key(key.id)
    assert now.revoked_at == clock.now and not now.usable_at(clock.now)
    assert await store.list_keys(project_id=tree.project.id, include_revoked=False) == []
    with pytest.raises(NotFound):
        await store.set_key_expiry("key-missing", None)


async def test_project_with_usable_keys_is_kept(store: Store, tree: Tree, clock: FakeClock) -> None:
    key = await store.create_key(key_hash=sha("x"), prefix="x", name="x", project_id=tree.project.id)
    await store.set_limits("key", key.id, rpm=1)
    with pytest.raises(Conflict, match=r"1 usable key\(s\): revoke them first"):
        await store.delete_project(tree.project.id)
    await store.revoke_key(key.id)
    await store.delete_project(tree.project.id)
    assert await store.get_key(key.id) is None
    assert await store.get_limits("key", key.id) is None


async def test_limits_set_get_clear(store: Store, tree: Tree, clock: FakeClock) -> None:
    limits = await store.set_limits(
        "team", tree.team.id, rpm=60, tpm=100_000, budget_micros=50_000_000, budget_period="month",
        allowed_models=["qwen3-8b"],
    )
    assert limits.updated_at == clock.now
    assert await store.get_limits("team", tree.team.id) == limits

    clock.advance(10)
    replaced = await store.set_limits("team", tree.team.id, tpm=5)
    assert (replaced.rpm, replaced.tpm, replaced.budget_micros, replaced.allowed_models) == (None, 5, None, None)
    assert await store.get_limits("team", tree.team.id) == replaced

    assert await store.clear_limits("team", tree.team.id) is True
    assert await store.clear_limits("team", tree.team.id) is False
    assert await store.get_limits("team", tree.team.id) is None

    for kwargs, message in [
        ({"rpm": 0}, "between 1"),
        ({"tpm": 1.5}, "whole number"),
        ({"rpm": True}, "whole number"),
        ({"budget_micros": 10}, "needs both"),
        ({"budget_period": "day"}, "needs both"),
        ({"budget_micros": -1, "budget_period": "day"}, "between 0"),
        ({"budget_micros": 1, "budget_period": "week"}, "is not one of"),
    ]:
        with pytest.raises(Invalid, match=message):
            await store.set_limits("team", tree.team.id, **kwargs)
    with pytest.raises(Invalid):
        await store.set_limits("galaxy", tree.team.id, rpm=1)
    with pytest.raises(NotFound, match="no team"):
        await store.set_limits("team", "team-missing", rpm=1)
    assert await store.get_limits("team", tree.team.id) is None


async def test_limits_chain_and_resolve(store: Store, tree: Tree) -> None:
    key = await store.create_key(
        key_hash=sha("k"), prefix="k", name="k", project_id=tree.project.id, user_id=tree.user.id
    )
    await store.set_limits("key", key.id, rpm=10)
    await store.set_limits("org", tree.org.id, budget_micros=1_000_000, budget_period="day")
    await store.set_limits("user", tree.user.id, tpm=1000)
    await store.set_limits("project", tree.project.id, allowed_models=["m1"])
    other = await store.create_org("Other")
    await store.set_limits("org", other.id, rpm=1)  # not on the chain

    chain = await store.get_limits_chain(
        org_id=tree.org.id, team_id=tree.team.id, project_id=tree.project.id,
        user_id=tree.user.id, key_id=key.id,
    )
    assert [(lim.scope_kind, lim.scope_id) for lim in chain] == [
        ("org", tree.org.id), ("project", tree.project.id), ("user", tree.user.id), ("key", key.id)
    ]
    assert await store.get_limits_chain() == []
    assert [lim.scope_kind for lim in await store.get_limits_chain(key_id=key.id)] == ["key"]

    resolved = await store.resolve_key(sha("k"))
    assert resolved is not None
    assert resolved.key == key
    assert (resolved.org_id, resolved.team_id, resolved.user_state) == (tree.org.id, tree.team.id, "active")
    assert list(resolved.limits) == chain
    await store.set_user_state(tree.user.id, "suspended")
    assert (await store.resolve_key(sha("k"))).user_state == "suspended"
    assert await store.resolve_key(sha("nope")) is None

    personal = await store.create_key(key_hash=sha("p"), prefix="p", name="p", user_id=tree.user.id)
    r = await store.resolve_key(personal.key_hash)
    assert (r.org_id, r.team_id, [lim.scope_kind for lim in r.limits]) == (None, None, ["user"])
