"""The admin API's view of the control plane: shapes, refusals, and no audit events of its own."""

from __future__ import annotations

import pytest

from llmgw.admin.cluster_api import (
    Cluster,
    ClusterConflict,
    ClusterInvalid,
    ClusterNotFound,
    ClusterUnavailable,
)
from llmgw.admin.cluster_types import ScaleChange
from llmgw.admin.fields import UNSET
from llmgw.control.admin_cluster import AdminCluster
from llmgw.control.service import ControlPlane, ControlPlaneSlot
from llmgw.router.replicas import ReplicaSet
from llmgw.store import open_store

from .conftest import ENGINES
from .test_service import FakeAgent, server_config, until


async def test_the_admin_api_steers_the_control_plane(tmp_path):
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    slot = ControlPlaneSlot()
    cluster = AdminCluster(slot)
    assert isinstance(cluster, Cluster)
    with pytest.raises(ClusterUnavailable, match="not running"):
        await cluster.nodes()
    replicas = ReplicaSet()
    plane = ControlPlane(server_config(), store, replicas, engines=ENGINES, holder="cp-1")
    agent = FakeAgent([f"127.0.0.1:{plane.config.agent_listen.rsplit(':', 1)[1]}"])
    try:
        await plane.start()
        slot.plane = plane
        assert await plane.leadership.wait_leading(3)
        agent.start()
        await until(lambda: replicas.replicas_for("tiny"), what="a ready replica")

        status = await cluster.status()
        assert status.leadership.leading and status.leadership.self_name == "cp-1"
        [node] = await cluster.nodes()
        assert node.id == "node-a" and node.state == "ready" and len(node.replicas) == 1
        [model] = await cluster.models()
        assert (model.name, model.status, model.ready, model.wanted, model.origin) == ("tiny", "ready", 1, 1, "file")
        [replica] = await cluster.replicas()
        assert replica.model == "tiny" and replica.state == "ready"

        node = await cluster.cordon("node-a", reason="fan", actor="ann")
        assert node.state == "cordoned" and node.cordon_reason == "fan"
        node = await cluster.set_labels("node-a", {"llmgw.io/rack": "r1"}, actor="ann")
        assert node.labels == {"llmgw.io/rack": "r1"}
        node = await cluster.uncordon("node-a", actor="ann")
        assert node.state == "ready"
        with pytest.raises(ClusterNotFound):
            await cluster.cordon("ghost", reason="", actor="ann")
        with pytest.raises(ClusterConflict, match="still runs 1 replica"):
            await cluster.remove_node("node-a", actor="ann")

        added = await cluster.add_model({"name": "more", "engine": "sim", "profiles": [{"name": "d"}],
                                         "scaling": {"min": 0, "max": 1}}, replace=False, actor="ann")
        assert added.model.origin == "store" and added.spec["engine"] == "sim"
        with pytest.raises(ClusterConflict, match="already in the catalog"):
            await cluster.add_model({"name": "more", "engine": "sim", "profiles": [{"name": "d"}]},
                                    replace=False, actor="ann")
        with pytest.raises(ClusterInvalid) as bad:
            await cluster.add_model({"name": "x", "engine": "nope", "profiles": [{"name": "d"}]},
                                    replace=False, actor="ann")
        assert bad.value.problems and "no engine called 'nope'" in bad.value.problems[0]
        with pytest.raises(ClusterConflict, match="declared in server.yaml"):
            await cluster.remove_model("tiny", actor="ann")
        scaled = await cluster.scale_model("more", ScaleChange(min=UNSET, max=2, on_demand=UNSET,
                                                               idle_timeout="5m"), actor="ann")
        assert (scaled.model.scaling.max, scaled.model.scaling.idle_timeout) == (2, "5m")
        with pytest.raises(ClusterInvalid, match="more than max"):
            await cluster.scale_model("more", ScaleChange(min=3), actor="ann")
        await cluster.remove_model("more", actor="ann")

        explanation = await cluster.explain_placement("tiny")
        assert explanation.model.status == "ready" and explanation.next_placement is not None
        restart = await cluster.restart_model("tiny", in_place=False, actor="ann")
        assert restart.replicas == [replica.id]
        await until(lambda: [r.id for r in replicas.replicas_for("tiny")] not in ([], [replica.id]),
                    what="the restarted replica")
        # The admin API records its own audit events: the control plane wrote none.
        assert [e for e in await store.list_audit() if e.actor == "ann"] == []
    finally:
        await agent.stop()
        await plane.stop()
        await store.close()


async def test_the_admin_api_holds_and_releases_a_domain_on_the_real_control_plane(tmp_path):
    from llmgw.admin.facility_types import HoldCreate

    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    slot = ControlPlaneSlot()
    cluster = AdminCluster(slot)
    plane = ControlPlane(server_config(), store, ReplicaSet(), engines=ENGINES, holder="cp-1")
    try:
        await plane.start()
        slot.plane = plane
        assert await plane.leadership.wait_leading(3)
        hold = await cluster.hold(HoldCreate(domain="rack:r1", reason="PDU swap", until="2h"), actor="ann")
        assert hold.domain == "rack:r1" and hold.until.endswith("+00:00") and hold.active
        report = await cluster.facility()
        assert [h.domain for h in report.holds] == ["rack:r1"] and report.holds[0].reason == "PDU swap"
        with pytest.raises(ClusterInvalid, match="^domain: 'shelf:1' is not a domain"):
            await cluster.hold(HoldCreate(domain="shelf:1", reason="x"), actor="ann")
        with pytest.raises(ClusterInvalid, match="^until: 'soon' is not a time"):
            await cluster.hold(HoldCreate(domain="rack:r1", reason="x", until="soon"), actor="ann")
        released = await cluster.release("rack:r1", actor="ann")
        assert released.domain == "rack:r1" and not released.active
        with pytest.raises(ClusterNotFound, match="rack:r1 is not held"):
            await cluster.release("rack:r1", actor="ann")
    finally:
        await plane.stop()
        await store.close()
