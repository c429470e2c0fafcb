"""llmgw_placement_pass_seconds: the time each reconciler pass spends placing, beside the whole pass's time."""

from __future__ import annotations

from .conftest import Harness, gpus, register
from .test_control_metrics import followed, values
from .test_preemption import CHEAP, Agent, running


async def test_each_pass_times_its_placement_within_the_pass(sqlite_store):
    h = Harness([], store=sqlite_store)
    metrics = followed(h)
    agent = Agent(h)
    await h.catalog.add(CHEAP, actor="test")
    h.connect(register("gpu-1", gpu=gpus(2)))
    await agent.passes(3)
    assert running(h, "cheap")
    got = values(metrics)
    passes = got[("llmgw_reconcile_duration_seconds_count",)]
    assert passes == 3
    assert got[("llmgw_placement_pass_seconds_count",)] == passes
    # Placing is part of each pass, and took some time (a decision was made in it).
    assert 0 < got[("llmgw_placement_pass_seconds_sum",)] <= got[("llmgw_reconcile_duration_seconds_sum",)]
    assert got[("llmgw_placement_pass_seconds_bucket", ("le", "+Inf"))] == passes
