"""Jobs through the admin API's view of a real control plane: a scale followed to done, a standby refuses."""

from __future__ import annotations

import pytest

from llmgw.admin.cluster_api import ClusterNotFound, ClusterUnavailable
from llmgw.admin.cluster_types import ScaleChange
from llmgw.control.admin_cluster import AdminCluster
from llmgw.control.service import ControlPlane, ControlPlaneSlot
from llmgw.router.replicas import ReplicaSet
from llmgw.store import open_store

from .conftest import ENGINES
from .test_service import FakeAgent, server_config, until


async def test_a_scale_through_the_admin_api_is_a_job_followed_to_done(tmp_path):
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    slot = ControlPlaneSlot()
    cluster = AdminCluster(slot)
    replicas = ReplicaSet()
    plane = ControlPlane(server_config(), store, replicas, engines=ENGINES, holder="cp-1")
    agent = FakeAgent([f"127.0.0.1:{plane.config.agent_listen.rsplit(':', 1)[1]}"])
    try:
        await plane.start()
        slot.plane = plane
        assert await plane.leadership.wait_leading(3)
        agent.start()
        await until(lambda: replicas.replicas_for("tiny"), what="a ready replica")
        await until(lambda: plane.jobs.select(state="done"), what="the first start's job to end")
        [boot] = await cluster.jobs(state=None, model=None)
        assert (boot.kind, boot.by, boot.model, boot.state) == ("start", "control-plane", "tiny", "done")

        await cluster.add_model({"name": "more", "engine": "sim", "profiles": [{"name": "d"}],
                                 "scaling": {"min": 0, "max": 2}}, replace=False, actor="ann")
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
        with pytest.raises(ClusterNotFound, match="no job called 'job-nope'"):
            await cluster.job("job-nope")

        await plane.leadership.stop(release=True)
        await until(lambda: not plane.leading, what="leadership to go")
        with pytest.raises(ClusterUnavailable, match="standby"):
            await cluster.jobs(state=None, model=None)
    finally:
        await agent.stop()
        await plane.stop()
        await store.close()
