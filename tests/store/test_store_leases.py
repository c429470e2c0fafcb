"""Leases: leadership with an epoch that fences out a former holder."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from llmgw.store import Invalid, Store, open_store

from .conftest import FakeClock


async def test_acquire_renew_release(store: Store, clock: FakeClock) -> None:
    assert await store.get_lease("leader") is None
    lease = await store.try_acquire_lease("leader", "cp1", 15)
    assert (lease.holder, lease.epoch, lease.acquired_at) == ("cp1", 1, clock.now)
    assert lease.expires_at == clock.now + dt.timedelta(seconds=15) and lease.held_at(clock.now)
    assert await store.try_acquire_lease("leader", "cp2", 15) is None

    clock.advance(10)
    renewed = await store.renew_lease("leader", "cp1", dt.timedelta(seconds=15), epoch=1)
    assert renewed.epoch == 1 and renewed.expires_at == clock.now + dt.timedelta(seconds=15)
    assert renewed.acquired_at == lease.acquired_at
    # Acquiring what one holds extends it, in the same epoch.
    again = await store.try_acquire_lease("leader", "cp1", 15)
    assert again.epoch == 1
    assert await store.renew_lease("leader", "cp2", 15) is None
    assert await store.renew_lease("leader", "cp1", 15, epoch=7) is None

    assert await store.release_lease("leader", "cp2") is False
    assert await store.release_lease("leader", "cp1") is True
    assert await store.release_lease("leader", "cp1") is False
    assert await store.renew_lease("leader", "cp1", 15) is None
    taken = await store.try_acquire_lease("leader", "cp2", 15)
    assert (taken.holder, taken.epoch) == ("cp2", 2)
    assert (await store.get_lease("leader")) == taken

    # Leases are independent of each other.
    other = await store.try_acquire_lease("usage-pruner", "cp1", 60)
    assert (other.holder, other.epoch) == ("cp1", 1)


async def test_takeover_after_expiry(store: Store, clock: FakeClock) -> None:
    first = await store.try_acquire_lease("leader", "cp1", 15)
    clock.advance(14.9)
    assert await store.try_acquire_lease("leader", "cp2", 15) is None
    clock.advance(0.1)  # expires_at is not held any more
    assert not first.held_at(clock.now)
    assert await store.renew_lease("leader", "cp1", 15) is None  # too late
    second = await store.try_acquire_lease("leader", "cp2", 15)
    assert (second.holder, second.epoch, second.acquired_at) == ("cp2", 2, clock.now)
    assert await store.renew_lease("leader", "cp1", 15, epoch=first.epoch) is None

    # A holder that let its own lease lapse starts a new epoch too: whatever
    # it believed it held in between is fenced off.
    clock.advance(30)
    third = await store.try_acquire_lease("leader", "cp2", 15)
    assert (third.holder, third.epoch) == ("cp2", 3)


async def test_lease_validation(store: Store) -> None:
    for ttl in (0, -1, float("inf"), "15s"):
        with pytest.raises(Invalid, match="ttl"):
            await store.try_acquire_lease("leader", "cp1", ttl)  # type: ignore[arg-type]
    with pytest.raises(Invalid, match="holder"):
        await store.try_acquire_lease("leader", "", 15)
    with pytest.raises(Invalid, match="epoch"):
        await store.renew_lease("leader", "cp1", 15, epoch=0)


async def test_no_double_holder_under_concurrency(store: Store, store_dsn: str, clock: FakeClock) -> None:
    # Separate stores are separate connections (for SQLite, separate writers
    # on one file): the contest is decided by the database, not a Python lock.
    stores = [store] + [await open_store(store_dsn, clock=clock) for _ in range(3)]
    try:
        for round_ in range(1, 6):
            contenders = [(s, f"cp{i}-{j}") for i, s in enumerate(stores) for j in range(3)]
            results = await asyncio.gather(
                *(s.try_acquire_lease("leader", holder, 10) for s, holder in contenders)
            )
            winners = [r for r in results if r is not None]
            assert len(winners) == 1, winners
            assert winners[0].epoch == round_
            assert (await stores[-1].get_lease("leader")) == winners[0]
            clock.advance(10)  # lapses; the next round is a takeover
    finally:
        for s in stores[1:]:
            await s.close()
