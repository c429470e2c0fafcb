"""Two control plane pods from one set of manifests (--replicas 2), run here without Kubernetes on one PostgreSQL:
they share the Secrets' token and key-hash secret, one leads through the store's lease, the other stands by and is
ready too once it serves the leader's replicas; the leader killed, the standby leads and the agent outside, which
lists both agent Services' addresses, follows it, its engine kept. The leader sends the agent each pod's own
agent Service address as agents outside dial it (agent_advertise, set per pod by the StatefulSet's command), not
the pods' names inside the cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.up.procs import descendants
from tests.kubernetes.kube_files import LocalPod, kube
from tests.kubernetes.test_pod_locally_slow import ENV, llmgw, status_of, wait_for
from tests.processes import end_processes

pytestmark = pytest.mark.slow


def _kept_control_planes(state: Path) -> list[str]:
    try:
        return sorted(json.loads((state / "control_planes.json").read_text())["addresses"])
    except (OSError, ValueError, KeyError):
        return []


def test_two_control_planes_share_the_secrets_and_hand_the_lease_over(tmp_path, postgres_server):
    (tmp_path / "dsn").write_text(postgres_server.dsn(postgres_server.create_database()) + "\n")
    out = tmp_path / "manifests"
    # The agent Services' address is "localhost" here, so what the control planes advertise is told apart from
    # their agent_listen (127.0.0.1) and from the agent's own list (which dials 127.0.0.1).
    assert kube(out, "--store", "external", "--dsn-file", str(tmp_path / "dsn"), "--agent-host", "localhost",
                "--agent-service", "NodePort") == 0
    pods = [LocalPod(out, tmp_path / f"pod-{i}", index=i, control="{reconcile_interval: 1s, lease_ttl: 3s}")
            for i in (0, 1)]
    advertised = {f"localhost:{30743 + i}": f"localhost:{pods[i].ports['agents']}" for i in (0, 1)}
    for pod in pods:
        pod.advertise_here(advertised)
    assert all(p.init.returncode == 0 for p in pods)
    logs = [tmp_path / f"server-{i}.log" for i in (0, 1)]
    procs: list[subprocess.Popen] = []
    engines: list[int] = []
    try:
        for pod, log in zip(pods, logs):
            procs.append(subprocess.Popen(pod.command, env=pod.env, stdout=open(log, "wb"), stderr=subprocess.STDOUT))
        for pod, log in zip(pods, logs):
            wait_for(lambda: status_of(pod.probe("startupProbe")) == 200, 90, "the startup probe", log)
        wait_for(lambda: sorted(status_of(p.url("/leader")) for p in pods) == [200, 503], 60, "one leader", logs[0])
        leader = 0 if status_of(pods[0].url("/leader")) == 200 else 1
        standby = 1 - leader

        # The agent lists both control planes, as nodes/agent-control-planes.yaml says: one NodePort each.
        planes = [line.split("- ", 1)[1] for line in (out / "nodes" / "agent-control-planes.yaml").read_text()
                  .splitlines() if line.startswith("  - ")]
        assert planes == ["https://localhost:30743", "https://localhost:30744"]
        here = [p.replace(f"localhost:{30743 + i}", f"127.0.0.1:{pods[i].ports['agents']}") for i, p in enumerate(planes)]
        assert llmgw("ctl", "cert", "issue-node", "gpu01", "--dir", str(out / "pki"), "--out",
                     str(tmp_path / "n1")).returncode == 0
        (tmp_path / "agent.yaml").write_text(json.dumps({
            "node_id": "gpu01", "engine_host": "127.0.0.1", "engine_user": "", "control_planes": here,
            "tls": {k: str(tmp_path / "n1" / f) for k, f in
                    (("cert", "node.pem"), ("key", "node-key.pem"), ("ca", "ca.pem"))},
            "state_dir": str(tmp_path / "agent"), "weights_dir": str(tmp_path / "agent" / "w"),
            "engines_dir": str(tmp_path / "agent" / "e"),
        }))
        agent_log = tmp_path / "agent.log"
        procs.append(subprocess.Popen([sys.executable, "-m", "llmgw", "agent", "--config", str(tmp_path / "agent.yaml")],
                                      env=ENV, stdout=open(agent_log, "wb"), stderr=subprocess.STDOUT))
        # The standby's admin API takes the model too: both read the one token from the Secret.
        added = llmgw("ctl", "model", "add", "-", *pods[standby].admin(),
                      input="name: tiny\nengine: sim\nprofiles: [{name: cpu}]\nscaling: {min: 1, max: 1}\n")
        assert added.returncode == 0, added.stderr
        for pod in pods:  # the standby is ready too, serving the leader's replicas
            wait_for(lambda: status_of(pod.probe("readinessProbe")) == 200, 120, "both ready", agent_log)
        engines = descendants(procs[2].pid)
        assert engines
        # The leader sent the agent both pods' advertised addresses, which the agent now dials first.
        told = sorted(f"wss://{address}/agent/v1" for address in advertised.values())
        wait_for(lambda: _kept_control_planes(tmp_path / "agent") == told, 30, "the advertised addresses", agent_log)

        procs[leader].send_signal(signal.SIGKILL)
        procs[leader].wait(10)
        wait_for(lambda: status_of(pods[standby].url("/leader")) == 200, 30, "the standby leading", logs[standby])
        wait_for(lambda: "nodes: 1 ready" in llmgw("ctl", "status", *pods[standby].admin()).stdout, 60,
                 "the agent with the new leader", agent_log)
        assert status_of(pods[standby].probe("readinessProbe")) == 200
        assert descendants(procs[2].pid) == engines  # adopted, not started again
    finally:
        end_processes(procs, engines, wait=20)
    assert Path(pods[0].files.local("/run/llmgw/admin-token")).read_text() == \
        Path(pods[1].files.local("/run/llmgw/admin-token")).read_text()
