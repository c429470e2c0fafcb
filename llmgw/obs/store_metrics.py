"""The store's metrics: how long its transactions take and how many fail, its PostgreSQL pool, and what the
primary sees of its standbys.

`QueryTimes` is kept by every SQL store (llmgw/store/sqlbase.py): each unit of work (one transaction) is
timed as a read or a write; one that fails for the store's sake is an error (a refusal of the input,
Conflict or Invalid, is not). `StoreCollector` publishes them on the server's registry, with the pool of
a PostgreSQL store and, read at most every few seconds before a scrape, its replication:
`pg_is_in_recovery()` says whether the server llmgw writes to is a primary, and the primary's
`pg_stat_replication` lists its standbys with their state and how far their replay is behind. A standby
whose lag the store's role may not read (pg_stat_replication shows it only to superusers and
pg_monitor) has the lag -1 and its host and state "unknown". A store opened on a standby (in recovery) is one
member, itself, a replica in_recovery.
"""

from __future__ import annotations

import bisect
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from llmgw.obs import logs
from llmgw.obs.metric_defs import defn

log = logs.get("llmgw.store")

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
KINDS = ("read", "write")
REPLICATION_EVERY = 5.0  # seconds: a scrape every 15 s reads the standbys at most once each


class QueryTimes:
    """Per kind (read, write): a histogram of transaction times (cumulative bucket counts) and errors."""

    def __init__(self) -> None:
        self.buckets = {k: [0] * (len(BUCKETS) + 1) for k in KINDS}
        self.sums = dict.fromkeys(KINDS, 0.0)
        self.errors = dict.fromkeys(KINDS, 0)

    def observe(self, kind: str, seconds: float, failed: bool) -> None:
        self.buckets[kind][bisect.bisect_left(BUCKETS, seconds)] += 1
        self.sums[kind] += seconds
        if failed:
            self.errors[kind] += 1

    def timed(self, kind: str, run: Callable[..., Awaitable[Any]], refusals: tuple[type, ...]
              ) -> Callable[..., Awaitable[Any]]:
        """`run` (a store's _read or _write) timed under `kind`."""

        async def timed_run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            failed = False
            try:
                return await run(*args, **kwargs)
            except refusals:
                raise
            except BaseException:
                failed = True
                raise
            finally:
                self.observe(kind, time.perf_counter() - started, failed)

        return timed_run


class StoreCollector:
    """The store's series on a registry; `refresh()` (awaited before a scrape) reads the replication."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.members: list[tuple[str, str, str, str]] = []  #: (member, host, role, state)
        self.lags: list[tuple[str, float]] = []
        self._read_at = 0.0

    @property
    def backend(self) -> str:
        return getattr(self.store, "dialect", "unknown")

    def describe(self):
        return []

    def collect(self):
        times: QueryTimes | None = getattr(self.store, "query_times", None)
        d = defn("llmgw_store_query_duration_seconds")
        histogram = HistogramMetricFamily(d.family, d.help, labels=list(d.labels))
        d = defn("llmgw_store_query_errors_total")
        errors = CounterMetricFamily(d.family, d.help, labels=list(d.labels))
        if times is not None:
            for kind in KINDS:
                cumulative, running = [], 0
                for bound, count in zip((*BUCKETS, float("inf")), times.buckets[kind]):
                    running += count
                    cumulative.append((_bound(bound), running))
                histogram.add_metric([self.backend, kind], cumulative, times.sums[kind])
                errors.add_metric([self.backend, kind], times.errors[kind])
        yield histogram
        yield errors
        pool = getattr(self.store, "_pool", None)
        d = defn("llmgw_store_pool_connections")
        connections = GaugeMetricFamily(d.family, d.help, labels=list(d.labels))
        if pool is not None:
            size, idle = pool.get_size(), pool.get_idle_size()
            connections.add_metric(["in_use"], size - idle)
            connections.add_metric(["idle"], idle)
            connections.add_metric(["max"], pool.get_max_size())
        yield connections
        d = defn("llmgw_store_member")
        members = GaugeMetricFamily(d.family, d.help, labels=list(d.labels))
        for member in self.members:
            members.add_metric(list(member), 1)
        yield members
        d = defn("llmgw_store_replica_lag_bytes")
        lags = GaugeMetricFamily(d.family, d.help, labels=list(d.labels))
        for member, lag in self.lags:
            lags.add_metric([member], lag)
        yield lags
        d = defn("llmgw_store_address_members")
        named = GaugeMetricFamily(d.family, d.help, labels=list(d.labels))
        if self.backend == "postgres":
            named.add_metric([], address_members(getattr(self.store, "_dsn_shown", "")))
        yield named

    async def refresh(self) -> None:
        """Read the replication again, when the store is PostgreSQL and the last reading is a few seconds old."""
        if self.backend != "postgres" or time.monotonic() - self._read_at < REPLICATION_EVERY:
            return
        self._read_at = time.monotonic()
        try:
            self.members, self.lags = await self.store._read(_replication)
        except Exception as exc:  # noqa: BLE001 - the metrics say what they can; the store's own errors count it
            log.warning("store replication not read for the metrics: %s", exc)
            self.members, self.lags = [], []


def address_members(dsn: str) -> int:
    """How many hosts a PostgreSQL address names (`postgres://u:p@h1:5432,h2:5432/db` names two)."""
    hosts = urllib.parse.urlsplit(dsn).netloc.rpartition("@")[2]
    return len([h for h in hosts.split(",") if h]) or 1


def _bound(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(float(value))


async def _replication(tx: Any) -> tuple[list[tuple[str, str, str, str]], list[tuple[str, float]]]:
    in_recovery = await tx.fetchval("SELECT pg_is_in_recovery()")
    here = await tx.fetchval("SELECT coalesce(host(inet_server_addr()), 'local')")
    if in_recovery:
        return [(here, here, "replica", "in_recovery")], []
    members = [(here, here, "leader", "running")]
    lags = []
    rows = await tx.fetch(
        "SELECT application_name, coalesce(host(client_addr), 'local') AS host, coalesce(state, 'unknown') AS state,"
        " pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) AS lag FROM pg_stat_replication"
        " ORDER BY application_name")
    for r in rows:
        hidden = r["state"] == "unknown"  # a role without pg_monitor sees the standby, not its address or state
        host = "unknown" if hidden else r["host"]
        name = r["application_name"] or host
        members.append((name, host, "replica", r["state"]))
        lags.append((name, float(r["lag"]) if r["lag"] is not None else -1.0))
    return members, lags
