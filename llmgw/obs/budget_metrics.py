"""`llmgw_budget_spent_ratio{scope,name,period}`: each budget's spend this period over the budget.

Read at scrape time from the accountant's budget book (llmgw/accounting/budgets.py): the budgets this
gateway process has checked a request against in the current period, with what it knows they spent
(the store's sum, refreshed every `budgets` refresh interval, and this process's own spend since).
"""

from __future__ import annotations

from typing import Any

from prometheus_client.core import GaugeMetricFamily

from llmgw.obs.metric_defs import defn


class BudgetCollector:
    def __init__(self, accountant: Any) -> None:
        self.accountant = accountant

    def describe(self):
        return []

    def collect(self):
        d = defn("llmgw_budget_spent_ratio")
        family = GaugeMetricFamily(d.family, d.help, labels=list(d.labels))
        book = getattr(self.accountant, "budgets", None)
        states = getattr(book, "_states", {}) if book is not None else {}
        now = book._clock() if book is not None else None
        for st in sorted(states.values(), key=lambda s: (s.scope_kind, s.scope_id, s.period)):
            if not st.budget or st.budget <= 0 or (now is not None and not (st.start <= now < st.end)):
                continue  # no budget known here, or a period that has turned
            family.add_metric([st.scope_kind, st.scope_id, st.period], st.spent / st.budget)
        yield family
