"""Leadership over both stores: one leader, a standby that takes over when the lease lapses."""

from __future__ import annotations

import asyncio
import time

from llmgw.control.leader import Leadership
from llmgw.store import open_store

TTL = 0.9


async def test_one_leader_and_a_takeover_after_the_lease_lapses(store_dsn):
    s1, s2 = await open_store(store_dsn), await open_store(store_dsn)
    changes: list[tuple[str, bool]] = []
    try:
        one = Leadership(s1, "cp-1", TTL, on_change=lambda leading: changes.append(("cp-1", leading)))
        two = Leadership(s2, "cp-2", TTL, on_change=lambda leading: changes.append(("cp-2", leading)))
        assert await one.step() is True
        assert await two.step() is False
        assert (one.leading, two.leading, one.epoch) == (True, False, 1)
        assert two.leader == "cp-1"
        assert one.describe() == {"leader": True, "self": "cp-1", "holder": "cp-1", "epoch": 1,
                                  "lease_ttl_s": TTL, "error": None}
        assert two.describe()["leader"] is False and two.describe()["holder"] == "cp-1"

        one.start()
        two.start()
        await asyncio.sleep(TTL * 2)  # several renewals: nothing changes
        assert one.leading and not two.leading

        # The leader dies without a word: its task stops and it never releases.
        await one.stop(release=False)
        killed = time.monotonic()
        assert await two.wait_leading(TTL * 3)
        took = time.monotonic() - killed
        assert took <= TTL + TTL / 3 + 0.5
        assert two.epoch == 2 and two.previous_holder == "cp-1"
        lease = await s1.get_lease("control-plane")
        assert (lease.holder, lease.epoch) == ("cp-2", 2)

        # A clean stop releases the lease: the other takes over at its next try.
        await two.stop(release=True)
        assert await one.step() is True and one.epoch == 3
        await one.stop()
        assert changes == [("cp-1", True), ("cp-1", False), ("cp-2", True), ("cp-2", False),
                           ("cp-1", True), ("cp-1", False)]
    finally:
        await s1.close()
        await s2.close()


async def test_a_leader_whose_lease_is_taken_steps_down(store_dsn):
    s1, s2 = await open_store(store_dsn), await open_store(store_dsn)
    try:
        one = Leadership(s1, "cp-1", TTL)
        assert await one.step()
        await asyncio.sleep(TTL + 0.1)  # it missed its renewals (a long pause)
        two = Leadership(s2, "cp-2", TTL)
        assert await two.step()
        assert await one.step() is False
        assert not one.leading and one.leader == "cp-2"
    finally:
        await s1.close()
        await s2.close()


class _DeadStore:
    """A store that stops answering after the first lease."""

    def __init__(self, real) -> None:
        self.real = real
        self.dead = False

    def __getattr__(self, name):
        attr = getattr(self.real, name)
        if not callable(attr):
            return attr

        async def call(*args, **kwargs):
            if self.dead:
                raise ConnectionError("the store is unreachable")
            return await attr(*args, **kwargs)

        return call


async def test_a_leader_cut_off_from_the_store_steps_down_before_its_lease_runs_out(tmp_path):
    real = await open_store(f"sqlite:///{tmp_path}/s.db")
    try:
        store = _DeadStore(real)
        one = Leadership(store, "cp-1", TTL)
        one.start()
        assert await one.wait_leading(2)
        store.dead = True
        started = time.monotonic()
        while one.leading and time.monotonic() - started < 3:
            await asyncio.sleep(0.05)
        assert not one.leading
        assert time.monotonic() - started < TTL
        assert "the store did not answer" in one.describe()["error"]
        await one.stop(release=True)  # does not hang on the dead store
    finally:
        await real.close()
