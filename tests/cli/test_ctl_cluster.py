"""`llmgw ctl` against a live in-process admin API steering a fake cluster: tables, --json, refusals."""

from __future__ import annotations

import pytest
from ctl_live import ctl, ctl_against, ok, ok_json, refused

from llmgw.admin.testing import FakeCluster, free_port, gpu_node

QWEN = {"name": "qwen-small", "owner": "team:acme/ml", "profiles": [{"engine": "sim", "gpus": 1}],
        "scaling": {"min": 1, "max": 2}}


@pytest.fixture
def live(tmp_path, monkeypatch):
    cluster = FakeCluster(nodes=[gpu_node("gpu-a-01"), gpu_node("gpu-a-02")], models=[QWEN])
    with ctl_against(tmp_path, monkeypatch, cluster=cluster) as server:
        yield server


def test_status_describes_nodes_models_and_replicas(capsys, live):
    status = ok_json(capsys, "status")
    assert status["cluster"]["nodes"] == {"ready": 2}
    assert status["cluster"]["models"] == {"ready": 1} and status["cluster"]["replicas"] == {"ready": 1}
    out = ok(capsys, "status")
    assert "nodes: 2 ready" in out and "models: 1 ready" in out and "h100-80g 1/4 in use" in out


def test_nodes_table_and_one_node(capsys, live):
    out = ok(capsys, "nodes")
    assert out.splitlines()[0].split() == ["NODE", "STATE", "ADDRESS", "GPUS", "CORES", "MEMORY", "REPLICAS", "AGENT",
                                           "ENGINES"]
    assert "gpu-a-02" in out and out.splitlines()[1].endswith("sim 1.0")  # each engine with its version
    assert "engines: sim 1.0" in ok(capsys, "nodes", "gpu-a-01")
    assert "gpu 1: h100-80g" in ok(capsys, "nodes", "gpu-a-01")
    assert ok_json(capsys, "nodes", "gpu-a-01")["replicas"] == ["qwen-small-0001"]


def test_cordon_drain_uncordon_label_and_remove(capsys, live):
    assert ok(capsys, "cordon", "gpu-a-02", "--reason", "fan") == "gpu-a-02: cordoned\n"
    assert live.cluster.calls[-1][0] == "cordon" and live.cluster.calls[-1][1][1] == "fan"
    assert ok_json(capsys, "drain", "gpu-a-02")["draining"] is True
    assert ok(capsys, "uncordon", "gpu-a-02") == "gpu-a-02: ready\n"
    assert ok(capsys, "node", "label", "gpu-a-02", "llmgw.io/rack=r12") == "gpu-a-02: llmgw.io/rack=r12\n"
    assert ok(capsys, "node", "label", "gpu-a-02", "llmgw.io/rack-") == "gpu-a-02: no labels\n"
    assert "removed" in ok(capsys, "node", "remove", "gpu-a-02")
    # The server's refusal, word for word, exit 2.
    assert refused(capsys, "node", "remove", "gpu-a-01") == "gpu-a-01 still runs 1 replica(s); drain it first"
    assert refused(capsys, "cordon", "gpu-z") == "no node called 'gpu-z' is known"


def test_models_scale_changes_what_runs(capsys, live):
    table = ok(capsys, "models")
    assert table.splitlines()[1].split()[:4] == ["qwen-small", "ready", "1/1", "1"]
    assert "concurrency: 64" in ok(capsys, "models", "qwen-small")
    out = ok(capsys, "model", "scale", "qwen-small", "--min", "2")
    assert out == ("qwen-small: scaled; ready, 2/2 ready (min 2, max 2)\n"
                   "  job job-1: `llmgw ctl jobs job-1` follows it\n")
    assert len(ok_json(capsys, "replicas")["replicas"]) == 2
    assert len(ok(capsys, "replicas", "--model", "qwen-small").splitlines()) == 3
    assert refused(capsys, "model", "scale", "qwen-small", "--min", "5") == \
        "scaling of qwen-small: min: 5 is more than max (2)"
    assert refused(capsys, "model", "scale", "qwen-small").startswith("ctl model scale: give --min")


