"""Usage rows, their hourly and daily sums, spend and retention."""

from __future__ import annotations

import datetime as dt

import attrs
import pytest

from llmgw.store import Conflict, Invalid, Store, UsageRow

from .conftest import UTC, Tree

DAY1 = dt.datetime(2025, 3, 9, tzinfo=UTC)


def row(tree: Tree, request_id: str, at: dt.datetime, **kw) -> UsageRow:
    fields = {
        "key_id": "key-a",
        "project_id": tree.project.id,
        "team_id": tree.team.id,
        "org_id": tree.org.id,
        "user_id": tree.user.id,
        "model_requested": "qwen3-8b",
        "model_served": "qwen3-8b",
        "replica": "node1/qwen3-8b/0",
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "cached_tokens": 50,
        "cost_micros": 1_000,
        "latency_ms": 300,
        "ttft_ms": 40,
    }
    fields.update(kw)
    return UsageRow(request_id=request_id, at=at, **fields)


async def test_insert_round_trip_and_retry(store: Store, tree: Tree) -> None:
    full = row(
        tree, "req-1", DAY1 + dt.timedelta(hours=1, minutes=5),
        client_user="end-user-7", metadata={"trace": "abc", "n": [1, 2]}, tags=["batch", "eval"],
    )
    bare = UsageRow(request_id="req-2", at=DAY1, status=503, outcome="no_replica", model_requested="x")
    assert await store.insert_usage_rows([full, bare]) == 2
    assert await store.get_usage("req-1") == full
    got = await store.get_usage("req-2")
    assert got == bare and got.key_id is None and got.tags == () and got.metadata is None
    assert await store.get_usage("req-3") is None

    # A batch sent again (the first commit's answer was lost) adds nothing twice.
    assert await store.insert_usage_rows([full, row(tree, "req-3", DAY1)]) == 1
    sums = await store.usage_sums(None, "day", DAY1, DAY1 + dt.timedelta(days=1))
    assert [(s.requests, s.cost_micros, s.errors) for s in sums] == [(3, 2_000, 1)]
    assert await store.insert_usage_rows([]) == 0


async def test_insert_validates_every_row_first(store: Store, tree: Tree) -> None:
    good = row(tree, "ok", DAY1)
    cases = [
        (attrs.evolve(good, request_id=""), "request_id: must not be empty"),
        (attrs.evolve(good, at=DAY1.replace(tzinfo=None)), "no timezone"),
        (attrs.evolve(good, prompt_tokens=-1), "prompt_tokens"),
        (attrs.evolve(good, cost_micros=1.5), "cost_micros: expected a whole number"),
        (attrs.evolve(good, status=700), "status"),
        (attrs.evolve(good, tags="a"), "tags"),
        (attrs.evolve(good, metadata={"x": object()}), "metadata: not a JSON value"),
    ]
    for bad, message in cases:
        with pytest.raises(Invalid, match=message):
            await store.insert_usage_rows([good, bad])
    with pytest.raises(Invalid, match="appears twice"):
        await store.insert_usage_rows([good, good])
    with pytest.raises(Invalid, match="expected a UsageRow"):
        await store.insert_usage_rows([{"request_id": "x"}])  # type: ignore[list-item]
    assert await store.list_usage() == []


