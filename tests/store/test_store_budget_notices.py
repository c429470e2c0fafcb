"""A budget event is claimed once per scope, period and threshold, on both backends, and survives a reopen."""

from __future__ import annotations

import datetime as dt

import pytest

from llmgw.store import Invalid, Store, open_store

OCTOBER = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)


async def test_a_budget_notice_is_claimed_once(store: Store) -> None:
    assert await store.claim_budget_notice("team", "team-1", "month", OCTOBER, "0.8") is True
    assert await store.claim_budget_notice("team", "team-1", "month", OCTOBER, "0.8") is False
    # Another threshold, another period, another scope: each its own first time.
    assert await store.claim_budget_notice("team", "team-1", "month", OCTOBER, "refused") is True
    assert await store.claim_budget_notice("team", "team-1", "month", OCTOBER.replace(month=11), "0.8") is True
    assert await store.claim_budget_notice("team", "team-1", "day", OCTOBER, "0.8") is True
    assert await store.claim_budget_notice("project", "team-1", "month", OCTOBER, "0.8") is True


async def test_a_claim_outlives_the_process(store_dsn: str) -> None:
    first = await open_store(store_dsn)
    try:
        assert await first.claim_budget_notice("org", "org-1", "day", OCTOBER, "refused") is True
    finally:
        await first.close()
    again = await open_store(store_dsn)
    try:
        assert await again.claim_budget_notice("org", "org-1", "day", OCTOBER, "refused") is False
    finally:
        await again.close()


async def test_a_claim_with_a_wrong_period_or_scope_is_refused(store: Store) -> None:
    with pytest.raises(Invalid, match="budget period"):
        await store.claim_budget_notice("team", "team-1", "week", OCTOBER, "0.8")
    with pytest.raises(Invalid, match="scope kind"):
        await store.claim_budget_notice("galaxy", "team-1", "month", OCTOBER, "0.8")
