"""SLO pressure: a model over its slo.ttft_p99 gets a replica more, though its replicas still have room."""

from __future__ import annotations

from .conftest import Harness, model, register


async def test_a_model_over_its_ttft_objective_gets_one_replica_more_up_to_max():
    h = Harness([model("slow", concurrency=8, scaling={"min": 1, "max": 2, "idle_timeout": "60s"})])
    h.connect(register("node-a"))
    h.connect(register("node-b"))
    [(_, first)] = await h.start_ready()
    over = {"slow": False}
    h.rec.slo_pressure = lambda name: over.get(name, False)
    await h.tick(1)
    assert h.agents.starts() == []  # room, and within its objective: nothing more
    assert h.replicas.get(first.shard_id).has_room()
    over["slow"] = True  # the gateway's window of first tokens is over the objective
    [(_, second)] = await h.start_ready()
    assert second.shard_id != first.shard_id and len(h.replicas.replicas_for("slow")) == 2
    await h.tick(1)
    assert h.agents.starts() == []  # scaling.max reached: no third
