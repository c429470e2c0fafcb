"""SLO-aware admission: a model answering slower than its `slo.ttft_p99` sheds its lowest bands first.

Every streamed request's time to first token (arrival to first event, the
wait for room included: what the client saw) is kept per model for the last
`WINDOW` seconds, in this gateway process. Once the window holds at least
`MIN_SAMPLES` of them, their 99th percentile is compared with the model's
objective. While it is over:

- the lowest band is refused at admission, before it can join the queue,
  with 503 `slo_exceeded`, a Retry-After and a message naming the objective
  (a model with fallbacks sends it to the first that serves it instead);
- each further half of the objective over it refuses the next band up
  (1.5x: the two lowest, 2x: three), and the highest band is never refused;
- the control plane is told the model is under pressure, and starts a
  replica more while `scaling.max` allows (llmgw.control.reconciler).

Samples older than the window are forgotten, so a model whose low bands
were all refused recovers by itself once its recent answers are fast again.
A model with no `slo.ttft_p99` (0, the default) is never shed.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence

from llmgw.router.errors import REFUSED, GatewayError

#: Seconds of recent first-token times a model's percentile is taken over.
WINDOW = 60.0
#: Samples the window must hold before it is believed (fewer: nothing is shed).
MIN_SAMPLES = 5
#: Samples kept a model at most; the oldest go first.
MAX_SAMPLES = 2000
#: Each further part of the objective over it that refuses one band more.
STEP = 0.5
#: Seconds a refused client is told to wait.
RETRY_AFTER = 5


class SloExceeded(GatewayError):
    def __init__(self, model: str, band: str, p99: float, objective: float) -> None:
        super().__init__(
            503, "slo_exceeded",
            f"{model!r} is answering slower than its objective: its first tokens took {p99:.2f}s at the 99th "
            f"percentile over the last {WINDOW:.0f}s, over slo.ttft_p99 {objective:g}s, so requests in band "
            f"{band!r} are refused until it recovers (higher bands are still served); try again in "
            f"{RETRY_AFTER}s", outcome=REFUSED, retry_after=RETRY_AFTER)


def p99(values: Sequence[float]) -> float:
    """The 99th percentile by the nearest-rank method (no interpolation)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


class SloWatch:
    """Recent first-token times per model, against each model's objective."""

    def __init__(self, objective: Callable[[str], float], *, clock: Callable[[], float] = time.monotonic,
                 on_shed: Callable[[str, str], None] | None = None) -> None:
        #: a model's ttft_p99 objective in seconds, 0 for none (read at each use: the catalog may change)
        self.objective = objective
        self.clock = clock
        self._samples: dict[str, deque[tuple[float, float]]] = {}
        #: called with (model, band) for each request refused (llmgw_slo_shed_total)
        self.on_shed = on_shed

    @classmethod
    def of_catalog(cls, catalog, **kw) -> SloWatch:
        """Objectives as the catalog's models (server.yaml's, and the control plane's) set them now."""
        cache: dict = {"configs": None, "by_name": {}}

        def objective(model: str) -> float:
            if cache["configs"] is not catalog.configs:  # set_models put in a new list
                cache["configs"] = catalog.configs
                cache["by_name"] = {m.name: m.slo.ttft_p99.total_seconds() for m in catalog.configs
                                    if getattr(m, "slo", None) is not None}
            return cache["by_name"].get(model, 0.0)

        return cls(objective, **kw)

    def observe(self, model: str, ttft: float) -> None:
        if self.objective(model) <= 0:
            return
        samples = self._samples.setdefault(model, deque(maxlen=MAX_SAMPLES))
        samples.append((self.clock(), ttft))

    def recent_p99(self, model: str) -> float | None:
        """The model's first-token p99 over the window; None with too few samples."""
        samples = self._samples.get(model)
        if not samples:
            return None
        cut = self.clock() - WINDOW
        while samples and samples[0][0] < cut:
            samples.popleft()
        if len(samples) < MIN_SAMPLES:
            return None
        return p99([t for _, t in samples])

    def pressure(self, model: str) -> float:
        """Recent p99 over the objective (above 1: over it); 0 with no objective or too few samples."""
        objective = self.objective(model)
        if objective <= 0:
            return 0.0
        recent = self.recent_p99(model)
        return recent / objective if recent is not None else 0.0

    def over(self, model: str) -> bool:
        """Whether the model is over its objective now (the reconciler's reason to add a replica)."""
        return self.pressure(model) > 1.0

    def bands_shed(self, model: str, bands: Sequence[str]) -> set[str]:
        """The bands (named highest first) refused for `model` now; never the highest."""
        ratio = self.pressure(model)
        if ratio <= 1.0 or len(bands) < 2:
            return set()
        count = min(len(bands) - 1, 1 + int((ratio - 1.0) / STEP))
        return set(bands[len(bands) - count:])

    def check(self, model: str, band: str, bands: Sequence[str]) -> None:
        """Raise SloExceeded when requests of `band` are refused for `model` now (and count it)."""
        if band not in self.bands_shed(model, bands):
            return
        if self.on_shed is not None:
            self.on_shed(model, band)
        raise SloExceeded(model, band, self.recent_p99(model) or 0.0, self.objective(model))
