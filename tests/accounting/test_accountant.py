"""The accountant against a real store: budgets held and settled, prices of
the model that answered, spend per level. Each runs on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import attrs
import pytest

from llmgw.accounting.accountant import Accountant
from llmgw.accounting.api import LimitExceeded
from llmgw.auth.keys import KeyResolver
from llmgw.auth.principal import Principal
from llmgw.auth.tenancy import Tenancy
from llmgw.config import parse_server_config
from llmgw.store import Store, UsageRow

from .conftest import FakeClock, Ticker

ENDPOINTS = [{"url": "http://engine:8000/v1"}]
CONFIG = parse_server_config({
    "prices": {"default": {"input": 1, "output": 1}},
    "models": [
        {"name": "paid", "price": {"input": 1, "output": 1}, "endpoints": ENDPOINTS},
        {"name": "dear", "price": {"input": 10, "output": 10}, "endpoints": ENDPOINTS},
        {"name": "free", "price": {"input": 0, "output": 0}, "endpoints": ENDPOINTS},
    ],
})


class CountingStore:
    """The store, counting how often budgets read it."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.spend_reads = 0

    async def spend_since(self, *args, **kwargs):
        self.spend_reads += 1
        return await self._store.spend_since(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._store, name)


@attrs.define
class World:
    store: Store
    tenancy: Tenancy
    principal: Principal
    accountant: Accountant
    counting: CountingStore
    secret: str


async def world(store: Store, clock: FakeClock, ticker: Ticker, *, budget: int, period: str = "day") -> World:
    t = Tenancy(store, actor="tester", clock=clock)
    await t.create("acme")
    await t.create("acme/app", project=True)
    issued = await t.create_key(project="acme/app")
    await t.set_limits(await t.scope("acme/app"), budget_micros=budget, budget_period=period)
    principal = await KeyResolver(store, clock=clock).resolve(issued.secret)
    counting = CountingStore(store)
    accountant = Accountant(CONFIG, counting, clock=clock, monotonic=ticker)  # type: ignore[arg-type]
    return World(store, t, principal, accountant, counting, issued.secret)


def row_for(p: Principal, clock: FakeClock, cost: int, model: str = "paid") -> UsageRow:
    return UsageRow(request_id=uuid.uuid4().hex, at=clock.now, key_id=p.key_id, project_id=p.project_id,
                    org_id=p.org_id, model_requested=model, model_served=model, cost_micros=cost)


async def test_twenty_concurrent_requests_against_a_budget_for_ten(
    store: Store, clock: FakeClock, ticker: Ticker
) -> None:
    w = await world(store, clock, ticker, budget=10_000)
    # Worst case of each: 100 prompt + 900 max tokens at 1 micro-dollar a token = 1000.
    results = await asyncio.gather(
        *(w.accountant.admit(w.principal, "paid", prompt_tokens=100, max_tokens=900) for _ in range(20)),
        return_exceptions=True,
    )
    admitted = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, LimitExceeded)]
    assert len(admitted) == 10 and len(refused) == 10
    assert {r.code for r in refused} == {"budget_exceeded"}
    assert {r.scope for r in refused} == {f"project:{w.principal.project_id}"}
    assert all(r.retry_after == 1.0 for r in refused)  # held, not spent: worth retrying soon
    assert w.counting.spend_reads == 1  # one store read for twenty admissions

    async def serve(reservation):
        await asyncio.sleep(0)
        cost = await w.accountant.settle(reservation, model_served="paid", prompt_tokens=100, completion_tokens=850)
        w.accountant.record(row_for(w.principal, clock, cost))
        return cost

    costs = await asyncio.gather(*(serve(r) for r in admitted))
    assert costs == [950] * 10
    await w.accountant.stop()
    assert await store.spend_since("project", w.principal.project_id, clock.now - dt.timedelta(hours=1)) == 9500
    with pytest.raises(LimitExceeded) as err:
        await w.accountant.admit(w.principal, "paid", prompt_tokens=100, max_tokens=900)
    assert "could cost up to" in err.value.message


async def test_a_spent_budget_refuses_until_the_next_period(store: Store, clock: FakeClock, ticker: Ticker) -> None:
    w = await world(store, clock, ticker, budget=5_000, period="day")
    await store.insert_usage_rows([row_for(w.principal, clock, 5_000)])  # spent before this process started
    with pytest.raises(LimitExceeded) as err:
        await w.accountant.admit(w.principal, "paid", prompt_tokens=10, max_tokens=10)
    assert err.value.code == "budget_exceeded" and err.value.status == 429
    assert err.value.retry_after == (dt.datetime(2025, 3, 11, tzinfo=dt.UTC) - clock.now).total_seconds()
    assert "is spent" in err.value.message and "2025-03-11 00:00 UTC" in err.value.message
    # A free model costs nothing, so a spent budget does not stop it.
    r = await w.accountant.admit(w.principal, "free", prompt_tokens=10, max_tokens=10)
    assert r.reserved_micros == 0

    clock.now = dt.datetime(2025, 3, 11, 0, 0, 1, tzinfo=dt.UTC)  # a new day, a new budget
    await w.accountant.admit(w.principal, "paid", prompt_tokens=10, max_tokens=10)


async def test_a_monthly_budget_renews_on_the_first(store: Store, clock: FakeClock, ticker: Ticker) -> None:
    w = await world(store, clock, ticker, budget=100, period="month")
    await store.insert_usage_rows([row_for(w.principal, clock, 100)])
    with pytest.raises(LimitExceeded) as err:
        await w.accountant.admit(w.principal, "paid", prompt_tokens=1, max_tokens=1)
    assert err.value.retry_after == (dt.datetime(2025, 4, 1, tzinfo=dt.UTC) - clock.now).total_seconds()


