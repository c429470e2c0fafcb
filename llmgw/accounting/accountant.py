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
import os
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
    #: shared limits (limits.store): the holds taken in the Redis and the budget levels charged there
    shared_holds: list = attrs.field(factory=list, repr=False, eq=False)
    shared_levels: list[str] = attrs.field(factory=list, repr=False, eq=False)
    shared: bool = attrs.field(default=False, repr=False, eq=False)


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
        #: shared limits (limits.store: redis://): RPM, TPM and budget holds counted in a Redis; None: in memory
        self.shared = None
        limits = getattr(config, "limits", None)
        if limits is not None and limits.shared:
            from llmgw.accounting.limits_redis import SharedLimits

            self.shared = SharedLimits.from_config(limits)

    async def start(self) -> None:
        await self.usage.start()

    async def stop(self) -> None:
        """Write every usage row still buffered, then stop the background work."""
        await self.usage.stop()
        await self.budgets.close()
        if self.shared is not None:  # shared limits: the settlements still on their way, then the pool
            await self.shared.close()

    # ---- AccountantProtocol --------------------------------------------------

    async def admit(self, principal: Principal, model: str, *, prompt_tokens: int, max_tokens: int) -> Reservation:
        prompt_tokens = max(0, int(prompt_tokens or 0))
        worst = self.prices.cost(model, prompt_tokens, max(0, int(max_tokens or 0)))
        # A free model is never refused for money: only priced requests need budget.
        budgeted = [lim for lim in principal.limits if lim.budget_micros is not None] if worst > 0 else []
        states = await self.budgets.states(
            (lim.scope_kind, lim.scope_id, lim.budget_period or "month") for lim in budgeted
        )
        if self.shared is not None:  # shared limits: one script in the Redis checks and takes everything
            admission = await self._admit_shared(principal, model, prompt_tokens, worst, budgeted, states)
            if admission is not None:
                return admission
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

    async def _admit_shared(self, principal: Principal, model: str, prompt_tokens: int, worst: int,
                            budgeted: list, states: list) -> Admission | None:
        """Admit through the Redis (limits.store); None: it is down and limits.on_store_down is local."""
        from llmgw.accounting.limits import _refusal
        from llmgw.accounting.limits_redis import BudgetLevel, LimitsUnavailable, Refused, StoreDown

        shared = self.shared
        if not shared.worth_trying():
            return self._store_down(LimitsUnavailable(shared.down_reason))
        levels = [BudgetLevel(st.scope_kind, st.scope_id, st.period, st.start.timestamp(), st.end.timestamp(),
                              int(lim.budget_micros), int(st.spent)) for st, lim in zip(states, budgeted)]
        rules = self.rates.rules(principal)
        try:
            answer = await shared.admit(levels, worst, rules, prompt_tokens)
        except StoreDown as exc:
            return self._store_down(LimitsUnavailable(str(exc)))
        if isinstance(answer, Refused):
            if answer.budget_index is not None:
                st, lim = states[answer.budget_index], budgeted[answer.budget_index]
                raise self.budgets.refuse_shared(st, int(lim.budget_micros), worst, answer.spent, answer.held)
            rule = rules[answer.rule_index]
            raise _refusal(rule, 1 if rule.what == "rpm" else prompt_tokens, answer.wait)
        holds, after = answer
        for st, lim in zip(states, budgeted):
            self.budgets.seen_shared(st, int(lim.budget_micros))
        self.rates.mirror(rules, after)  # the answer's x-ratelimit-* headers say what the Redis has left
        return Admission(
            principal=principal, model=model, reserved_micros=worst if holds else 0,
            prompt_tokens_estimate=prompt_tokens, rules=rules, shared_holds=holds,
            shared_levels=[lv.name for lv in levels], shared=True,
        )

    def _store_down(self, refusal: Exception) -> None:
        """limits.on_store_down: refuse raises the 503; local counts this request in memory (the caller goes on)."""
        if self.shared.on_store_down == "refuse":
            raise refusal
        self.shared.counted_locally()
        return None

    async def settle(self, reservation: Reservation, *, model_served: str, prompt_tokens: int,
                     completion_tokens: int, cached_tokens: int = 0) -> int:
        cost = self.cost(model_served or reservation.model, prompt_tokens, completion_tokens, cached_tokens)
        if reservation.settled:
            return cost
        reservation.settled = True
        if isinstance(reservation, Admission) and reservation.shared:  # shared limits: settled in the Redis
            used = max(0, int(prompt_tokens)) + max(0, int(completion_tokens))
            self.shared.settle(reservation.shared_holds, reservation.shared_levels, cost,
                               [r for r in reservation.rules if r.what == "tpm"], used - reservation.prompt_tokens_estimate)
            self.rates.correct(reservation.rules, used - reservation.prompt_tokens_estimate)
        elif isinstance(reservation, Admission):
            self.budgets.release(reservation.holds)
            used = max(0, int(prompt_tokens)) + max(0, int(completion_tokens))
            self.rates.correct(reservation.rules, used - reservation.prompt_tokens_estimate)
        self.budgets.charge(chain_scopes(reservation.principal), cost)
        return cost

    def release(self, reservation: Reservation) -> None:
        if reservation.settled:
            return
        reservation.settled = True
        if isinstance(reservation, Admission) and reservation.shared:
            self.shared.settle(reservation.shared_holds, [], 0, [r for r in reservation.rules if r.what == "tpm"],
                               -reservation.prompt_tokens_estimate)
            self.rates.correct(reservation.rules, -reservation.prompt_tokens_estimate)
        elif isinstance(reservation, Admission):
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
    from llmgw.server.workers import worker_index

    journal_dir = state_dir_of(store)
    if journal_dir and worker_index():  # workers: each its own journal (worker-I/), replayed when it starts again
        journal_dir = os.path.join(journal_dir, f"worker-{worker_index()}")
        os.makedirs(journal_dir, exist_ok=True)
    return Accountant(config, store, journal_dir=journal_dir)
