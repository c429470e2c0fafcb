"""`llmgw_budget_spent_ratio{scope,name,period}`: each budget's spend this period over the budget.

Every budget the store has (`Store.list_budgets`), read again at most every `REFRESH` seconds before a
scrape: its spend is what this gateway's budget book knows (the store's sum and this process's own spend
since, llmgw/accounting/budgets.py) where it tracks the budget, else the store's sum for the period.
`name` is the scope's id (an org, team, project or user id).
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from llmgw.obs import logs
from llmgw.obs.metric_defs import defn

log = logs.get("llmgw.accounting")

REFRESH = 15.0  # seconds: a budget's spend changes by requests, and the book has the hot ones at once


class BudgetCollector:
    def __init__(self, store: Any, accountant: Any) -> None:
        self.store = store
        self.accountant = accountant
        self.budgets: list[tuple[str, str, str, int, int]] = []  #: (scope, name, period, spent, budget)
        self._read_at = -REFRESH

    def describe(self):
        return []

    def _book(self) -> Any:
        return getattr(self.accountant, "budgets", None)

    def collect(self):
        d = defn("llmgw_budget_spent_ratio")
        family = GaugeMetricFamily(d.family, d.help, labels=list(d.labels))
        book = self._book()
        tracked = getattr(book, "_states", {}) if book is not None else {}
        for scope, name, period, spent, budget in self.budgets:
            st = tracked.get((scope, name, period))
            if st is not None and st.fresh:  # the book's spend is newer than the last read
                spent = st.spent
            family.add_metric([scope, name, period], spent / budget)
        yield family

    async def refresh(self) -> None:
        if time.monotonic() - self._read_at < REFRESH:
            return
        self._read_at = time.monotonic()
        import datetime as dt

        from llmgw.accounting.budgets import period_bounds

        try:
            budgets = await self.store.list_budgets()
            now = dt.datetime.now(dt.timezone.utc)
            found = []
            for lim in budgets:
                if not lim.budget_micros or lim.budget_micros <= 0:
                    continue
                period = lim.budget_period or "month"
                start, _ = period_bounds(period, now)
                spent = await self.store.spend_since(lim.scope_kind, lim.scope_id, start)
                found.append((lim.scope_kind, lim.scope_id, period, spent, lim.budget_micros))
        except Exception as exc:  # noqa: BLE001 - the last reading stands; the store's own metrics say why
            log.warning("budgets not read for the metrics: %s", exc)
            return
        self.budgets = found