def test_model_add_restart_remove_from_a_file(capsys, live, tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text("name: tiny\nprofiles:\n  - engine: sim\nscaling: {min: 1, max: 1}\n")
    assert ok(capsys, "model", "add", str(spec)).startswith("tiny: added; ready")
    assert "already" in refused(capsys, "model", "add", str(spec))
    assert ok(capsys, "model", "add", str(spec), "--replace").startswith("tiny: added")
    assert ok(capsys, "model", "restart", "tiny", "--in-place").startswith("tiny: restarting tiny-")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nprofiles: [{gpus: two}]\n")
    assert "profiles[0].gpus: expected an integer, got 'two'" in refused(capsys, "model", "add", str(bad))
    assert ok(capsys, "model", "remove", "tiny").startswith("tiny: removed")
    assert "server.yaml" in refused(capsys, "model", "remove", "qwen-small")


def test_replica_restart_restarts_that_one_and_names_its_job(capsys, live):
    out = ok(capsys, "replica", "restart", "qwen-small-0001", "--in-place")
    assert out == ("qwen-small: restarting qwen-small-0001\n"
                   "  job job-1: `llmgw ctl jobs job-1` follows it\n")
    method, (replica, in_place, _actor) = live.cluster.calls[-1]
    assert (method, replica, in_place) == ("restart_replica", "qwen-small-0001", True)
    answer = ok_json(capsys, "replica", "restart", "qwen-small-0001")
    assert answer == {"model": "qwen-small", "replicas": ["qwen-small-0001"], "job": "job-2"}
    assert live.cluster.calls[-1][1][1] is False
    assert refused(capsys, "replica", "restart", "qwen-small-9999").startswith(
        "no replica called 'qwen-small-9999' runs on this cluster")


def test_explain_placement(capsys, live):
    ok(capsys, "cordon", "gpu-a-02")
    out = ok(capsys, "explain-placement", "qwen-small")
    assert "qwen-small (standard, file): ready" in out
    assert "the next replica now: on gpu-a-01" in out and "gpu-a-02: cordoned" in out
    assert ok_json(capsys, "explain-placement", "qwen-small")["next_placement"]["placed_on"] == "gpu-a-01"


def test_without_a_cluster_the_501_is_printed(capsys, tmp_path, monkeypatch):
    with ctl_against(tmp_path, monkeypatch) as server:
        code, _, err = ctl(capsys, "nodes")
        assert code == 1 and "runs no scheduler" in err
        assert "scheduler: this control plane runs no scheduler" in ok(capsys, "status")


def test_an_unreachable_server_is_one_line_exit_1(capsys, monkeypatch):
    monkeypatch.setenv("LLMGW_ADMIN_TOKEN", "x")
    code, _, err = ctl(capsys, "status", "--admin", f"http://127.0.0.1:{free_port()}")
    lines = [line for line in err.splitlines() if "level=" not in line]
    assert code == 1 and len(lines) == 1 and lines[0].startswith("cannot reach the admin API at http://127.0.0.1:")


def test_token_from_a_file_and_a_wrong_one(capsys, live, tmp_path, monkeypatch):
    monkeypatch.delenv("LLMGW_ADMIN_TOKEN")
    token = tmp_path / "token"
    token.write_text(live.TOKEN + "\n")
    assert ok_json(capsys, "status", "--token-file", str(token))["store"] == "sqlite"
    token.write_text("wrong\n")
    assert "the admin token is wrong" in refused(capsys, "status", "--token-file", str(token))
    message = refused(capsys, "status", "--token-file", str(tmp_path / "none"))
    assert message.startswith("no admin token:") and "LLMGW_ADMIN_TOKEN" in message


def test_changes_are_audited_as_ctl_with_the_actor(capsys, live):
    ok(capsys, "cordon", "gpu-a-02", "--actor", "ann")
    [event] = live.run(live.store.list_audit(action="nodes.cordon"))
    assert event.actor == "ann" and event.detail["via"] == "ctl"


def test_model_retry_starts_a_parked_model_again_and_is_audited(capsys, live):
    assert ok(capsys, "model", "retry", "qwen-small").startswith("qwen-small: retried; ")
    method, (name, _actor) = live.cluster.calls[-1]
    assert (method, name) == ("retry_model", "qwen-small")
    assert ok_json(capsys, "model", "retry", "qwen-small")["model"]["name"] == "qwen-small"
    assert "no model called 'nope'" in refused(capsys, "model", "retry", "nope")
