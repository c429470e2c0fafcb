"""Key lifetime caps per organization, team and project, through Tenancy (both stores)."""

from __future__ import annotations

import datetime as dt

import pytest

from llmgw.store import Invalid

from .conftest import tenancy_for

DAY = dt.timedelta(days=1)


async def test_caps_narrow_down_the_tree_and_a_rotated_key_is_cut_to_the_cap(store, clock):
    t = tenancy_for(store, clock, max_key_ttl=365 * DAY)
    for path in ("acme", "acme/ml", "acme/ml/train"):
        await t.create(path)
    await t.create_user("ann@example.com")
    await t.add_member("ann@example.com", "acme")
    long_lived = await t.create_key(project="acme/ml/train", ttl=200 * DAY)
    with pytest.raises(Invalid, match="longer than auth.max_key_ttl in server.yaml allows"):
        await t.set_key_lifetime("acme", 400 * DAY)
    await t.set_key_lifetime("acme", 90 * DAY)
    cap = await t.key_lifetime_cap(await t.find("acme/ml/train"))
    assert (cap.ttl, cap.where) == (90 * DAY, "org acme")
    with pytest.raises(Invalid, match="set by org acme"):
        await t.create_key(project="acme/ml/train", user="ann@example.com", ttl=91 * DAY)
    member = await t.create_key(project="acme/ml/train", user="ann@example.com")
    assert member.key.expires_at == clock.now + 90 * DAY
    personal = await t.create_key(user="ann@example.com", ttl=300 * DAY)  # no project: the server's cap alone
    assert personal.key.expires_at == clock.now + 300 * DAY

    new, _ = await t.rotate_key(long_lived.key.id, dt.timedelta(0))
    assert new.key.expires_at == clock.now + 90 * DAY  # its 200 days cut to the cap now in force
    assert (await store.get_key(long_lived.key.id)).expires_at == clock.now + 200 * DAY  # made before: kept
    events = [e for e in await store.list_audit(action="keys.lifetime")]
    assert len(events) == 1 and events[0].detail["max_key_ttl_s"] == 90 * 86400
    with pytest.raises(Invalid, match="at least 1s"):
        await t.set_key_lifetime("acme/ml", dt.timedelta(0))
