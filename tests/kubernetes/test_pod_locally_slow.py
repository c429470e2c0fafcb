"""The control plane pod's own command lines, run here without Kubernetes: the generated ConfigMap and Secrets laid
out as the kubelet mounts them, the init container's copy, then `llmgw server` on a real PostgreSQL. Its probes
answer as the StatefulSet expects, the first administrator is made as docs/kubernetes.md says, and an agent outside
joins with a certificate from the generated CA through the addresses nodes/agent-control-planes.yaml lists."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from llmgw.up.procs import descendants
from tests.kubernetes.kube_files import LocalPod, control_plane, kube
from tests.processes import end_processes

pytestmark = pytest.mark.slow

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0


def wait_for(check, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout:.0f} s; {log.name} ends:\n{log.read_text()[-3000:]}")


def llmgw(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmgw", *args], capture_output=True, text=True, timeout=120,
                          input=input, env=ENV)


def test_the_pod_command_lines_serve_probes_and_an_agent_outside_joins(tmp_path, postgres_server):
    (tmp_path / "dsn").write_text(postgres_server.dsn(postgres_server.create_database()) + "\n")
    out = tmp_path / "manifests"
    assert kube(out, "--store", "external", "--dsn-file", str(tmp_path / "dsn"), "--replicas", "1",
                "--agent-host", "127.0.0.1") == 0
    pod = LocalPod(out, tmp_path / "pod")
    # The init container: the Secret's files (0440, as the kubelet writes them) copied 0600 into /run/llmgw.
    assert pod.init.returncode == 0, pod.init.stderr
    state = Path(pod.files.local("/run/llmgw"))
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in state.iterdir()} == {
        "admin-token": 0o600, "key-hash-secret": 0o600, "store-dsn": 0o600}
    config, here, probe = pod.config, pod.ports, pod.probe
    pod.advertise_here({"127.0.0.1:7443": f"127.0.0.1:{here['agents']}"})

    procs: list[subprocess.Popen] = []
    engines: list[int] = []
    log = tmp_path / "server.log"
    try:
        procs.append(subprocess.Popen(pod.command, env=pod.env, cwd=tmp_path, stdout=open(log, "wb"), stderr=subprocess.STDOUT))
        wait_for(lambda: status_of(probe("startupProbe")) == 200, 90, "the startup probe", log)
        assert status_of(probe("livenessProbe")) == 200
        # Not ready while no model is served: the clients' Service sends it nothing yet.
        assert status_of(probe("readinessProbe")) == 503
        wait_for(lambda: status_of(f"http://127.0.0.1:{here['api']}/leader") == 200, 60, "leading", log)

        # The first administrator, as `kubectl exec ... llmgw users create` makes them.
        made = llmgw("users", "create", "ops@example.com", "--role", "admin", "--config", str(config),
                     "--password", "-", input="a-long-password-1\n")
        assert made.returncode == 0, made.stderr

        # A node outside: its certificate from the generated CA, its control planes from the file made for it.
        issued = llmgw("ctl", "cert", "issue-node", "gpu01", "--dir", str(out / "pki"), "--out", str(tmp_path / "n1"))
        assert issued.returncode == 0, issued.stderr
        planes = [line.split("- ", 1)[1] for line in (out / "nodes" / "agent-control-planes.yaml").read_text()
                  .splitlines() if line.startswith("  - ")]
        assert planes == ["https://127.0.0.1:7443"]
        (tmp_path / "agent.yaml").write_text(json.dumps({
            "node_id": "gpu01", "engine_host": "127.0.0.1", "engine_user": "",
            "control_planes": [p.replace(":7443", f":{here['agents']}") for p in planes],
            "tls": {k: str(tmp_path / "n1" / f) for k, f in
                    (("cert", "node.pem"), ("key", "node-key.pem"), ("ca", "ca.pem"))},
            "state_dir": str(tmp_path / "agent"), "weights_dir": str(tmp_path / "agent" / "w"),
            "engines_dir": str(tmp_path / "agent" / "e"),
        }))
        agent_log = tmp_path / "agent.log"
        procs.append(subprocess.Popen([sys.executable, "-m", "llmgw", "agent", "--config", str(tmp_path / "agent.yaml")],
                                      env=ENV, stdout=open(agent_log, "wb"), stderr=subprocess.STDOUT))
        admin = pod.admin()
        added = llmgw("ctl", "model", "add", "-", *admin,
                      input="name: tiny\nengine: sim\nprofiles: [{name: cpu}]\nscaling: {min: 1, max: 1}\n")
        assert added.returncode == 0, added.stderr
        wait_for(lambda: status_of(probe("readinessProbe")) == 200, 120, "ready once a model is served", agent_log)
        engines = descendants(procs[1].pid)
        status = llmgw("ctl", "status", *admin)
        assert status.returncode == 0 and "nodes: 1 ready" in status.stdout, status.stdout + status.stderr
        assert "models: 1 ready" in status.stdout
    finally:
        end_processes(procs, engines, wait=20)
    assert control_plane(out)["spec"]["replicas"] == 1
