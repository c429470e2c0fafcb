"""Budgets: money per UTC day or month, on every level of a key's chain.

For each scope and period the spend so far is read from the store's sums
once (``spend_since``), then kept in memory: every settled request adds its
cost at once, and the store is read again every ``refresh_interval`` seconds
to take in what other gateway processes spent (the larger of the two
counts is kept, so nothing this process charged and has not written yet is
forgotten). What the store has is added to the cost of the rows not yet in
it (``pending``: buffered, or in the usage journal while the store fails),
so a restart with a journal still to write keeps the spend it had.

Admission holds each request's worst case (its prompt and ``max_tokens``
at the model's price) on every budgeted level until it is settled, and
admits only while ``spent + held + worst case`` fits the budget. The check
and the hold happen without an ``await`` between them, so concurrent
requests on one event loop cannot together overshoot.

A budget tells someone (``notify``: the notifier's ``emit``; ``count_event``:
``llmgw_budget_events_total``) when it refuses a request because it is spent
or what is left cannot cover the request (``refused``), and when its spend
crosses one of ``notify_at``'s shares (``0.8``). Each is told once per scope,
period and threshold: the store's ``claim_budget_notice`` says whether it
was told already, by this process before a restart or by another gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from llmgw.accounting.api import LimitExceeded
from llmgw.accounting.prices import format_money
from llmgw.store import Store, StoreError
from llmgw.tasks import cancel_and_wait

log = logging.getLogger("llmgw.accounting")

UTC = dt.UTC
PERIODS = ("day", "month")
_WORDS = {"org": "organization", "team": "team", "project": "project", "user": "person", "key": "key"}
# While the store cannot be read, try again this often (seconds).
_RETRY_FAILED = 5.0
# The longest a budget read waits for the usage writer to finish a batch (seconds).
_PENDING_WAIT = 1.0
# Forget an unused scope's state after this long (seconds) without holds.
_IDLE = 3600.0


def period_bounds(period: str, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The UTC day or month holding ``now``: [start, end)."""
    now = now.astimezone(UTC)
    if period == "day":
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return start, start + dt.timedelta(days=1)
    if period == "month":
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
        return start, end
    raise ValueError(f"budget period: {period!r} is not one of {', '.join(PERIODS)}")


@attrs.define(eq=False)
class BudgetState:
    """What one scope has spent and holds in one period."""

    scope_kind: str
    scope_id: str
    period: str
    start: dt.datetime
    end: dt.datetime
    spent: int = 0
    held: int = 0
    loaded_at: float = 0.0  # monotonic time the store was last read
    fresh: bool = False  # the last read of the store succeeded
    used_at: float = 0.0
    refreshing: bool = False
    budget: int | None = None  # the budget last checked against (None: never checked in this process)
    told: set[str] = attrs.Factory(set)  # thresholds told (or being told) this period: "0.8", "refused"
    ready: asyncio.Future | None = attrs.field(default=None, repr=False)

    @property
    def scope(self) -> str:
        return f"{self.scope_kind}:{self.scope_id}"


@attrs.frozen
class Hold:
    state: BudgetState
    amount: int


@attrs.frozen
class LevelSpend:
    """One level's spend in its current period (``budget_micros`` None: no budget there)."""

    scope_kind: str
    scope_id: str
    period: str
    period_start: dt.datetime
    resets_at: dt.datetime
    spent_micros: int
    held_micros: int
    budget_micros: int | None

    @property
    def remaining_micros(self) -> int | None:
        return None if self.budget_micros is None else max(0, self.budget_micros - self.spent_micros)


