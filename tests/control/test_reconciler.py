"""The reconciler against a fake agent side: what it starts, stops, replaces, parks and tells the router."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from llmgw.control.explain import explain, explain_text
from llmgw.control.reconciler import CRASH_WINDOW
from llmgw.control.state import ModelUnavailable
from llmgw.store import open_store
from llmgw.wire import messages as w

from .conftest import Harness, control, gpus, model, register


async def test_min_is_met_spread_and_ready_replicas_feed_the_router():
    h = Harness([model("qwen", scaling={"min": 2, "max": 3})])
    h.connect(register("node-a", address="10.0.0.1"))
    h.connect(register("node-b", address="10.0.0.2"))
    await h.tick()
    starts = h.agents.starts()
    assert sorted(n for n, _ in starts) == ["node-a", "node-b"]
    for node_id, msg in starts:
        assert msg.model == "qwen" and msg.engine == "sim" and msg.gpus == ()
        assert msg.api_key == h.keys.key_for(msg.shard_id) and msg.api_key.startswith("llmgw-engine-")
        assert msg.command_id == f"start:{msg.shard_id}" and msg.port == 0  # the agent picks it
    # Not ready yet: the router has nothing.
    assert h.replicas.replicas_for("qwen") == []
    await h.tick(5)
    assert h.agents.starts() == []  # nothing more while they start

    node_id, msg = starts[0]
    h.status(node_id, msg.shard_id, "ready", port=31000)
    [replica] = h.replicas.replicas_for("qwen")
    assert replica.id == msg.shard_id and replica.source == "control"
    address = "10.0.0.1" if node_id == "node-a" else "10.0.0.2"
    assert replica.base_url == f"http://{address}:31000/v1"
    assert replica.metrics_url == f"http://{address}:31000/metrics"
    assert replica.api_key.reveal() == h.keys.key_for(msg.shard_id)
    info = explain(h.rec, "qwen")
    assert info["status"] == "starting" and info["ready"] == 1 and info["wanted"] == 2


async def test_max_zero_and_a_removed_model_stop_their_replicas(tmp_path):
    store = await open_store(f"sqlite:///{tmp_path}/s.db")
    try:
        h = Harness([], store=store)
        await h.catalog.add({"name": "extra", "engine": "sim", "profiles": [{"name": "d"}],
                             "scaling": {"min": 1, "max": 1}}, actor="test")
        h.connect(register("node-a"))
        [(_, start)] = await h.start_ready()
        assert len(h.replicas.replicas_for("extra")) == 1

        await h.catalog.scale("extra", min=0, max=0, actor="test")
        await h.tick()
        assert [m.shard_id for _, m in h.agents.stops()] == [start.shard_id]
        assert h.replicas.replicas_for("extra") == []
        h.status("node-a", start.shard_id, "stopped")
        assert explain(h.rec, "extra")["status"] == "stopped"

        await h.catalog.scale("extra", min=1, max=1, actor="test")
        [(_, again)] = await h.start_ready()
        await h.catalog.remove("extra", actor="test")
        await h.tick()
        assert [m.shard_id for _, m in h.agents.stops()] == [again.shard_id]
    finally:
        await store.close()


async def test_a_failing_start_backs_off_doubling_then_the_model_is_parked():
    h = Harness([model("broken")], config=control(park_after=3, backoff=(10, 25)))
    h.connect(register("node-a"))
    tries = []
    for wait in (0, 10, 20):
        await h.tick(wait)
        [(node_id, start)] = h.agents.starts()
        tries.append(h.clock.now)
        h.status(node_id, start.shard_id, "failed", message="llama-server: unknown model architecture",
                 log_tail=("loading model", "error: unknown model architecture: 'foo'"))
        if len(tries) < 3:
            info = explain(h.rec, "broken")
            assert info["status"] == "backing_off" and info["failures"] == len(tries)
            await h.tick(1)
            assert h.agents.starts() == []  # still backing off
            h.clock.advance(-1)
    # The waits doubled: 10 s, then 20 s (under the 25 s ceiling).
    assert [b - a for a, b in itertools.pairwise(tries)] == [10, 20]

    info = explain(h.rec, "broken")
    assert info["status"] == "parked" and info["parked"]
    assert info["reason"].startswith("parked after 3 failed starts in a row; the last, on node-a: "
                                     "llama-server: unknown model architecture")
    assert info["log_tail"][-1] == "error: unknown model architecture: 'foo'"
    text = explain_text(info)
    assert "broken (standard, server.yaml): parked" in text and "unknown model architecture: 'foo'" in text
    await h.tick(3600)
    assert h.agents.starts() == []  # parked stays parked
    with pytest.raises(ModelUnavailable, match="parked after 3 failed starts"):
        await h.rec.ensure_started("broken")

    h.rec.retry("broken")
    await h.tick()
    assert len(h.agents.starts()) == 1
    assert explain(h.rec, "broken")["status"] == "starting"


async def test_a_killed_engine_is_replaced_and_an_early_crash_counts_as_a_failure():
    h = Harness([model("qwen")])
    h.connect(register("node-a"))
    [(_, first)] = await h.start_ready()
    await h.tick(CRASH_WINDOW + 1)
    h.status("node-a", first.shard_id, "exited", exit_code=-9, message="killed by signal 9")
    assert h.replicas.replicas_for("qwen") == []
    assert explain(h.rec, "qwen")["failures"] == 0
    await h.tick()
    [(_, second)] = h.agents.starts()
    assert second.shard_id != first.shard_id
    h.status("node-a", second.shard_id, "ready", port=h.port_for(second))
    await h.tick(5)
    h.status("node-a", second.shard_id, "exited", exit_code=1)  # within the crash window
    info = explain(h.rec, "qwen")
    assert info["failures"] == 1 and info["status"] == "backing_off"
    assert "node-a: exit code 1" in info["last_error"]


async def test_drain_brings_the_replacement_up_before_stopping_the_original():
    h = Harness([model("qwen", scaling={"min": 1, "max": 1})])
    h.connect(register("node-a"))
    [(_, original)] = await h.start_ready()
    h.connect(register("node-b", shards=()))
    h.rec.drain("node-a")
    await h.tick()
    [(node_id, replacement)] = h.agents.starts()
    assert node_id == "node-b"
    assert h.agents.stops() == []
    assert [r.id for r in h.replicas.replicas_for("qwen")] == [original.shard_id]  # still serving
    await h.tick(5)
    assert h.agents.starts() == [] and h.agents.stops() == []  # one at a time, and nothing stops yet

    h.status("node-b", replacement.shard_id, "ready", port=h.port_for(replacement))
    assert [r.id for r in h.replicas.replicas_for("qwen")] == [replacement.shard_id]
    await h.tick()
    assert [(n, m.shard_id) for n, m in h.agents.stops()] == [("node-a", original.shard_id)]
    h.status("node-a", original.shard_id, "stopped")
    await h.tick(5)
    assert h.agents.starts() == [] and h.agents.stops() == []
    assert h.inventory.get("node-a").state() == "draining"


async def test_drain_with_nowhere_to_go_keeps_the_original_and_says_why():
    h = Harness([model("qwen")])
    h.connect(register("node-a"))
    [(_, original)] = await h.start_ready()
    h.rec.drain("node-a")
    await h.tick()
    assert h.agents.starts() == [] and h.agents.stops() == []
    info = explain(h.rec, "qwen")
    assert info["drain_blocked"]["rejections"] == ["node-a: the replica it replaces is there"]
    assert [r.id for r in h.replicas.replicas_for("qwen")] == [original.shard_id]


async def test_a_lost_node_has_its_replicas_placed_again():
    h = Harness([model("qwen")])
    h.connect(register("node-a"))
    [(_, first)] = await h.start_ready()
    h.connect(register("node-b"))
    h.disconnect("node-a")
    # Within the heartbeat window the engines may still serve: kept.
    h.clock.advance(10)
    h.heartbeat("node-b")
    await h.tick()
    assert [r.id for r in h.replicas.replicas_for("qwen")] == [first.shard_id]
    assert h.agents.starts() == []
    h.clock.advance(6)
    h.heartbeat("node-b")
    await h.tick()
    assert h.replicas.replicas_for("qwen") == []
    [(node_id, _)] = h.agents.starts()
    assert node_id == "node-b"
    assert h.inventory.get("node-a").state() == "lost"
    assert "node-a lost" in explain(h.rec, "qwen")["last_error"]


async def test_an_agent_that_comes_back_keeps_its_replica():
    h = Harness([model("qwen")])
    h.connect(register("node-a"))
    [(_, first)] = await h.start_ready()
    h.disconnect("node-a")
    h.clock.advance(5)
    running = w.RunningShard(shard_id=first.shard_id, model="qwen", engine="sim", state="ready", port=first.port)
    h.connect(register("node-a", shards=[running]))
    await h.tick()
    assert h.agents.starts() == [] and h.agents.stops() == []
    assert [r.id for r in h.replicas.replicas_for("qwen")] == [first.shard_id]


async def test_a_new_leader_adopts_what_runs_and_stops_what_it_does_not_know():
    h = Harness([model("qwen")])
    shards = [
        w.RunningShard(shard_id="qwen-0001", model="qwen", engine="sim", state="ready", port=20005),
        w.RunningShard(shard_id="old-0002", model="retired-model", engine="sim", state="ready", port=20006),
    ]
    h.connect(register("node-a", shards=shards, address="10.1.1.1"))
    await h.tick()
    assert h.agents.starts() == []
    assert [(n, m.shard_id) for n, m in h.agents.stops()] == [("node-a", "old-0002")]
    [replica] = h.replicas.replicas_for("qwen")
    assert replica.base_url == "http://10.1.1.1:20005/v1" and replica.api_key.reveal() == h.keys.key_for("qwen-0001")


async def test_on_demand_starts_on_the_first_request_and_stops_when_idle():
    h = Harness([model("lazy", scaling={"min": 0, "max": 1, "on_demand": True, "idle_timeout": "60s"})])
    h.connect(register("node-a"))
    await h.tick()
    assert h.agents.starts() == []
    assert explain(h.rec, "lazy")["status"] == "stopped"

    waiting = asyncio.create_task(h.rec.ensure_started("lazy", timeout=5))
    await asyncio.sleep(0)
    await h.tick()
    [(_, start)] = h.agents.starts()
    assert not waiting.done()
    h.status("node-a", start.shard_id, "ready", port=h.port_for(start))
    await asyncio.wait_for(waiting, 1)
    await h.rec.ensure_started("lazy")  # a replica runs: at once

    # In use: the router chose it recently.
    await h.tick(50)
    h.replicas.get(start.shard_id).last_chosen = h.clock.now
    await h.tick(50)
    assert h.agents.stops() == []
    await h.tick(61)
    [(_, stop)] = h.agents.stops()
    assert stop.shard_id == start.shard_id
    assert h.replicas.replicas_for("lazy") == []
    h.status("node-a", start.shard_id, "stopped")
    assert explain(h.rec, "lazy")["status"] == "stopped"


async def test_a_first_request_is_told_at_once_when_nothing_can_run_it():
    h = Harness([model("lazy", profiles=[{"name": "d", "engine": "vllm", "gpus": 1}],
                       scaling={"min": 0, "max": 1, "on_demand": True})])
    h.connect(register("cpu-node"))
    waiting = asyncio.create_task(h.rec.ensure_started("lazy", timeout=5))
    await asyncio.sleep(0)
    await h.tick()
    with pytest.raises(ModelUnavailable, match="cpu-node: has no GPUs; the profile needs 1"):
        await waiting


async def test_scale_up_on_load_and_back_down_when_idle():
    h = Harness([model("busy", concurrency=2, scaling={"min": 1, "max": 2, "idle_timeout": "60s"})])
    h.connect(register("node-a"))
    h.connect(register("node-b"))
    [(_, first)] = await h.start_ready()
    replica = h.replicas.get(first.shard_id)
    replica.in_flight = 2  # full
    [(_, second)] = await h.start_ready()
    assert len(h.replicas.replicas_for("busy")) == 2
    replica.in_flight = 0
    replica.last_chosen = h.clock.now + 30  # the first keeps being used; the second never is
    await h.tick(61)
    [(_, stop)] = h.agents.stops()
    assert stop.shard_id == second.shard_id
    assert "idle for" in h.rec.records[second.shard_id].retiring


async def test_a_critical_model_preempts_an_opportunistic_one():
    h = Harness([
        model("cheap", engine="vllm", profiles=[{"name": "d", "gpus": 1}], **{"class": "opportunistic"}),
        model("vip", engine="vllm", profiles=[{"name": "d", "gpus": 1}], scaling={"min": 0, "max": 1},
              **{"class": "critical"}),
    ])
    h.connect(register("gpu-1", gpu=gpus(1)))
    [(_, cheap)] = await h.start_ready()
    # vip wants a replica now: min 0, but a request came and waits for it.
    task = asyncio.create_task(h.rec.ensure_started("vip", timeout=5))
    await asyncio.sleep(0)
    await h.tick()
    assert h.agents.starts() == []
    assert [m.shard_id for _, m in h.agents.stops()] == [cheap.shard_id]
    h.status("gpu-1", cheap.shard_id, "stopped")
    await h.tick()
    [(node_id, vip)] = h.agents.starts()
    assert vip.model == "vip" and vip.gpus == (0,)
    h.status(node_id, vip.shard_id, "ready", port=h.port_for(vip))
    await asyncio.wait_for(task, 1)
    # The opportunistic model wants its replica back, but never preempts the critical one.
    await h.tick(5)
    assert h.agents.starts() == [] and h.agents.stops() == []
    info = explain(h.rec, "cheap")
    assert info["status"] == "unplaced"
    assert "gpu-1: needs 1 free GPU, has 0" in info["last_placement"]["rejections"]


async def test_starts_to_an_unreachable_node_are_dropped_not_counted():
    h = Harness([model("qwen")])
    h.connect(register("node-a"))
    h.agents.connected.discard("node-a")  # its connection went between the register and the send
    await h.tick()
    assert h.rec.records == {}
    info = explain(h.rec, "qwen")
    assert info["failures"] == 0 and "unreachable" in info["last_error"]


async def test_a_stuck_start_counts_as_a_failure():
    h = Harness([model("slow")])
    h.rec.start_timeout = 60
    h.connect(register("node-a"))
    await h.tick()
    [(_, start)] = h.agents.starts()
    h.rec.handle("node-a", w.WeightsProgress(model="slow", done_bytes=5, total_bytes=10))
    assert "weights fetching: 50%" in h.rec.records[start.shard_id].message
    h.heartbeat("node-a")
    await h.tick(61)
    [(_, stop)] = h.agents.stops()
    assert stop.shard_id == start.shard_id
    info = explain(h.rec, "slow")
    assert info["failures"] == 1 and "not ready after 60 s" in info["last_error"]


async def test_cordon_stops_new_placements_and_keeps_what_runs():
    h = Harness([model("qwen", scaling={"min": 2, "max": 2})])
    h.connect(register("node-a"))
    [(_, first), _] = sorted(await h.start_ready(), key=lambda s: s[1].shard_id)
    h.rec.cordon("node-a", "disk swap")
    h.status("node-a", first.shard_id, "exited", message="killed")
    await h.tick(CRASH_WINDOW)
    assert h.agents.starts() == [] and h.agents.stops() == []
    info = explain(h.rec, "qwen")
    assert info["status"] == "unplaced"
    assert info["last_placement"]["rejections"] == ["node-a: cordoned: disk swap"]
    h.rec.uncordon("node-a")
    await h.tick()
    assert len(h.agents.starts()) == 1


async def test_reset_forgets_everything_and_empties_the_router():
    h = Harness([model("qwen")])
    h.connect(register("node-a"))
    await h.start_ready()
    assert len(h.replicas) == 1
    h.rec.reset("no longer leading")
    assert len(h.replicas) == 0 and h.rec.records == {} and len(h.inventory) == 0


async def test_a_parked_model_is_unparked_when_its_definition_changes(sqlite_store):
    h = Harness([model("broken", scaling={"min": 1, "max": 2})], store=sqlite_store,
                config=control(park_after=1))
    h.connect(register("node-a"))
    await h.tick()
    [(_, start)] = h.agents.starts()
    h.status("node-a", start.shard_id, "failed", message="bad flag")
    assert explain(h.rec, "broken")["status"] == "parked"
    await h.catalog.scale("broken", max=1, actor="ann")
    await h.tick()
    assert len(h.agents.starts()) == 1
    assert explain(h.rec, "broken")["status"] == "starting"


async def test_restart_replaces_one_replica_at_a_time():
    h = Harness([model("qwen", scaling={"min": 2, "max": 2})])
    h.connect(register("node-a"))
    h.connect(register("node-b"))
    first = sorted(m.shard_id for _, m in await h.start_ready())
    assert sorted(h.rec.restart("qwen")) == first
    await h.tick()
    [(node_id, replacement)] = h.agents.starts()
    assert replacement.shard_id not in first and h.agents.stops() == []
    await h.tick()
    assert h.agents.starts() == []  # the second waits for the first replacement
    h.status(node_id, replacement.shard_id, "ready", port=h.port_for(replacement))
    await h.tick()
    [(_, stop)] = h.agents.stops()
    [(_, second)] = h.agents.starts()
    assert stop.shard_id in first and second.shard_id not in first
    assert sorted(r.id for r in h.replicas.replicas_for("qwen")) != first


async def test_restart_in_place_stops_then_starts():
    h = Harness([model("qwen")])
    h.connect(register("node-a"))
    [(_, first)] = await h.start_ready()
    h.rec.restart("qwen", in_place=True)
    await h.tick()
    [(_, stop)] = h.agents.stops()
    assert stop.shard_id == first.shard_id
    h.status("node-a", first.shard_id, "stopped")
    await h.tick()
    [(_, again)] = h.agents.starts()
    assert again.shard_id != first.shard_id


async def test_restart_replica_replaces_that_one_and_leaves_the_others():
    h = Harness([model("qwen", scaling={"min": 2, "max": 2})])
    h.connect(register("node-a"))
    h.connect(register("node-b"))
    first = sorted(m.shard_id for _, m in await h.start_ready())
    target, other = first
    assert h.rec.restart_replica(target) == "qwen"
    await h.tick()
    [(node_id, replacement)] = h.agents.starts()
    assert replacement.shard_id not in first and h.agents.stops() == []
    h.status(node_id, replacement.shard_id, "ready", port=h.port_for(replacement))
    await h.tick()
    [(stop_node, stop)] = h.agents.stops()
    assert stop.shard_id == target
    h.status(stop_node, target, "stopped")
    await h.tick(5)
    assert h.agents.starts() == [] and h.agents.stops() == []  # the other one is not touched
    assert sorted(r.id for r in h.replicas.replicas_for("qwen")) == sorted([other, replacement.shard_id])


async def test_restart_replica_in_place_stops_it_then_starts_a_new_one():
    h = Harness([model("qwen", scaling={"min": 2, "max": 2})])
    h.connect(register("node-a"))
    h.connect(register("node-b"))
    first = sorted(m.shard_id for _, m in await h.start_ready())
    target, other = first
    h.rec.restart_replica(target, in_place=True)
    await h.tick()
    [(stop_node, stop)] = h.agents.stops()
    assert stop.shard_id == target and h.agents.starts() == []
    h.status(stop_node, target, "stopped")
    await h.tick()
    [(_, again)] = h.agents.starts()
    assert again.shard_id not in first
    assert [r.id for r in h.replicas.replicas_for("qwen")] == [other]  # still serving meanwhile


async def test_restart_replica_refuses_an_unknown_one_and_a_restart_under_way_the_other_way():
    h = Harness([model("qwen", scaling={"min": 2, "max": 2})])
    h.connect(register("node-a"))
    h.connect(register("node-b"))
    first = sorted(m.shard_id for _, m in await h.start_ready())
    with pytest.raises(KeyError):
        h.rec.restart_replica("qwen-nope")
    h.rec.restart("qwen")
    with pytest.raises(ValueError, match="qwen's replicas are already being restarted each with a replacement "
                                         "first .*: restart .* the same way, or once that restart has ended"):
        h.rec.restart_replica(first[0], in_place=True)
    assert h.rec.restart_replica(first[0]) == "qwen"  # the same way: already on the list, not twice
    assert sorted(h.rec.models["qwen"].restarting) == first
    await h.tick()
    [(node_id, replacement)] = h.agents.starts()
    h.status(node_id, replacement.shard_id, "ready", port=h.port_for(replacement))
    await h.tick()
    [(stop_node, stop)] = h.agents.stops()
    h.status(stop_node, stop.shard_id, "stopped")
    with pytest.raises(KeyError):  # gone
        h.rec.restart_replica(stop.shard_id)


async def test_labels_from_the_operator_win_and_a_busy_node_is_not_removed():
    h = Harness([model("qwen", profiles=[{"name": "d", "node_selector": {"llmgw.io/rack": "r9"}}])])
    h.connect(register("node-a", labels={"llmgw.io/rack": "r1"}))
    await h.tick()
    assert h.agents.starts() == []
    h.inventory.set_labels("node-a", {"llmgw.io/rack": "r9"})
    [(_, start)] = await h.start_ready()
    with pytest.raises(ValueError, match="still runs 1 replica"):
        h.rec.remove_node("node-a")
    # Re-registering keeps the operator's label over the agent's.
    running = w.RunningShard(shard_id=start.shard_id, model="qwen", engine="sim", state="ready", port=20000)
    h.connect(register("node-a", labels={"llmgw.io/rack": "r1"}, shards=[running]))
    assert h.inventory.get("node-a").labels == {"llmgw.io/rack": "r9"}
    h.inventory.set_labels("node-a", {"llmgw.io/rack": None})
    assert h.inventory.get("node-a").labels == {"llmgw.io/rack": "r1"}
    h.status("node-a", start.shard_id, "stopped")
    h.rec.remove_node("node-a")
    assert h.inventory.get("node-a") is None


async def test_a_node_lost_while_connected_comes_back_on_a_heartbeat_its_engine_adopted_the_extra_stopped():
    h = Harness([model("qwen")])
    h.connect(register("node-a"))
    [(_, first)] = await h.start_ready()
    h.connect(register("node-b"))
    # node-a's heartbeats are late past the window, its connection open: lost, its replica placed again.
    h.clock.advance(16)
    h.heartbeat("node-b")
    await h.rec.reconcile_once()
    assert h.inventory.get("node-a").state() == "lost"
    [(node_id, second)] = h.agents.starts()
    assert node_id == "node-b"
    h.status("node-b", second.shard_id, "ready", port=h.port_for(second))
    # Its heartbeats resume on the same connection, naming the engine it still runs.
    h.rec.handle("node-a", w.Heartbeat(seq=9, shards=(w.ShardSummary(shard_id=first.shard_id, state="ready"),)))
    assert h.inventory.get("node-a").state() == "ready"
    await h.tick()
    assert h.agents.starts() == []  # adopted, not started a second time
    assert [r.id for r in h.replicas.replicas_for("qwen")] != []
    stopped = [m.shard_id for _, m in h.agents.stops()]
    assert len(stopped) == 1 and stopped[0] in (first.shard_id, second.shard_id)  # one wanted: the extra stops
    kept = {first.shard_id, second.shard_id} - set(stopped)
    assert kept <= {r.id for r in h.replicas.replicas_for("qwen")}
    assert first.shard_id in h.rec.records


async def test_a_lost_node_that_registers_again_keeps_its_engine_and_the_extra_one_stops():
    h = Harness([model("qwen")])
    h.connect(register("node-a"))
    [(_, first)] = await h.start_ready()
    h.connect(register("node-b"))
    h.disconnect("node-a")
    h.clock.advance(16)
    await h.tick()
    assert h.inventory.get("node-a").state() == "lost"
    [(_, second)] = h.agents.starts()
    h.status("node-b", second.shard_id, "ready", port=h.port_for(second))
    running = w.RunningShard(shard_id=first.shard_id, model="qwen", engine="sim", state="ready", port=first.port)
    h.connect(register("node-a", shards=[running]))
    assert h.inventory.get("node-a").state() == "ready"
    await h.tick()
    assert h.agents.starts() == []
    assert len(h.agents.stops()) == 1


async def test_a_lost_node_heard_again_has_what_no_replica_wants_stopped():
    h = Harness([model("qwen")])
    h.connect(register("node-a"))
    [(_, first)] = await h.start_ready()
    h.clock.advance(16)
    await h.rec.reconcile_once()  # no heartbeat: lost
    assert h.inventory.get("node-a").state() == "lost"
    ours = w.ShardSummary(shard_id=first.shard_id, state="ready")
    foreign = w.ShardSummary(shard_id="qwen-9999", state="ready")
    h.rec.handle("node-a", w.Heartbeat(seq=5, shards=(ours, foreign)))
    await h.tick()
    assert h.agents.starts() == []
    assert [m.shard_id for _, m in h.agents.stops()] == ["qwen-9999"]
    assert [r.id for r in h.replicas.replicas_for("qwen")] == [first.shard_id]
