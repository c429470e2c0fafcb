"""Metrics about writing to the store, read at scrape time:

- ``llmgw_store_write_errors_total``: writes the store failed for its own sake (a full disk, a read-only
  file, an unreachable database), usage rows, admin changes and lease renewals alike;
- ``llmgw_usage_journal_rows``: usage rows in the journal, waiting for the store to take them;
- ``llmgw_usage_rows_dropped_total``: usage rows lost because neither the store nor the journal took them.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class StoreWriteCollector:
    def __init__(self, store: Any, accountant: Any) -> None:
        self.store = store
        self.accountant = accountant

    def describe(self):
        return []

    def collect(self):
        usage = getattr(self.accountant, "usage", None)
        errors = CounterMetricFamily("llmgw_store_write_errors", "Writes the store failed (not refusals of input).")
        errors.add_metric([], getattr(self.store, "write_errors", 0))
        yield errors
        journal = GaugeMetricFamily("llmgw_usage_journal_rows", "Usage rows in the journal, waiting for the store.")
        journal.add_metric([], getattr(usage, "journaled", 0))
        yield journal
        dropped = CounterMetricFamily("llmgw_usage_rows_dropped", "Usage rows neither the store nor the journal took.")
        dropped.add_metric([], getattr(usage, "dropped", 0))
        yield dropped
