"""What a load run measured, and the numbers made of it.

A run's latencies are kept as weighted points: a Python client records each
request (weight 1), wrk reports how many answers took each microsecond
(each such latency weighs its count). Rounds of either kind merge by concatenation,
so a target's percentiles cover all its rounds.
"""

from __future__ import annotations

import math
import os
import platform
from collections import Counter
from collections.abc import Iterable, Sequence

import attrs

Point = tuple[float, float]  # (value in seconds, weight)


def percentile(points: Sequence[Point], p: float) -> float | None:
    """The value below which `p` percent of the weight lies (nearest rank); None when empty.

    Monotonic in `p`, so p50 <= p95 <= p99 always holds.
    """
    if not points:
        return None
    ordered = sorted(points)
    total = sum(w for _, w in ordered)
    wanted = total * p / 100.0
    seen = 0.0
    for value, weight in ordered:
        seen += weight
        if seen >= wanted - 1e-9:
            return value
    return ordered[-1][0]


def mean(points: Sequence[Point]) -> float | None:
    total = sum(w for _, w in points)
    return sum(v * w for v, w in points) / total if total else None


def unit_points(values: Iterable[float]) -> list[Point]:
    return [(v, 1.0) for v in values]


@attrs.define
class Outcome:
    """One target's share of a load run, or the sum of several."""

    latencies: list[Point] = attrs.Factory(list)  # successful requests, seconds
    ttfts: list[Point] = attrs.Factory(list)  # streams: to the first event
    gaps: list[Point] = attrs.Factory(list)  # streams: between two events
    ok: int = 0
    errors: int = 0
    error_kinds: Counter = attrs.Factory(Counter)
    elapsed: float = 0.0  # wall seconds the load ran
    client_cpu: float = 0.0  # CPU seconds the load generator spent
    late: float = 0.0  # open loop: the most a request left after its time
    tokens: int = 0  # completion tokens received, where counted

    def fail(self, kind: str) -> None:
        self.errors += 1
        self.error_kinds[kind] += 1

    def merge(self, other: Outcome) -> None:
        self.latencies += other.latencies
        self.ttfts += other.ttfts
        self.gaps += other.gaps
        self.ok += other.ok
        self.errors += other.errors
        self.error_kinds.update(other.error_kinds)
        self.elapsed += other.elapsed
        self.client_cpu += other.client_cpu
        self.late = max(self.late, other.late)
        self.tokens += other.tokens

    @property
    def rps(self) -> float:
        return self.ok / self.elapsed if self.elapsed > 0 else 0.0


def ms(seconds: float | None, digits: int = 2) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, digits)


def latency_summary(out: Outcome) -> dict:
    """requests/s, counts and latency percentiles in milliseconds; TTFT and gaps for streams."""
    summary = {
        "rps": round(out.rps, 1),
        "ok": out.ok,
        "errors": out.errors,
        "mean_ms": ms(mean(out.latencies)),
        "p50_ms": ms(percentile(out.latencies, 50)),
        "p95_ms": ms(percentile(out.latencies, 95)),
        "p99_ms": ms(percentile(out.latencies, 99)),
        "max_ms": ms(max((v for v, _ in out.latencies), default=None)),
    }
    if out.error_kinds:
        summary["error_kinds"] = dict(out.error_kinds.most_common())
    if out.ttfts:
        summary.update({
            "ttft_mean_ms": ms(mean(out.ttfts)),
            "ttft_p50_ms": ms(percentile(out.ttfts, 50)),
            "ttft_p90_ms": ms(percentile(out.ttfts, 90)),
            "ttft_p95_ms": ms(percentile(out.ttfts, 95)),
            "ttft_p99_ms": ms(percentile(out.ttfts, 99)),
        })
    if out.gaps:
        summary.update({
            "gap_p50_ms": ms(percentile(out.gaps, 50), 3),
            "gap_p99_ms": ms(percentile(out.gaps, 99), 3),
        })
    return summary


def ratio(a: float | None, b: float | None, digits: int = 2) -> float | None:
    """a / b, or None when either is missing or b is zero."""
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return None
    return round(a / b, digits)


def machine() -> dict:
    """What the numbers were measured on, load average included: a busy machine skews them all."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "system": platform.platform(),
            "load_avg_at_start": load}


def describe_machine(host: dict) -> str:
    load = host.get("load_avg_at_start")
    return f"{host['cpus']} CPUs" + (f", load average {load[0]:g} at the start" if load else "")
