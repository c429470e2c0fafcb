"""The scheduler's counters (llmgw/obs/control_metrics.py) follow what the reconciler does: placements,
placements that found no room and why, preemptions, failed starts and parks, and each pass's time."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llmgw.obs.control_metrics import ControlMetrics, ObserverFanOut

from .conftest import Harness, control, gpus, register
from .test_preemption import CHEAP, VIP, Agent, running


def followed(h: Harness) -> ControlMetrics:
    metrics = ControlMetrics()
    h.rec.observer = ObserverFanOut(h.rec.observer, metrics)
    return metrics


def values(metrics: ControlMetrics) -> dict[tuple, float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, *sorted(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


async def test_placements_preemptions_and_pass_times_are_counted(sqlite_store):
    h = Harness([], store=sqlite_store)
    metrics = followed(h)
    agent = Agent(h)
    await h.catalog.add(CHEAP, actor="test")
    await agent.passes(1)  # no node yet
    assert values(metrics)[("llmgw_placement_failures_total", ("model", "cheap"), ("reason", "no_nodes"))] >= 1
    h.connect(register("gpu-1", gpu=gpus(2)))
    await agent.passes(1)
    assert values(metrics)[("llmgw_placements_total", ("model", "cheap"))] == 1
    await h.catalog.add(VIP, actor="test")
    await agent.passes(4)
    assert running(h, "vip")
    got = values(metrics)
    assert got[("llmgw_preemptions_total", ("model", "vip"))] == 1
    assert got[("llmgw_placements_total", ("model", "vip"))] == 1
    assert got[("llmgw_reconcile_duration_seconds_count",)] == 6
    # The stopped one waits: no node has room for it while vip holds the cards.
    assert got[("llmgw_placement_failures_total", ("model", "cheap"), ("reason", "no_fit"))] >= 1


async def test_a_model_that_fails_to_start_is_counted_and_its_parking_once(sqlite_store):
    h = Harness([], store=sqlite_store, config=control(park_after=2))
    metrics = followed(h)
    agent = Agent(h)
    agent.failing.add("cheap")
    await h.catalog.add(CHEAP, actor="test")
    h.connect(register("gpu-1", gpu=gpus(2)))
    for _ in range(6):
        await agent.passes(1, seconds=120)  # past each back-off
    got = values(metrics)
    assert got[("llmgw_replica_start_failures_total", ("model", "cheap"))] == 2
    assert got[("llmgw_model_parks_total", ("model", "cheap"))] == 1
    assert h.rec.models["cheap"].parked
