"""The usage writer: batches, bounds, retries, shutdown and retention."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from llmgw.accounting.usage import UsageWriter
from llmgw.store import Store, StoreUnavailable, UsageRow, open_store

from .conftest import FakeClock


def rows(n: int, at: dt.datetime, start: int = 0) -> list[UsageRow]:
    return [UsageRow(request_id=f"req-{i:06d}", at=at, key_id="key-1", model_requested="m", model_served="m",
                     prompt_tokens=3, completion_tokens=4, cost_micros=7) for i in range(start, start + n)]


@pytest.fixture
async def sqlite_store(tmp_path, clock: FakeClock):
    s = await open_store(f"sqlite:///{tmp_path}/usage.db", clock=clock)
    try:
        yield s
    finally:
        await s.close()


class FailingStore:
    """Delegates to a store; insert_usage_rows fails while ``down``, and with
    ``fail_after_write`` fails once *after* writing (a reply lost on the way back)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.down = False
        self.fail_after_write = False
        self.batches: list[int] = []

    async def insert_usage_rows(self, batch):
        if self.down:
            raise StoreUnavailable("the database is gone")
        self.batches.append(len(batch))
        n = await self.store.insert_usage_rows(batch)
        if self.fail_after_write:
            self.fail_after_write = False
            raise StoreUnavailable("connection lost after commit")
        return n

    def __getattr__(self, name):
        return getattr(self.store, name)


async def count(store: Store, clock: FakeClock) -> int:
    return len(await store.list_usage(since=clock.now - dt.timedelta(days=1), limit=10_000))


async def test_a_burst_is_written_whole_and_stop_flushes_the_rest(store: Store, clock: FakeClock) -> None:
    writer = UsageWriter(store, flush_interval=0.05, batch_size=200, buffer_size=8192)
    await writer.start()
    for row in rows(3000, clock.now):
        writer.record(row)  # a burst: nothing awaits between them
    await asyncio.sleep(0.01)
    writer.record(rows(1, clock.now, start=3000)[0])
    await writer.stop()
    assert (writer.written, writer.dropped, writer.pending) == (3001, 0, 0)
    assert await count(store, clock) == 3001
    assert await store.spend_since("key", "key-1", clock.now - dt.timedelta(hours=1)) == 3001 * 7


async def test_rows_wait_at_most_the_flush_interval(sqlite_store: Store, clock: FakeClock) -> None:
    writer = UsageWriter(sqlite_store, flush_interval=0.02, batch_size=500)
    await writer.start()
    writer.record(rows(1, clock.now)[0])
    for _ in range(100):
        await asyncio.sleep(0.01)
        if writer.written:
            break
    assert writer.written == 1 and await count(sqlite_store, clock) == 1
    await writer.stop()


async def test_a_full_buffer_drops_the_oldest_and_counts_them(sqlite_store: Store, clock: FakeClock) -> None:
    failing = FailingStore(sqlite_store)
    failing.down = True
    writer = UsageWriter(failing, flush_interval=0.01, batch_size=10, buffer_size=100)  # type: ignore[arg-type]
    await writer.start()
    for row in rows(130, clock.now):
        writer.record(row)
        await asyncio.sleep(0)  # let the writer try (and fail) along the way
    await asyncio.sleep(0.05)
    assert writer.failures >= 1
    assert writer.dropped == 30 and writer.pending <= 100
    failing.down = False
    await writer.stop()
    stored = {r.request_id for r in await sqlite_store.list_usage(limit=1000)}
    assert stored == {f"req-{i:06d}" for i in range(30, 130)}  # the newest kept, the oldest gone
    assert writer.dropped == 30


async def test_a_batch_retried_after_a_lost_reply_is_not_counted_twice(
    sqlite_store: Store, clock: FakeClock
) -> None:
    failing = FailingStore(sqlite_store)
    failing.fail_after_write = True
    writer = UsageWriter(failing, flush_interval=0.01, batch_size=50)  # type: ignore[arg-type]
    for row in rows(50, clock.now):
        writer.record(row)
    assert not await writer.flush()  # written, but the writer could not know
    assert writer.pending == 50
    assert await writer.flush()
    assert failing.batches == [50, 50]
    assert await count(sqlite_store, clock) == 50
    assert await sqlite_store.spend_since("key", "key-1", clock.now - dt.timedelta(hours=1)) == 50 * 7


async def test_a_malformed_row_is_cleaned_and_written(sqlite_store: Store, clock: FakeClock) -> None:
    writer = UsageWriter(sqlite_store, batch_size=10)
    good = rows(5, clock.now)
    bad = UsageRow(request_id="req-bad", at=clock.now, prompt_tokens=-1, client_user="a\x00b\ud800",
                   model_requested="m\n" * 500, tags=("ok", "t\x07"))
    for row in (*good[:2], bad, *good[2:], good[0]):  # and one request id twice: counted once
        writer.record(row)
    assert await writer.flush()
    assert (writer.written, writer.rejected) == (6, 1)
    assert await count(sqlite_store, clock) == 6
    stored = await sqlite_store.get_usage("req-bad")
    assert stored is not None and stored.prompt_tokens == 0
    assert stored.client_user == "a\\x00b\\ud800" and stored.tags == ("ok", "t\\x07")
    assert len(stored.model_requested) == 200 and stored.model_requested.endswith("]")


async def test_record_never_raises_even_after_stop(sqlite_store: Store, clock: FakeClock) -> None:
    writer = UsageWriter(sqlite_store)
    await writer.start()
    await writer.stop()
    writer.record(rows(1, clock.now)[0])
    writer.record(None)  # type: ignore[arg-type]
    assert writer.dropped == 2


async def test_the_janitor_deletes_rows_past_retention(store: Store, clock: FakeClock) -> None:
    writer = UsageWriter(store, retention=dt.timedelta(days=30), clock=clock)
    for row in rows(3, clock.now - dt.timedelta(days=31)) + rows(2, clock.now, start=3):
        writer.record(row)
    assert await writer.flush()
    assert await writer.run_janitor() == 3
    assert await count(store, clock) == 2
    # The sums stay: budgets and charts still see what the old rows cost.
    since = clock.now - dt.timedelta(days=40)
    assert await store.spend_since("key", "key-1", since) == 5 * 7
    assert await UsageWriter(store).run_janitor() == 0  # no retention: keep everything
