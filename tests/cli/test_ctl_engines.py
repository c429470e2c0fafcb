"""`llmgw ctl engines` and `llmgw ctl engine install` against a live admin API over a fake cluster."""

from __future__ import annotations

import json

import pytest
from ctl_live import ctl, ctl_against

from llmgw.admin.testing import FakeCluster, gpu_node


@pytest.fixture
def live(tmp_path, monkeypatch):
    cluster = FakeCluster(nodes=[gpu_node("gpu-a-01"), gpu_node("gpu-a-02")])
    with ctl_against(tmp_path, monkeypatch, cluster=cluster) as server:
        yield server


def test_engines_lists_each_nodes_engines_with_versions(capsys, live):
    code, out, err = ctl(capsys, "engines")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NODE", "ENGINE", "VERSION", "STATE", "WHERE"]
    assert [line.split()[:4] for line in lines[1:]] == [["gpu-a-01", "sim", "1.0", "installed"],
                                                       ["gpu-a-02", "sim", "1.0", "installed"]]
    code, out, _ = ctl(capsys, "engines", "gpu-a-02", "--json")
    assert [r["node"] for r in json.loads(out)["engines"]] == ["gpu-a-02"]
    code, _, err = ctl(capsys, "engines", "gpu-z")
    assert code != 0 and "no node called 'gpu-z'" in err


def test_engine_install_follows_its_job_and_the_node_then_has_it(capsys, live):
    code, out, err = ctl(capsys, "engine", "install", "gpu-a-01", "vllm==0.9.1", "--actor", "ops@example.com")
    assert code == 0, err
    assert out.splitlines()[0] == "gpu-a-01: installing vllm 0.9.1; job job-1"
    assert "job-1: engine vllm on gpu-a-01" in out and "done" in out
    assert live.cluster.calls[-1] == ("install_engine", ("gpu-a-01", "vllm", "0.9.1", "ops@example.com"))
    code, out, _ = ctl(capsys, "nodes", "gpu-a-01")
    assert "engines: sim 1.0, vllm 0.9.1" in out
    audit = json.loads(ctl(capsys, "audit", "--json")[1])
    assert any(e["action"] == "nodes.engine-install" and e["target"] == "node:gpu-a-01" for e in audit["events"])


def test_engine_install_refuses_a_malformed_engine(capsys, live):
    code, _, err = ctl(capsys, "engine", "install", "gpu-a-01", "vllm==")
    assert code == 2 and "give an engine, like vllm or vllm==0.9.1" in err
    assert not live.cluster.calls


def test_engine_install_no_follow_prints_the_job_and_returns(capsys, live):
    code, out, err = ctl(capsys, "engine", "install", "gpu-a-02", "llamacpp", "--no-follow", "--json")
    assert code == 0, err
    started = json.loads(out)
    assert (started["node"], started["engine"], started["version"]) == ("gpu-a-02", "llamacpp", "")
    code, out, _ = ctl(capsys, "engine", "install", "gpu-a-02", "vllm", "--no-follow")
    assert out == "gpu-a-02: installing vllm (the newest the index offers); job job-2\n"