async def test_rollups_and_sums(store: Store, tree: Tree) -> None:
    rows = [
        row(tree, "a", DAY1 + dt.timedelta(hours=9, minutes=1)),
        row(tree, "b", DAY1 + dt.timedelta(hours=9, minutes=59), model_served="llama", status=500, cost_micros=7),
        row(tree, "c", DAY1 + dt.timedelta(hours=10, minutes=30), key_id="key-b"),
        row(tree, "d", DAY1 + dt.timedelta(days=1, hours=2), user_id=None, project_id=None, key_id=None),
    ]
    await store.insert_usage_rows(rows[:2])
    await store.insert_usage_rows(rows[2:])  # a second batch adds to the same sums

    hourly = await store.usage_sums("model", "hour", DAY1, DAY1 + dt.timedelta(days=2))
    assert [(s.bucket.hour, s.group, s.requests, s.errors, s.cost_micros) for s in hourly] == [
        (9, "llama", 1, 1, 7),
        (9, "qwen3-8b", 1, 0, 1_000),
        (10, "qwen3-8b", 1, 0, 1_000),
        (2, "qwen3-8b", 1, 0, 1_000),
    ]
    first = hourly[1]
    assert (first.prompt_tokens, first.completion_tokens, first.cached_tokens, first.tokens) == (100, 20, 50, 120)
    assert first.latency_ms_sum == 300 and first.bucket == DAY1 + dt.timedelta(hours=9)

    daily = await store.usage_sums("key", "day", DAY1, DAY1 + dt.timedelta(days=2))
    assert [(s.bucket, s.group, s.requests, s.cost_micros) for s in daily] == [
        (DAY1, "key-a", 2, 1_007),
        (DAY1, "key-b", 1, 1_000),
        (DAY1 + dt.timedelta(days=1), None, 1, 1_000),
    ]
    per_project = await store.usage_sums(
        "project", "day", DAY1, DAY1 + dt.timedelta(days=2), scope_kind="org", scope_id=tree.org.id
    )
    assert [(s.group, s.requests) for s in per_project] == [(tree.project.id, 3), (None, 1)]
    only_key = await store.usage_sums(None, "day", DAY1, DAY1 + dt.timedelta(days=1), scope_kind="key", scope_id="key-b")
    assert [(s.group, s.requests) for s in only_key] == [(None, 1)]
    # Buckets start in [since, until): the 9:00 bucket is before 9:30.
    late = await store.usage_sums(None, "hour", DAY1 + dt.timedelta(hours=9, minutes=30), DAY1 + dt.timedelta(days=1))
    assert [s.bucket.hour for s in late] == [10]

    with pytest.raises(Invalid, match="group_by"):
        await store.usage_sums("galaxy", "day", DAY1, DAY1 + dt.timedelta(days=1))
    with pytest.raises(Invalid, match="period"):
        await store.usage_sums("org", "week", DAY1, DAY1 + dt.timedelta(days=1))
    with pytest.raises(Invalid, match="must be after"):
        await store.usage_sums("org", "day", DAY1, DAY1)
    with pytest.raises(Invalid, match="both scope_kind and scope_id"):
        await store.usage_sums("org", "day", DAY1, DAY1 + dt.timedelta(days=1), scope_kind="org")


async def test_spend_since_is_exact(store: Store, tree: Tree) -> None:
    times = [
        DAY1 - dt.timedelta(minutes=1),  # the day before
        DAY1 + dt.timedelta(hours=5, minutes=10),
        DAY1 + dt.timedelta(hours=5, minutes=40),
        DAY1 + dt.timedelta(hours=6, minutes=15),
        DAY1 + dt.timedelta(days=1, hours=3),
    ]
    await store.insert_usage_rows([row(tree, f"r{i}", t, cost_micros=10 ** i) for i, t in enumerate(times)])

    async def spend(since: dt.datetime, kind: str = "org", ident: str = tree.org.id) -> int:
        return await store.spend_since(kind, ident, since)

    assert await spend(DAY1 - dt.timedelta(days=1)) == 11111
    assert await spend(DAY1) == 11110  # whole days only
    assert await spend(DAY1 + dt.timedelta(hours=5)) == 11110  # whole hours
    assert await spend(DAY1 + dt.timedelta(hours=5, minutes=30)) == 11100  # part of an hour from rows
    assert await spend(DAY1 + dt.timedelta(hours=5, minutes=41)) == 11000
    assert await spend(DAY1 + dt.timedelta(days=1)) == 10000
    assert await spend(DAY1 + dt.timedelta(days=2)) == 0
    for kind, ident in [("team", tree.team.id), ("project", tree.project.id), ("user", tree.user.id), ("key", "key-a")]:
        assert await spend(DAY1, kind, ident) == 11110
    assert await spend(DAY1, "key", "key-other") == 0
    with pytest.raises(Invalid):
        await spend(DAY1, "model", "qwen3-8b")