class BudgetBook:
    """Spend and holds per (scope, period), kept in memory over the store's sums."""

    def __init__(
        self,
        store: Store,
        *,
        refresh_interval: float = 30.0,
        clock: Callable[[], dt.datetime] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        currency: str = "",
    ) -> None:
        self.store = store
        self.refresh_interval = float(refresh_interval)
        self.currency = currency
        self._clock = clock or (lambda: dt.datetime.now(UTC))
        self._monotonic = monotonic
        self._states: dict[tuple[str, str, str], BudgetState] = {}
        self._tasks: set[asyncio.Task] = set()
        self._swept = monotonic()
        #: told when a budget is spent (llmgw.notify: the notifier's emit); None tells no one
        self.notify: Callable[[Any], object] | None = None
        #: counts each budget event told, by (scope kind, threshold): llmgw_budget_events_total; None: none
        self.count_event: Callable[[str, str], None] | None = None
        #: shares of a budget whose crossing is told (budgets.notify_at), lowest first
        self.notify_at: tuple[float, ...] = ()
        #: the cost of rows not yet in the store for (kind, id, start, end): the usage writer's pending_spend
        self.pending: Callable[[str, str, dt.datetime, dt.datetime], int] | None = None
        #: held while the store is read and ``pending`` added: the usage writer's, so no batch is half-way
        #: (out of its buffer, not yet in the store) when the two are added up
        self.pending_lock: asyncio.Lock | None = None

    # ---- reading -------------------------------------------------------------

    async def states(self, wanted: Iterable[tuple[str, str, str]]) -> list[BudgetState]:
        """The current period's state of each (scope kind, scope id, period),
        read from the store first when this process has not yet (one read per
        scope and period, however many ask at once)."""
        now, mono = self._clock(), self._monotonic()
        out: list[BudgetState] = []
        for kind, scope_id, period in wanted:
            start, end = period_bounds(period, now)
            st = self._states.get((kind, scope_id, period))
            if st is None or st.start != start:
                st = BudgetState(kind, scope_id, period, start, end)
                st.ready = self._spawn(self._read(st))
                self._states[(kind, scope_id, period)] = st
            st.used_at = mono
            out.append(st)
        pending = [st.ready for st in out if st.ready is not None and not st.ready.done()]
        if pending:
            # shield: a request that goes away must not cancel a read others wait for.
            await asyncio.gather(*(asyncio.shield(f) for f in pending))
        for st in out:
            interval = self.refresh_interval if st.fresh else _RETRY_FAILED
            if not st.refreshing and mono - st.loaded_at >= interval:
                st.refreshing = True
                self._spawn(self._read(st))
        if mono - self._swept > 60.0:
            self._sweep(mono)
        return out

    async def _read(self, st: BudgetState) -> None:
        try:
            async with self._pending_held():
                value = await self.store.spend_since(st.scope_kind, st.scope_id, st.start)
                if self.pending is not None:
                    value += self.pending(st.scope_kind, st.scope_id, st.start, st.end)
            st.spent = max(st.spent, value)
            st.fresh = True
        except StoreError as exc:
            st.fresh = False
            log.warning("could not read a budget's spend; counting only what this process saw: %s", exc,
                        extra={"fields": {"scope": st.scope, "period": st.period}})
        finally:
            st.loaded_at = self._monotonic()
            st.refreshing = False

    @contextlib.asynccontextmanager
    async def _pending_held(self):
        """Hold ``pending_lock`` for a read, waiting at most ``_PENDING_WAIT`` seconds for it: a write to a store
        that hangs must not hold admission up (without it, a batch in flight may be missed until the next read)."""
        lock = self.pending_lock
        held = False
        if lock is not None:
            try:
                await asyncio.wait_for(lock.acquire(), _PENDING_WAIT)
                held = True
            except TimeoutError:
                pass
        try:
            yield
        finally:
            if held:
                lock.release()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _sweep(self, mono: float) -> None:
        self._swept = mono
        for key, st in list(self._states.items()):
            if st.held <= 0 and mono - st.used_at > _IDLE and not st.refreshing:
                del self._states[key]

    async def close(self) -> None:
        await cancel_and_wait(*self._tasks)

    # ---- admission (synchronous: no await between check and hold) -----------

    def check(self, levels: Iterable[tuple[BudgetState, int]], worst: int) -> None:
        """Raise LimitExceeded for the first (state, budget) that cannot hold ``worst`` more."""
        for st, budget in levels:
            st.budget = budget
            if self.notify_at:
                self._crossed(st)
            if st.spent + st.held + worst <= budget:
                continue
            raise self._refusal(st, budget, worst)

    def hold(self, states: Iterable[BudgetState], amount: int) -> list[Hold]:
        holds = []
        for st in states:
            st.held += amount
            holds.append(Hold(st, amount))
        return holds

    def release(self, holds: Iterable[Hold]) -> None:
        for h in holds:
            h.state.held = max(0, h.state.held - h.amount)

    def charge(self, scopes: Iterable[tuple[str, str]], cost: int) -> None:
        """Add a settled request's cost to every period this process tracks for those scopes."""
        if cost <= 0:
            return
        now = self._clock()
        for kind, scope_id in scopes:
            for period in PERIODS:
                st = self._states.get((kind, scope_id, period))
                if st is not None and st.start <= now < st.end:
                    st.spent += cost
                    if self.notify_at and st.budget is not None:
                        self._crossed(st)

    # ---- shared limits (limits.store: redis://): the Redis checked and held; these keep the telling -----

    def seen_shared(self, st: BudgetState, budget: int) -> None:
        """A request the Redis admitted on ``st``: the budget checked against, and its shares told as they cross."""
        st.budget = budget
        if self.notify_at:
            self._crossed(st)

    def refuse_shared(self, st: BudgetState, budget: int, worst: int, spent: int, held: int) -> LimitExceeded:
        """The refusal of a budget the Redis says cannot hold ``worst`` more, with every gateway's spend and holds."""
        st.budget = budget
        st.spent = max(st.spent, spent)
        if self.notify_at:
            self._crossed(st)
        return self._refusal(st, budget, worst)

    def report(self, st: BudgetState, budget: int | None) -> LevelSpend:
        return LevelSpend(st.scope_kind, st.scope_id, st.period, st.start, st.end, st.spent, st.held, budget)

    # ---- telling (once per scope, period and threshold) ---------------------

    def _crossed(self, st: BudgetState) -> None:
        """Tell each share of ``notify_at`` the spend has reached and that is not told yet this period."""
        budget = st.budget
        if not budget or budget <= 0:
            return
        for share in self.notify_at:
            label = f"{share:g}"
            if st.spent >= share * budget and label not in st.told:
                self._tell(st, budget, label, share=share)

    def _tell(self, st: BudgetState, budget: int, label: str, *, share: float | None = None) -> None:
        """Tell one event of ``st``'s period (``label``: a share, or ``refused``), unless told already."""
        if label in st.told or (self.notify is None and self.count_event is None):
            return
        st.told.add(label)
        self._spawn(self._announce(st, budget, label, share, spent=st.spent))

    async def _announce(self, st: BudgetState, budget: int, label: str, share: float | None, *, spent: int) -> None:
        claim = getattr(self.store, "claim_budget_notice", None)
        if claim is not None:
            try:
                if not await claim(st.scope_kind, st.scope_id, st.period, st.start, label):
                    return  # told already: before a restart, or by another gateway
            except Exception as exc:  # noqa: BLE001 - a store that fails: tell it, rather than stay silent
                log.warning("could not record a budget event as told; telling it anyway: %s", exc,
                            extra={"fields": {"scope": st.scope, "period": st.period, "threshold": label}})
        from llmgw.notify.events import budget_spent

        try:
            if self.count_event is not None:
                self.count_event(st.scope_kind, label)
            if self.notify is not None:
                self.notify(budget_spent(st.scope_kind, st.scope_id, period=st.period,
                                         budget=format_money(budget, self.currency), budget_micros=budget,
                                         renews_at=st.end, threshold=share, spent_micros=spent,
                                         spent=format_money(spent, self.currency)))
        except Exception:  # noqa: BLE001 - telling someone must never refuse or fail a request
            log.exception("budget_spent not notified", extra={"fields": {"scope": st.scope}})

    def _refusal(self, st: BudgetState, budget: int, worst: int) -> LimitExceeded:
        now = self._clock()
        until_next = max(1.0, (st.end - now).total_seconds())
        where = f"the {_WORDS.get(st.scope_kind, st.scope_kind)}'s {'daily' if st.period == 'day' else 'monthly'} budget"
        money = lambda m: format_money(m, self.currency)
        if st.spent >= budget:
            self._tell(st, budget, "refused")
            message = f"{where} of {money(budget)} is spent; it renews at {st.end.strftime('%Y-%m-%d %H:%M UTC')}"
            return LimitExceeded("budget_exceeded", message, scope=st.scope, retry_after=until_next)
        left = budget - st.spent
        if worst > left:
            self._tell(st, budget, "refused")
            message = (
                f"this request could cost up to {money(worst)} and {where} has {money(left)} left;"
                " ask for fewer tokens (max_tokens) or wait for it to renew"
            )
            return LimitExceeded("budget_exceeded", message, scope=st.scope, retry_after=until_next)
        message = f"requests in progress hold the rest of {where}; retry when they finish"
        return LimitExceeded("budget_exceeded", message, scope=st.scope, retry_after=1.0)
