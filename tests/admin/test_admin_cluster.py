"""The cluster endpoints: 501 without a cluster, and against a fake one implementing the protocol."""

from __future__ import annotations

import pytest

from llmgw.admin.cluster_api import Cluster
from llmgw.admin.routes import ROUTES
from llmgw.admin.testing import FakeCluster, gpu_node

# Join codes live in the store and need no control plane in the process: they answer without one.
CLUSTER_ROUTES = [r for r in ROUTES if r.tag == "cluster" and r.path != "/summary"
                  and not r.path.startswith("/nodes/join-codes")]


def test_the_fake_cluster_implements_the_protocol():
    assert isinstance(FakeCluster(), Cluster)


REVISION_BODIES = {
    ("POST", "/models/{name}/update"): {"to": "v2"},
    ("POST", "/models/{name}/canary"): {"to": "v2", "weight": "10%"},
    ("PATCH", "/models/{name}/canary"): {"weight": 20},
    ("POST", "/models/{name}/eval"): {"suite": {"name": "s"}},
    ("POST", "/model-serve"): {"source": "acme/tiny-GGUF"},
    ("POST", "/upgrade"): {"release": "0.2.0"},
}


@pytest.mark.parametrize("route", CLUSTER_ROUTES, ids=lambda r: f"{r.method} {r.path}")
async def test_without_a_cluster_each_cluster_endpoint_is_501_naming_what_is_missing(bare, route):
    path = route.path.format(node="gpu-a-01", name="qwen-small", job="job-1", replica="qwen-small-0001",
                             domain="rack:r1")
    body = {"name": "x", "profiles": [{"engine": "sim"}]} if route.path == "/models" and route.method == "POST" \
        else ({"labels": {}} if route.path.endswith("/labels") else
              {"engine": "vllm"} if route.path.endswith("/engines") and route.method == "POST" else
              {"domain": "rack:r1", "reason": "PDU swap"} if route.path == "/facility/holds" else
              REVISION_BODIES.get((route.method, route.path), {}))
    error = await bare.refused(route.method, path, body, status=501)
    assert "runs no scheduler" in error


async def test_the_summary_answers_without_a_cluster_and_says_why(bare):
    summary = await bare.call("GET", "/summary")
    assert summary["cluster"] is None and "no scheduler" in summary["scheduler"]
    assert summary["store"] == "sqlite"


async def test_summary_counts_the_fleet(admin):
    summary = await admin.call("GET", "/summary")
    assert summary["scheduler"] == "running"
    cluster = summary["cluster"]
    assert cluster["nodes"] == {"ready": 1} and cluster["replicas"] == {"ready": 1}
    assert cluster["gpus"] == [{"class": "h100-80g", "total": 2, "healthy": 2, "in_use": 1}]
    assert cluster["models"] == {"ready": 1} and cluster["leading"] is True


async def test_nodes_list_get_cordon_drain_uncordon_labels_remove(make_admin):
    cluster = FakeCluster(nodes=[gpu_node("gpu-a-01"), gpu_node("gpu-a-02")], models=[])
    admin = await make_admin(cluster)
    nodes = (await admin.call("GET", "/nodes"))["nodes"]
    assert [n["id"] for n in nodes] == ["gpu-a-01", "gpu-a-02"]
    assert (await admin.call("GET", "/nodes/gpu-a-02"))["gpus"][0]["class"] == "h100-80g"
    assert "no node called 'gpu-z'" in await admin.refused("GET", "/nodes/gpu-z", status=404)
    hdr = {"Content-Type": "application/json", "Authorization": "Bearer s3cret-admin-token-for-tests",
           "X-Llmgw-Actor": "ann", "X-Llmgw-Via": "ctl"}
    node = await admin.call("POST", "/nodes/gpu-a-01/cordon", {"reason": "bad fan"}, headers=hdr)
    assert node["state"] == "cordoned" and node["cordon_reason"] == "bad fan"
    assert cluster.calls[-1] == ("cordon", ("gpu-a-01", "bad fan", "ann"))
    assert (await admin.call("POST", "/nodes/gpu-a-01/drain", {}))["draining"] is True
    assert (await admin.call("POST", "/nodes/gpu-a-01/uncordon"))["state"] == "ready"
    node = await admin.call("PATCH", "/nodes/gpu-a-01/labels", {"labels": {"llmgw.io/rack": "r12"}})
    assert node["labels"] == {"llmgw.io/rack": "r12"}
    node = await admin.call("PATCH", "/nodes/gpu-a-01/labels", {"labels": {"llmgw.io/rack": None}})
    assert node["labels"] == {}
    await admin.call("DELETE", "/nodes/gpu-a-02")
    assert [n["id"] for n in (await admin.call("GET", "/nodes"))["nodes"]] == ["gpu-a-01"]
    events = await admin.store.list_audit(action="nodes.*")
    assert [e.action for e in reversed(events)] == [
        "nodes.cordon", "nodes.drain", "nodes.uncordon", "nodes.labels", "nodes.labels", "nodes.remove"]
    first = events[-1]
    assert first.actor == "ann" and first.target == "node:gpu-a-01"
    assert first.detail == {"via": "ctl", "outcome": "ok", "fields": {"node": "gpu-a-01", "reason": "bad fan"}}


