"""Leadership through store faults and restarts: a store that refuses writes does not cost the lease while
the lease row is still ours, and a control plane restarted under its own instance id takes its lease back at
once."""

from __future__ import annotations

import asyncio
import os

from llmgw.control.leader import INSTANCE_FILE, Leadership, default_holder, instance_id, release_instance_id
from llmgw.store import WritesRefused, open_store

TTL = 0.3


class _RefusingStore:
    """Delegates to a store; while ``refusing`` every lease write raises WritesRefused (reads still work)."""

    def __init__(self, real) -> None:
        self.real = real
        self.refusing = False

    async def renew_lease(self, *a, **kw):
        if self.refusing:
            raise WritesRefused("sqlite: the store's disk is full")
        return await self.real.renew_lease(*a, **kw)

    async def try_acquire_lease(self, *a, **kw):
        if self.refusing:
            raise WritesRefused("sqlite: the store's disk is full")
        return await self.real.try_acquire_lease(*a, **kw)

    def __getattr__(self, name):
        return getattr(self.real, name)


async def test_a_store_that_refuses_writes_does_not_cost_the_lease(tmp_path, caplog):
    s1, s2 = await open_store(str(tmp_path / "s.db")), await open_store(str(tmp_path / "s.db"))
    try:
        refusing = _RefusingStore(s1)
        one = Leadership(refusing, "cp-1", TTL)
        standby = Leadership(_RefusingStore(s2), "cp-2", TTL)
        assert await one.step()
        refusing.refusing = standby.store.refusing = True
        one.start()
        standby.start()
        await asyncio.sleep(TTL * 3)  # the lease row has run out, yet nobody could take it
        assert one.leading and not standby.leading
        assert "refuses writes" in one.describe()["error"]
        said = [r.levelname for r in caplog.records if r.name.endswith("leader") and "refuses writes" in r.message]
        assert sorted(said) == ["ERROR", "WARNING"]  # once each (the leader, the standby), not at every try
        refusing.refusing = standby.store.refusing = False
        await asyncio.sleep(TTL)
        assert one.leading and not standby.leading and one.epoch == 1  # renewed in the same epoch
        lease = await s1.get_lease("control-plane")
        assert (lease.holder, lease.epoch) == ("cp-1", 1)
        await standby.stop()
        await one.stop()
    finally:
        await s1.close()
        await s2.close()


async def test_a_restarted_control_plane_takes_its_own_lease_back_at_once(tmp_path):
    folder = str(tmp_path)
    first = instance_id(folder)
    assert first and len(first) == 16
    assert os.stat(tmp_path / INSTANCE_FILE).st_mode & 0o777 == 0o600
    assert instance_id(folder) is None  # held: a second control plane on the folder leads under its pid
    s = await open_store(str(tmp_path / "s.db"))
    try:
        holder = default_holder("10.0.0.1:7443", first)
        assert f"id {first}" in holder
        before = Leadership(s, holder, 30.0)
        assert await before.step()
        await before.stop(release=False)  # killed: the lease stays, unexpired, for 30 s
        release_instance_id(folder)
        again = instance_id(folder)  # the process started again
        assert again == first
        after = Leadership(s, default_holder("10.0.0.1:7443", again), 30.0)
        assert await after.step() is True  # at once, not after 30 s
        other = Leadership(s, default_holder("10.0.0.1:7443", None), 30.0)
        assert await other.step() is False
        await after.stop()
    finally:
        release_instance_id(folder)
        await s.close()
