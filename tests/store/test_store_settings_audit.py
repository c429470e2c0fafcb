"""Cluster settings with their history, and the audit log."""

from __future__ import annotations

import datetime as dt

import pytest

from llmgw.store import Invalid, Store

from .conftest import FakeClock


async def test_settings_with_history(store: Store, clock: FakeClock) -> None:
    assert await store.get_setting("router.timeouts.dial") is None
    first = await store.set_setting("router.timeouts.dial", "5s", actor="ann@example.com")
    assert (first.value, first.version, first.actor, first.updated_at) == ("5s", 1, "ann@example.com", clock.now)
    clock.advance(60)
    second = await store.set_setting("router.timeouts.dial", "10s", actor="ctl:bob")
    await store.set_setting("guard", {"mode": "shadow", "thresholds": [0.5, 0.9], "on": True}, actor="ann@example.com")
    await store.set_setting("nothing", None, actor="x")

    assert await store.get_setting("router.timeouts.dial") == second
    assert second.version == 2
    everything = await store.get_settings()
    assert sorted(everything) == ["guard", "nothing", "router.timeouts.dial"]
    assert everything["guard"].value == {"mode": "shadow", "thresholds": [0.5, 0.9], "on": True}
    assert everything["nothing"].value is None

    clock.advance(60)
    assert await store.unset_setting("router.timeouts.dial", actor="ctl:bob") is True
    assert await store.unset_setting("router.timeouts.dial", actor="ctl:bob") is False
    assert await store.get_setting("router.timeouts.dial") is None
    again = await store.set_setting("router.timeouts.dial", "7s", actor="ann@example.com")
    assert again.version == 4  # versions continue across a removal

    history = await store.setting_history("router.timeouts.dial")
    assert [(h.version, h.value, h.removed, h.actor) for h in history] == [
        (4, "7s", False, "ann@example.com"),
        (3, None, True, "ctl:bob"),
        (2, "10s", False, "ctl:bob"),
        (1, "5s", False, "ann@example.com"),
    ]
    assert len(await store.setting_history()) == 6
    assert len(await store.setting_history(limit=2)) == 2


async def test_settings_validation(store: Store) -> None:
    with pytest.raises(Invalid, match="dotted lower-case"):
        await store.set_setting("Router Timeouts", 1, actor="a")
    with pytest.raises(Invalid, match="not a JSON value"):
        await store.set_setting("x", {1, 2}, actor="a")
    with pytest.raises(Invalid, match="not a JSON value"):
        await store.set_setting("x", float("nan"), actor="a")
    with pytest.raises(Invalid, match="actor"):
        await store.set_setting("x", 1, actor="")
    assert await store.setting_history() == []


async def test_audit_filters(store: Store, clock: FakeClock) -> None:
    t0 = clock.now
    created = await store.append_audit("ann@example.com", "keys.create", "key-1", {"project": "Acme/ml/train"})
    assert created.at == t0 and created.detail == {"project": "Acme/ml/train"}
    clock.advance(60)
    await store.append_audit("ann@example.com", "keys.revoke", "key-1")
    clock.advance(60)
    await store.append_audit("ctl:bob", "users.role", "usr-2", {"role": "admin"})
    clock.advance(60)
    last = await store.append_audit("terraform", "keystone", "x")


    def actions(events: list) -> list[str]:
        return [e.action for e in events]
    assert actions(await store.list_audit()) == ["keystone", "users.role", "keys.revoke", "keys.create"]
    assert actions(await store.list_audit(actor="ann@example.com")) == ["keys.revoke", "keys.create"]
    assert actions(await store.list_audit(action="keys.create")) == ["keys.create"]
    assert actions(await store.list_audit(action="keys.*")) == ["keys.revoke", "keys.create"]
    assert actions(await store.list_audit(action="key*")) == ["keystone", "keys.revoke", "keys.create"]
    assert actions(await store.list_audit(target="key-1")) == ["keys.revoke", "keys.create"]
    assert actions(await store.list_audit(since=t0 + dt.timedelta(seconds=60))) == ["keystone", "users.role", "keys.revoke"]
    assert actions(await store.list_audit(until=t0 + dt.timedelta(seconds=60))) == ["keys.create"]
    assert actions(await store.list_audit(limit=2)) == ["keystone", "users.role"]
    assert actions(await store.list_audit(before_id=last.id, limit=2)) == ["users.role", "keys.revoke"]
    assert await store.list_audit(actor="nobody") == []

    with pytest.raises(Invalid, match="detail: expected a mapping"):
        await store.append_audit("a", "b", "c", ["not", "a", "map"])  # type: ignore[arg-type]
    with pytest.raises(Invalid, match="actor"):
        await store.append_audit("", "b", "c")


async def test_history_of_a_set_of_keys_leaves_the_others_out(store) -> None:
    for i in range(3):
        await store.set_setting("control.parked", {"m": i}, actor="control-plane")
    await store.set_setting("router.retries.attempts", 2, actor="ann")
    await store.set_setting("control.parked", {}, actor="control-plane")
    changes = await store.setting_history(keys={"router.retries.attempts", "admission.max_wait"}, limit=1)
    assert [(c.key, c.value) for c in changes] == [("router.retries.attempts", 2)]
    assert await store.setting_history(keys=(), limit=5) == []
