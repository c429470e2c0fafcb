"""The accountant: what the router asks before and after each request.

It ties the rate limits (:mod:`.limits`), budgets (:mod:`.budgets`), prices
(:mod:`.prices`) and the usage writer (:mod:`.usage`) together behind
``AccountantProtocol``:

    accountant = Accountant(config, store)
    await accountant.start()
    reservation = await accountant.admit(principal, model, prompt_tokens=n, max_tokens=m)
    ...                                   # LimitExceeded: answer 429
    cost = await accountant.settle(reservation, model_served=..., prompt_tokens=..., completion_tokens=...)
    accountant.record(UsageRow(..., cost_micros=cost))
    await accountant.stop()               # on shutdown: writes every row left

Admission reads budgets from the store at most once per scope and period
(then from memory), and checks and holds without an ``await`` in between,
so concurrent requests on the event loop cannot overshoot a limit.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

import attrs

from llmgw.accounting.api import Reservation
from llmgw.accounting.budgets import BudgetBook, Hold, LevelSpend
from llmgw.accounting.limits import RateLimiter, Rule
from llmgw.accounting.prices import PriceBook
from llmgw.accounting.usage import UsageWriter
from llmgw.auth.principal import Principal
from llmgw.store import Store, UsageRow

UTC = dt.UTC


@attrs.define
class Admission(Reservation):
    """A Reservation with what the accountant took for it (its own bookkeeping)."""

    holds: list[Hold] = attrs.field(factory=list, repr=False, eq=False)
    rules: list[Rule] = attrs.field(factory=list, repr=False, eq=False)


def chain_scopes(principal: Principal) -> list[tuple[str, str]]:
    """The principal's levels, widest first: (scope kind, id) for each it has."""
    levels = (("org", principal.org_id), ("team", principal.team_id), ("project", principal.project_id),
              ("user", principal.user_id), ("key", principal.key_id))
    return [(kind, scope_id) for kind, scope_id in levels if scope_id]


