"""Jobs followed through the real reconciler against fake agents: steps, done, waiting for room, failed."""

from __future__ import annotations

import itertools

from llmgw.control.jobs import Jobs
from llmgw.wire import messages as w

from .conftest import GiB, Harness, control, gpus, model, register


def follow(h: Harness, **options) -> Jobs:
    """Jobs fed by the harness's reconciler, with ids job-1, job-2… and a wall clock that ticks with the harness."""
    counter = itertools.count(1)
    jobs = Jobs(wall_clock=lambda: 1_741_600_000 + h.clock.now, new_id=lambda: f"job-{next(counter)}", **options)
    h.rec.observer = jobs
    return jobs


def texts(job) -> list[str]:
    return [s.text for s in job.steps]


async def test_a_scale_job_runs_through_its_steps_to_done(sqlite_store):
    h = Harness([], store=sqlite_store)
    await h.catalog.add({"name": "qwen", "engine": "sim", "profiles": [{"name": "d"}],
                         "scaling": {"min": 1, "max": 3}}, actor="test")
    jobs = follow(h)
    h.connect(register("node-a"))
    h.connect(register("node-b"))
    await h.start_ready()
    await h.tick()
    [boot] = jobs.select()
    assert (boot.kind, boot.by, boot.state) == ("start", "control-plane", "done")
    assert boot.now == "done: 1 of 1 ready"

    await h.catalog.scale("qwen", min=2, actor="ann")
    job = jobs.start("qwen", "scale", "ann")
    assert job.state == "running" and job.now == "ann scaled qwen"
    await h.tick()
    [(node_id, start)] = h.agents.starts()
    assert job.replicas == {start.shard_id: node_id}
    assert job.now == f"replica {start.shard_id} starting on {node_id}"

    h.rec.handle(node_id, w.WeightsProgress(model="qwen", done_bytes=3 * GiB // 2, total_bytes=5 * GiB))
    assert job.now == f"fetching weights on {node_id}: 1.5 GiB of 5 GiB (30%)"
    h.rec.handle(node_id, w.WeightsProgress(model="qwen", done_bytes=4 * GiB, total_bytes=5 * GiB))
    assert job.now == f"fetching weights on {node_id}: 4 GiB of 5 GiB (80%)"
    h.rec.handle(node_id, w.WeightsProgress(model="qwen", done_bytes=5 * GiB, total_bytes=5 * GiB, state="ready"))
    h.status(node_id, start.shard_id, "starting", message="loading the model")
    assert job.state == "running"
    await h.tick()
    assert job.state == "running"  # started, not ready: not done
    h.status(node_id, start.shard_id, "ready", port=h.port_for(start))
    await h.tick()

    assert job.state == "done" and job.ended is not None
    assert texts(job) == [
        "ann scaled qwen",
        f"replica {start.shard_id} placed on {node_id} (no replica of it there)",
        f"fetching weights on {node_id}: 1.5 GiB of 5 GiB (30%)",
        f"weights ready on {node_id} (5 GiB)",
        f"replica {start.shard_id} starting on {node_id}: loading the model",
        f"replica {start.shard_id} ready on {node_id}",
        "done: 2 of 2 ready",
    ]
    assert [s.at for s in job.steps] == sorted(s.at for s in job.steps)
    assert jobs.latest_for("qwen") is job and [j.id for j in jobs.select()] == [job.id, boot.id]
    assert jobs.select(state="running") == []


async def test_a_job_started_during_a_pass_is_not_ended_by_that_pass():
    h = Harness([model("qwen")])
    jobs = follow(h)
    h.connect(register("node-a"))
    await h.start_ready()
    await h.tick()
    h.rec.observer.pass_begun()  # a pass under way, which read the catalog before the change
    job = jobs.start("qwen", "scale", "ann")
    h.rec.observer.pass_ended(h.rec)
    assert job.state == "running"
    await h.tick()
    assert job.state == "done"


async def test_a_job_with_no_room_says_it_waits_then_runs_when_room_comes():
    h = Harness([model("big", engine="vllm", profiles=[{"name": "d", "gpus": 1}], scaling={"min": 2, "max": 2})])
    jobs = follow(h)
    h.connect(register("gpu-1", gpu=gpus(1)))
    await h.start_ready()
    [job] = jobs.select()
    assert job.kind == "start"
    await h.tick(5)
    assert job.state == "waiting"
    assert job.now.startswith("waiting for room: no node can run it: gpu-1: needs 1 free GPU, has 0")
    await h.tick(5)
    assert texts(job).count(texts(job)[-1]) == 1  # said once, not at every pass

    h.connect(register("gpu-2", gpu=gpus(1)))
    [(node_id, start)] = await h.start_ready()
    assert node_id == "gpu-2" and job.state == "running"
    await h.tick()
    assert job.state == "done" and job.now == "done: 2 of 2 ready"


async def test_a_parked_model_ends_its_job_failed():
    h = Harness([model("broken")], config=control(park_after=2, backoff=(10, 25)))
    jobs = follow(h)
    h.connect(register("node-a"))
    await h.tick()
    [(_, first)] = h.agents.starts()
    h.status("node-a", first.shard_id, "failed", message="unknown model architecture")
    [job] = jobs.select()
    assert job.state == "running"
    assert texts(job)[-2:] == [f"replica {first.shard_id} on node-a ended: unknown model architecture",
                               "1 failed start in a row; trying again in 10 s"]
    await h.tick(1)
    assert job.now.startswith("trying again in 9 s after: node-a: unknown model architecture")

    await h.tick(10)
    [(_, second)] = h.agents.starts()
    h.status("node-a", second.shard_id, "failed", message="unknown model architecture")
    assert job.state == "failed"
    assert job.now.startswith("failed: parked after 2 failed starts in a row; the last, on node-a")

    h.rec.retry("broken")
    retry = jobs.start("broken", "retry", "ann")
    await h.tick()
    [(_, third)] = h.agents.starts()
    assert retry.replicas == {third.shard_id: "node-a"} and retry.state == "running"


async def test_a_restart_is_done_once_every_old_replica_is_replaced():
    h = Harness([model("qwen", scaling={"min": 2, "max": 2})])
    jobs = follow(h)
    h.connect(register("node-a"))
    h.connect(register("node-b"))
    first = sorted(m.shard_id for _, m in await h.start_ready())
    await h.tick()
    old = list(h.rec.restart("qwen"))
    assert sorted(old) == first
    job = jobs.start("qwen", "restart", "ann", old=old)
    assert job.now == f"ann asked to restart 2 replicas: {', '.join(old)}"  # in the order they are replaced
    for _ in range(2):
        await h.tick()
        [(node_id, replacement)] = h.agents.starts()
        h.status(node_id, replacement.shard_id, "ready", port=h.port_for(replacement))
        await h.tick()
        assert job.state == "running"
        [(old_node, stop)] = h.agents.stops()
        h.status(old_node, stop.shard_id, "stopped")
    await h.tick()
    assert job.state == "done" and job.now == "done: 2 replicas restarted; 2 of 2 ready"
    assert sum(t.endswith("stopped on node-a") or t.endswith("stopped on node-b") for t in texts(job)) == 2


async def test_a_replica_restart_is_done_once_that_replica_is_replaced():
    h = Harness([model("qwen", scaling={"min": 2, "max": 2})])
    jobs = follow(h)
    h.connect(register("node-a"))
    h.connect(register("node-b"))
    target, _ = sorted(m.shard_id for _, m in await h.start_ready())
    await h.tick()
    h.rec.restart_replica(target)
    job = jobs.start("qwen", "restart", "ann", old=[target])
    assert job.now == f"ann asked to restart 1 replica: {target}"
    await h.tick()
    [(node_id, replacement)] = h.agents.starts()
    h.status(node_id, replacement.shard_id, "ready", port=h.port_for(replacement))
    await h.tick()
    assert job.state == "running"  # the old one has not stopped yet
    [(old_node, stop)] = h.agents.stops()
    assert stop.shard_id == target
    h.status(old_node, target, "stopped")
    await h.tick()
    assert job.state == "done" and job.now == "done: 1 replica restarted; 2 of 2 ready"


async def test_a_restart_with_no_room_for_the_replacement_waits():
    h = Harness([model("big", engine="vllm", profiles=[{"name": "d", "gpus": 1}])])
    jobs = follow(h)
    h.connect(register("gpu-1", gpu=gpus(1)))
    await h.start_ready()
    job = jobs.start("big", "restart", "ann", old=h.rec.restart("big"))
    await h.tick()
    assert job.state == "waiting" and "gpu-1: needs 1 free GPU, has 0" in job.now


async def test_losing_the_lead_fails_what_runs_and_ended_jobs_are_bounded():
    h = Harness([model("qwen", scaling={"min": 0, "max": 1})])
    jobs = follow(h, keep=3)
    for _ in range(5):
        jobs.start("qwen", "retry", "ann")
        await h.tick()
    assert len(jobs.select()) == 3 and {j.state for j in jobs.select()} == {"done"}
    running = jobs.start("qwen", "scale", "ann")
    h.rec.reset("this control plane is a standby; the leader is cp-2")
    assert running.state == "failed"
    assert running.now == "failed: no longer followed: this control plane is a standby; the leader is cp-2"
    assert len(jobs.select()) == 3 and jobs.select()[0] is running