async def test_settled_at_the_price_of_the_model_that_answered(
    store: Store, clock: FakeClock, ticker: Ticker
) -> None:
    w = await world(store, clock, ticker, budget=1_000_000)
    r = await w.accountant.admit(w.principal, "dear", prompt_tokens=1000, max_tokens=1000)
    assert r.reserved_micros == 20_000
    # Asked for "dear", answered by "free" (a fallback): nothing is owed.
    assert await w.accountant.settle(r, model_served="free", prompt_tokens=1000, completion_tokens=500) == 0
    r = await w.accountant.admit(w.principal, "dear", prompt_tokens=1000, max_tokens=1000)
    assert await w.accountant.settle(r, model_served="paid", prompt_tokens=1000, completion_tokens=500) == 1500
    r = await w.accountant.admit(w.principal, "dear", prompt_tokens=1000, max_tokens=1000)
    assert await w.accountant.settle(r, model_served="dear", prompt_tokens=1000, completion_tokens=500) == 15_000
    # Settling twice charges once.
    assert await w.accountant.settle(r, model_served="dear", prompt_tokens=1000, completion_tokens=500) == 15_000
    [project] = [s for s in await w.accountant.spend_levels(w.principal) if s.scope_kind == "project"]
    assert (project.spent_micros, project.held_micros, project.budget_micros) == (16_500, 0, 1_000_000)


async def test_release_gives_the_hold_back(store: Store, clock: FakeClock, ticker: Ticker) -> None:
    w = await world(store, clock, ticker, budget=1000)
    r = await w.accountant.admit(w.principal, "paid", prompt_tokens=500, max_tokens=500)
    with pytest.raises(LimitExceeded):
        await w.accountant.admit(w.principal, "paid", prompt_tokens=1, max_tokens=1)
    w.accountant.release(r)
    w.accountant.release(r)  # once is enough; twice changes nothing
    r = await w.accountant.admit(w.principal, "paid", prompt_tokens=500, max_tokens=500)
    assert r.reserved_micros == 1000


async def test_spend_per_level_and_other_processes_spending(
    store: Store, clock: FakeClock, ticker: Ticker
) -> None:
    w = await world(store, clock, ticker, budget=10_000, period="day")
    p = w.principal
    r = await w.accountant.admit(p, "paid", prompt_tokens=100, max_tokens=100)
    levels = await w.accountant.spend_levels(p)
    assert [(s.scope_kind, s.period, s.budget_micros, s.held_micros) for s in levels] == [
        ("org", "month", None, 0), ("project", "day", 10_000, 200), ("key", "month", None, 0)]
    await w.accountant.settle(r, model_served="paid", prompt_tokens=100, completion_tokens=50)
    assert [s.spent_micros for s in await w.accountant.spend_levels(p)] == [150, 150, 150]

    # Another gateway process spends 9000 today; seen here after the refresh interval.
    await store.insert_usage_rows([row_for(p, clock, 9000)])
    await w.accountant.admit(p, "paid", prompt_tokens=100, max_tokens=100)
    ticker.advance(31)
    await w.accountant.admit(p, "paid", prompt_tokens=100, max_tokens=100)  # starts the refresh
    for _ in range(50):
        await asyncio.sleep(0.01)
        if next(s for s in await w.accountant.spend_levels(p) if s.scope_kind == "project").spent_micros >= 9000:
            break
    with pytest.raises(LimitExceeded) as err:
        await w.accountant.admit(p, "paid", prompt_tokens=500, max_tokens=500)
    assert err.value.code == "budget_exceeded"
    [project] = [s for s in await w.accountant.spend_levels(p) if s.scope_kind == "project"]
    assert project.spent_micros == 9000  # the larger of the store's count and this process's
    assert project.remaining_micros == 1000


async def test_rate_limits_and_budgets_together(store: Store, clock: FakeClock, ticker: Ticker) -> None:
    w = await world(store, clock, ticker, budget=1_000_000)
    await w.tenancy.set_limits(await w.tenancy.scope("acme"), rpm=2)
    principal = await KeyResolver(store, clock=clock).resolve(w.secret)
    await w.accountant.admit(principal, "paid", prompt_tokens=1, max_tokens=1)
    await w.accountant.admit(principal, "paid", prompt_tokens=1, max_tokens=1)
    with pytest.raises(LimitExceeded) as err:
        await w.accountant.admit(principal, "paid", prompt_tokens=1, max_tokens=1)
    assert err.value.code == "rate_limit_exceeded" and err.value.scope == f"org:{principal.org_id}"
    # The refused request holds nothing.
    [project] = [s for s in await w.accountant.spend_levels(principal) if s.scope_kind == "project"]
    assert project.held_micros == 4


async def test_spend_for_me_is_json_and_the_server_factory_builds_one(
    store: Store, clock: FakeClock, ticker: Ticker
) -> None:
    import json

    from llmgw.accounting.accountant import make_accountant

    w = await world(store, clock, ticker, budget=2_000_000, period="month")
    r = await w.accountant.admit(w.principal, "paid", prompt_tokens=10, max_tokens=10)
    await w.accountant.settle(r, model_served="paid", prompt_tokens=10, completion_tokens=5)
    levels = await w.accountant.spend(w.principal)
    json.dumps(levels)
    assert levels[1] == {
        "scope": "project", "scope_id": w.principal.project_id, "period": "month",
        "period_start": "2025-03-01T00:00:00+00:00", "resets_at": "2025-04-01T00:00:00+00:00",
        "spent_micros": 15, "held_micros": 0, "budget_micros": 2_000_000, "remaining_micros": 1_999_985,
    }
    made = make_accountant(CONFIG, store)
    await made.start()
    await made.stop()