class Accountant:
    """Implements ``AccountantProtocol`` for one gateway process.

    Built from a ServerConfig (``auth.default_rpm/tpm``, ``accounting.*``,
    ``prices``, ``models[].price``) and a store. ``journal_dir`` is where the usage journal is kept (None: no journal). ``budget_refresh`` is how
    often (seconds) a budget's spend is read again from the store to take in
    other processes' requests. ``clock`` (aware datetimes) and
    ``monotonic`` are for tests.
    """

    def __init__(
        self,
        config,
        store: Store,
        *,
        budget_refresh: float = 30.0,
        journal_dir: str | None = None,
        clock: Callable[[], dt.datetime] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.prices = PriceBook.from_config(config)
        self.rates = RateLimiter(
            default_rpm=config.auth.default_rpm, default_tpm=config.auth.default_tpm, monotonic=monotonic
        )
        self.budgets = BudgetBook(
            store, refresh_interval=budget_refresh, clock=clock, monotonic=monotonic, currency=self.prices.currency
        )
        # Budget events: when a share of a budget is spent (budgets.notify_at), besides its refusals.
        self.budgets.notify_at = tuple(sorted(set(config.budgets.notify_at)))
        acc = config.accounting
        self.usage = UsageWriter(
            store,
            flush_interval=acc.flush_interval.total_seconds(),
            batch_size=acc.batch_size,
            buffer_size=acc.buffer_size,
            retention=acc.usage_retention,
            clock=clock,
            journal_dir=journal_dir,
        )
        # Budgets count the rows not yet in the store (buffered, or journaled while it fails) too.
        self.budgets.pending = self.usage.pending_spend
        self.budgets.pending_lock = self.usage.lock

    async def start(self) -> None:
        await self.usage.start()

    async def stop(self) -> None:
        """Write every usage row still buffered, then stop the background work."""
        await self.usage.stop()
        await self.budgets.close()

    # ---- AccountantProtocol --------------------------------------------------

    async def admit(self, principal: Principal, model: str, *, prompt_tokens: int, max_tokens: int) -> Reservation:
        prompt_tokens = max(0, int(prompt_tokens or 0))
        worst = self.prices.cost(model, prompt_tokens, max(0, int(max_tokens or 0)))
        # A free model is never refused for money: only priced requests need budget.
        budgeted = [lim for lim in principal.limits if lim.budget_micros is not None] if worst > 0 else []
        states = await self.budgets.states(
            (lim.scope_kind, lim.scope_id, lim.budget_period or "month") for lim in budgeted
        )
        # From here to the return: no await, so no other request runs in between.
        self.budgets.check(zip(states, (lim.budget_micros for lim in budgeted)), worst)
        rules = self.rates.rules(principal)
        self.rates.check(rules, prompt_tokens)
        self.rates.take(rules, prompt_tokens)
        holds = self.budgets.hold(states, worst)
        return Admission(
            principal=principal, model=model, reserved_micros=worst if holds else 0,
            prompt_tokens_estimate=prompt_tokens, holds=holds, rules=rules,
        )

    async def settle(self, reservation: Reservation, *, model_served: str, prompt_tokens: int,
                     completion_tokens: int, cached_tokens: int = 0) -> int:
        cost = self.cost(model_served or reservation.model, prompt_tokens, completion_tokens, cached_tokens)
        if reservation.settled:
            return cost
        reservation.settled = True
        if isinstance(reservation, Admission):
            self.budgets.release(reservation.holds)
            used = max(0, int(prompt_tokens)) + max(0, int(completion_tokens))
            self.rates.correct(reservation.rules, used - reservation.prompt_tokens_estimate)
        self.budgets.charge(chain_scopes(reservation.principal), cost)
        return cost

    def release(self, reservation: Reservation) -> None:
        if reservation.settled:
            return
        reservation.settled = True
        if isinstance(reservation, Admission):
            self.budgets.release(reservation.holds)
            self.rates.correct(reservation.rules, -reservation.prompt_tokens_estimate)

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> int:
        return self.prices.cost(model, prompt_tokens, completion_tokens, cached_tokens)

    def record(self, row: UsageRow) -> None:
        self.usage.record(row)

    def headroom(self, principal: Principal) -> list:
        """What is left now of each RPM and TPM limit on the principal's chain (the answers'
        x-ratelimit-* and anthropic-ratelimit-* headers); llmgw.accounting.limits.Headroom."""
        return self.rates.headroom(principal)

    # ---- for /me -----------------------------------------------------------

    async def spend(self, principal: Principal) -> list[dict]:
        """Each level's spend in its current period, widest first, as JSON
        values for ``/me``: the level's budget period where it has a budget,
        else the month (see :meth:`spend_levels` for the records)."""
        return [
            {
                "scope": s.scope_kind, "scope_id": s.scope_id, "period": s.period,
                "period_start": s.period_start.isoformat(), "resets_at": s.resets_at.isoformat(),
                "spent_micros": s.spent_micros, "held_micros": s.held_micros,
                "budget_micros": s.budget_micros, "remaining_micros": s.remaining_micros,
            }
            for s in await self.spend_levels(principal)
        ]

    async def spend_levels(self, principal: Principal) -> list[LevelSpend]:
        """Each level's spend in its current period, widest first, as records."""
        budgets = {(lim.scope_kind, lim.scope_id): lim for lim in principal.limits if lim.budget_micros is not None}
        wanted = [
            (kind, scope_id, budgets[(kind, scope_id)].budget_period if (kind, scope_id) in budgets else "month")
            for kind, scope_id in chain_scopes(principal)
        ]
        states = await self.budgets.states(wanted)
        return [
            self.budgets.report(st, budgets[(st.scope_kind, st.scope_id)].budget_micros
                                if (st.scope_kind, st.scope_id) in budgets else None)
            for st in states
        ]


def make_accountant(config, store: Store) -> Accountant:
    """The accountant ``llmgw server`` uses (it looks this factory up by name); its usage journal is in
    the server's state folder (beside a SQLite store)."""
    from llmgw.store.state_dir import state_dir_of

    return Accountant(config, store, journal_dir=state_dir_of(store))