async def test_list_usage_filters(store: Store, tree: Tree) -> None:
    rows = [
        row(tree, "a", DAY1 + dt.timedelta(minutes=1)),
        row(tree, "b", DAY1 + dt.timedelta(minutes=2), key_id="key-b", model_served="llama"),
        row(tree, "c", DAY1 + dt.timedelta(minutes=3), model_requested="auto", model_served="llama"),
        row(tree, "d", DAY1 + dt.timedelta(minutes=4), org_id="org-other", team_id=None),
    ]
    await store.insert_usage_rows(rows)

    def ids(rows: list[UsageRow]) -> list[str]:
        return [r.request_id for r in rows]
    assert ids(await store.list_usage()) == ["d", "c", "b", "a"]
    assert ids(await store.list_usage(limit=2)) == ["d", "c"]
    assert ids(await store.list_usage(key_id="key-b")) == ["b"]
    assert ids(await store.list_usage(model="llama")) == ["c", "b"]
    assert ids(await store.list_usage(model="auto")) == ["c"]
    assert ids(await store.list_usage(org_id=tree.org.id, team_id=tree.team.id)) == ["c", "b", "a"]
    assert ids(await store.list_usage(since=DAY1 + dt.timedelta(minutes=2), until=DAY1 + dt.timedelta(minutes=4))) == ["c", "b"]
    with pytest.raises(Invalid, match="limit"):
        await store.list_usage(limit=0)


async def test_retention_keeps_sums(store: Store, tree: Tree) -> None:
    old = [row(tree, f"old{i}", DAY1 - dt.timedelta(days=100, minutes=i)) for i in range(5)]
    new = [row(tree, f"new{i}", DAY1 + dt.timedelta(minutes=i)) for i in range(3)]
    await store.insert_usage_rows(old + new)

    assert await store.delete_usage_before(DAY1 - dt.timedelta(days=90)) == 5
    assert await store.delete_usage_before(DAY1 - dt.timedelta(days=90)) == 0
    assert {r.request_id for r in await store.list_usage()} == {f"new{i}" for i in range(3)}
    # Spend still counts what the rows no longer hold.
    assert await store.spend_since("org", tree.org.id, DAY1 - dt.timedelta(days=200)) == 8_000

    assert await store.delete_hourly_sums_before(DAY1) > 0
    hourly = await store.usage_sums(None, "hour", DAY1 - dt.timedelta(days=200), DAY1 + dt.timedelta(days=1))
    assert sum(s.requests for s in hourly) == 3
    daily = await store.usage_sums(None, "day", DAY1 - dt.timedelta(days=200), DAY1 + dt.timedelta(days=1))
    assert sum(s.requests for s in daily) == 8


async def test_retention_deletes_in_batches(store: Store, tree: Tree, monkeypatch) -> None:
    from llmgw.store import sql_ops

    monkeypatch.setattr(sql_ops, "_DELETE_BATCH", 3)
    await store.insert_usage_rows([row(tree, f"r{i}", DAY1 + dt.timedelta(seconds=i)) for i in range(10)])
    assert await store.delete_usage_before(DAY1 + dt.timedelta(seconds=7)) == 7
    assert len(await store.list_usage()) == 3


async def test_concurrent_batches_sum_correctly(store: Store, tree: Tree) -> None:
    import asyncio

    batches = [[row(tree, f"b{b}-{i}", DAY1 + dt.timedelta(minutes=i)) for i in range(20)] for b in range(5)]
    counts = await asyncio.gather(*(store.insert_usage_rows(b) for b in batches))
    assert counts == [20] * 5
    assert await store.spend_since("project", tree.project.id, DAY1) == 100 * 1_000
    with pytest.raises((Conflict, Invalid)):
        await store.insert_usage_rows([batches[0][0], batches[0][0]])


async def test_a_batch_larger_than_one_statement_keeps_every_row_and_sum(store: Store, tree: Tree) -> None:
    # 1,200 rows of 25 columns: SQLite writes them as several many-row statements, PostgreSQL row by row.
    rows = [row(tree, f"big-{i:04d}", DAY1 + dt.timedelta(minutes=i % 120), cost_micros=i,
                tags=["t"] if i % 2 else [], metadata={"i": i} if i % 3 == 0 else None) for i in range(1200)]
    assert await store.insert_usage_rows(rows) == 1200
    assert await store.get_usage("big-0999") == rows[999]
    assert await store.get_usage("big-0000") == rows[0]
    assert await store.spend_since("project", tree.project.id, DAY1) == sum(range(1200))
    hours = await store.usage_sums(None, "hour", DAY1, DAY1 + dt.timedelta(days=1))
    assert [s.requests for s in hours] == [600, 600]
    # Sent again with one new row: only the new one is added, and no sum counts a row twice.
    assert await store.insert_usage_rows(rows[:700] + [row(tree, "big-new", DAY1)]) == 1
    days = await store.usage_sums(None, "day", DAY1, DAY1 + dt.timedelta(days=1))
    assert [(s.requests, s.cost_micros) for s in days] == [(1201, sum(range(1200)) + 1_000)]