async def test_a_model_is_listed_shown_with_defaults_scaled_and_explained(admin):
    models = (await admin.call("GET", "/models"))["models"]
    assert [(m["name"], m["status"], m["ready"], m["class"]) for m in models] == [
        ("qwen-small", "ready", 1, "standard")]
    detail = await admin.call("GET", "/models/qwen-small")
    assert detail["spec"]["concurrency"] == 64  # a default filled in
    assert detail["spec"]["profiles"][0]["gpus"] == 1
    scaled = await admin.call("POST", "/models/qwen-small/scale", {"min": 2})
    assert scaled["model"]["scaling"] == {"min": 2, "max": 2, "on_demand": False, "idle_timeout": "30m"}
    assert len(scaled["replicas"]) == 2
    assert len((await admin.call("GET", "/replicas"))["replicas"]) == 2
    error = await admin.refused("POST", "/models/qwen-small/scale", {"min": 3}, status=400)
    assert error == "scaling of qwen-small: min: 3 is more than max (2)"
    explained = await admin.call("GET", "/models/qwen-small/placement")
    assert explained["next_placement"]["placed_on"] == "gpu-a-01"
    assert explained["model"]["name"] == "qwen-small"
    assert "no model called 'nope'" in await admin.refused("GET", "/models/nope/placement", status=404)


async def test_a_model_is_added_replaced_restarted_and_removed(admin):
    spec = {"name": "tiny", "profiles": [{"engine": "sim"}], "scaling": {"min": 1, "max": 1}}
    added = await admin.call("POST", "/models", spec, status=201)
    assert added["model"]["origin"] == "store"
    error = await admin.refused("POST", "/models", spec, status=409)
    assert "already" in error
    await admin.call("POST", "/models?replace=true", spec, status=201)
    error = await admin.refused("POST", "/models", {"name": "bad", "profiles": [{"gpus": "two"}]}, status=400)
    assert "profiles[0].gpus: expected an integer, got 'two'" in error
    restarted = await admin.call("POST", "/models/tiny/restart", {"in_place": True})
    assert restarted == {"model": "tiny", "replicas": ["tiny-0002"]} or restarted["model"] == "tiny"
    assert "server.yaml" in await admin.refused("DELETE", "/models/qwen-small", status=409)
    await admin.call("DELETE", "/models/tiny")
    assert [m["name"] for m in (await admin.call("GET", "/models"))["models"]] == ["qwen-small"]


async def test_one_replica_is_restarted_and_an_unknown_one_is_404_naming_it(admin):
    hdr = {"Content-Type": "application/json", "Authorization": "Bearer s3cret-admin-token-for-tests",
           "X-Llmgw-Actor": "ann", "X-Llmgw-Via": "console"}
    restarted = await admin.call("POST", "/replicas/qwen-small-0001/restart", {"in_place": True}, headers=hdr)
    assert (restarted["model"], restarted["replicas"]) == ("qwen-small", ["qwen-small-0001"])
    job = await admin.call("GET", f"/jobs/{restarted['job']}")
    assert (job["kind"], job["model"], job["by"]) == ("restart", "qwen-small", "ann")
    assert admin.cluster.calls[-1] == ("restart_replica", ("qwen-small-0001", True, "ann"))
    error = await admin.refused("POST", "/replicas/qwen-small-9999/restart", {}, status=404)
    assert "no replica called 'qwen-small-9999'" in error
    refused, done = await admin.store.list_audit(action="replicas.restart")
    assert (done.actor, done.target) == ("ann", "replica:qwen-small-0001")
    assert done.detail == {"via": "console", "outcome": "ok",
                           "fields": {"replica": "qwen-small-0001", "in_place": True}}
    assert refused.target == "replica:qwen-small-9999" and refused.detail["status"] == 404


async def test_cluster_refusals_are_recorded_with_their_reason(admin):
    await admin.refused("POST", "/models/qwen-small/scale", {"min": 9}, status=400)
    [event] = await admin.store.list_audit(action="models.scale")
    assert event.detail["outcome"] == "refused" and event.detail["status"] == 400
    assert event.detail["reason"] == "scaling of qwen-small: min: 9 is more than max (2)"
    assert event.detail["fields"] == {"name": "qwen-small", "min": 9}


async def test_retry_starts_a_model_again_as_a_job_and_is_audited(admin):
    hdr = {"Content-Type": "application/json", "Authorization": "Bearer s3cret-admin-token-for-tests",
           "X-Llmgw-Actor": "ann"}
    detail = await admin.call("POST", "/models/qwen-small/retry", headers=hdr)
    assert detail["model"]["name"] == "qwen-small"
    assert admin.cluster.calls[-1] == ("retry_model", ("qwen-small", "ann"))
    assert "no model called 'nope'" in await admin.refused("POST", "/models/nope/retry", status=404)
    refused, done = await admin.store.list_audit(action="models.retry")
    assert (done.actor, done.target) == ("ann", "model:qwen-small")
    assert refused.target == "model:nope" and refused.detail["status"] == 404
