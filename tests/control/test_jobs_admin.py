"""Jobs through the admin API's view of a real control plane: a scale and a replica's restart followed to done,
a standby refuses."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from llmgw.admin.cluster_api import ClusterConflict, ClusterNotFound, ClusterUnavailable
from llmgw.admin.cluster_types import ScaleChange
from llmgw.control.admin_cluster import AdminCluster
from llmgw.control.service import ControlPlane, ControlPlaneSlot
from llmgw.router.replicas import ReplicaSet
from llmgw.store import open_store
from llmgw.wire import messages as w

from .conftest import ENGINES
from .test_service import FakeAgent, server_config, until


@contextlib.asynccontextmanager
async def leading_plane(tmp_path, agent_class) -> AsyncIterator[tuple[ControlPlane, AdminCluster, ReplicaSet]]:
    """A control plane leading on its own store, the admin API's view of it, and an agent with a ready
    replica of `tiny`; all stopped afterwards."""
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    slot = ControlPlaneSlot()
    replicas = ReplicaSet()
    plane = ControlPlane(server_config(), store, replicas, engines=ENGINES, holder="cp-1")
    agent = agent_class([f"127.0.0.1:{plane.config.agent_listen.rsplit(':', 1)[1]}"])
    try:
        await plane.start()
        slot.plane = plane
        assert await plane.leadership.wait_leading(3)
        agent.start()
        await until(lambda: replicas.replicas_for("tiny"), what="a ready replica")
        yield plane, AdminCluster(slot), replicas
    finally:
        await agent.stop()
        await plane.stop()
        await store.close()


async def test_a_scale_through_the_admin_api_is_a_job_followed_to_done(tmp_path):
    async with leading_plane(tmp_path, FakeAgent) as (plane, cluster, replicas):
        await until(lambda: plane.jobs.select(state="done"), what="the first start's job to end")
        [boot] = await cluster.jobs(state=None, model=None)
        assert (boot.kind, boot.by, boot.model, boot.state) == ("start", "control-plane", "tiny", "done")

        added = await cluster.add_model({"name": "more", "engine": "sim", "profiles": [{"name": "d"}],
                                         "scaling": {"min": 0, "max": 2}}, replace=False, actor="ann")
        # The add's job ends at the next pass's end; a scale before that would be what it measures.
        await until(lambda: plane.jobs.get(added.job).state == "done", what="the add's job to end")
        detail = await cluster.scale_model("more", ScaleChange(min=2), actor="ann")
        job_id = detail.job
        assert job_id is not None
        await until(lambda: plane.jobs.get(job_id).state == "done", what="the scale's job to end")
        job = await cluster.job(job_id)
        assert (job.kind, job.by, job.model, job.now) == ("scale", "ann", "more", "done: 2 of 2 ready")
        assert job.ended is not None and len(job.replicas) == 2
        texts = [s.text for s in job.steps]
        assert texts[0] == "ann scaled more" and sum(t.startswith("replica ") and " ready on node-a" in t
                                                       for t in texts) == 2
        added = [j for j in await cluster.jobs(state="done", model="more") if j.kind == "add"]
        assert len(added) == 1 and added[0].now == "done: no replica is wanted now"

        restart = await cluster.restart_model("tiny", in_place=True, actor="ann")
        assert restart.job is not None and (await cluster.job(restart.job)).kind == "restart"
        # This fake agent never says a stop is done: the old replica stays, stopping, and is not restarted.
        [old] = restart.replicas
        await until(lambda: not plane.reconciler.records[old].live, what="the old replica to be stopping")
        with pytest.raises(ClusterConflict, match=f"{old} is already stopping"):
            await cluster.restart_replica(old, in_place=True, actor="ann")
        with pytest.raises(ClusterNotFound, match="no job called 'job-nope'"):
            await cluster.job("job-nope")

        await plane.leadership.stop(release=True)
        await until(lambda: not plane.leading, what="leadership to go")
        with pytest.raises(ClusterUnavailable, match="standby"):
            await cluster.jobs(state=None, model=None)


class StoppingAgent(FakeAgent):
    """The fake agent, which also says every StopShard is done at once (so a restart can end)."""

    async def on_session(self, session) -> None:
        self.welcomes.append(session.url)
        async for message in session:
            if isinstance(message, w.StartShard):
                self.shards[message.shard_id] = message
                self.ports[message.shard_id] = message.port or 20000 + len(self.ports)
                await session.send(w.ShardStatus(shard_id=message.shard_id, state="ready", model=message.model,
                                                 port=self.ports[message.shard_id], command_id=message.command_id))
            elif isinstance(message, w.StopShard) and message.shard_id in self.shards:
                model = self.shards.pop(message.shard_id).model
                await session.send(w.ShardStatus(shard_id=message.shard_id, state="stopped", model=model,
                                                 command_id=message.command_id))


async def test_one_replica_restarted_through_the_admin_api_is_a_restart_job_followed_to_done(tmp_path):
    async with leading_plane(tmp_path, StoppingAgent) as (plane, cluster, replicas):
        [old] = [r.id for r in replicas.replicas_for("tiny")]

        result = await cluster.restart_replica(old, in_place=False, actor="ann")
        assert (result.model, result.replicas) == ("tiny", [old]) and result.job is not None
        assert plane.jobs.get(result.job).old == (old,)
        await until(lambda: not plane.jobs.get(result.job).active, what="the restart's job to end")
        job = await cluster.job(result.job)
        assert (job.kind, job.by, job.model, job.state) == ("restart", "ann", "tiny", "done")
        assert job.steps[0].text == f"ann asked to restart 1 replica: {old}"
        assert job.now == "done: 1 replica restarted; 1 of 1 ready"
        [new] = [r.id for r in replicas.replicas_for("tiny")]
        assert new != old and job.replicas == [new]

        with pytest.raises(ClusterNotFound, match=f"no replica called '{old}' runs on this cluster"):
            await cluster.restart_replica(old, in_place=False, actor="ann")
        # A restart of its model, with a replacement first, is under way: in place is refused until it ends.
        await cluster.restart_model("tiny", in_place=False, actor="ann")
        with pytest.raises(ClusterConflict, match="tiny's replicas are already being restarted"):
            await cluster.restart_replica(new, in_place=True, actor="ann")
        # The admin API records the audit events: the control plane wrote none.
        assert [e for e in await plane.store.list_audit() if e.actor == "ann"] == []
        # Called by itself (not for the admin API), the control plane records its own.
        assert await plane.restart_replica(new, actor="bob") == "tiny"
        [event] = [e for e in await plane.store.list_audit() if e.actor == "bob"]
        assert (event.action, event.target, event.detail) == (
            "replicas.restart", f"replica:{new}", {"in_place": False, "model": "tiny"})
