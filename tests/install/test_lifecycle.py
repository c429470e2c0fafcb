"""A whole control plane under --root: init starts it, ctl talks to it, doctor checks it, wipe takes it away."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest

from llmgw.install.layout import Layout
from llmgw.install.service import service_running, stop_service
from tests.conftest import free_port

pytestmark = pytest.mark.slow


def _llmgw(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llmgw", *args], capture_output=True, text=True, timeout=timeout)


def test_init_start_ctl_doctor_stop_wipe(tmp_path):
    root = tmp_path / "machine"
    L = Layout(root)
    client, admin, agent, metrics = (free_port() for _ in range(4))
    try:
        done = _llmgw("server", "init", "--yes", "--root", str(root), "--admin", "ops@example.com",
                      "--node", "--node-id", "cp1", "--model", "sim",
                      # A source checkout under /root: engines run as root rather than as llmgw-engine.
                      "--engine-user", "",
                      "--listen", f"127.0.0.1:{client}", "--admin-listen", f"127.0.0.1:{admin}",
                      "--agent-listen", f"127.0.0.1:{agent}", "--metrics-listen", f"127.0.0.1:{metrics}",
                      "--wait", "180")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "started directly" in done.stdout and "no systemd here" in done.stdout
        assert "The control plane answers." in done.stdout
        with urllib.request.urlopen(f"http://127.0.0.1:{client}/ready", timeout=10) as resp:
            assert json.load(resp)["status"] == "ready"

        status = _llmgw("ctl", "status", "--admin", f"http://127.0.0.1:{admin}",
                        "--token-file", str(L.admin_token))
        assert status.returncode == 0, status.stderr
        assert "nodes: 1 ready" in status.stdout and "models: 1 ready" in status.stdout

        doctor = _llmgw("doctor", "--root", str(root), "--json")
        report = json.loads(doctor.stdout)
        assert doctor.returncode == 0, [f for f in report["findings"] if f["status"] == "problem"]
        checks = {f["check"] for f in report["findings"]}
        assert {"service server", "port listen", "certificate server", "store", "gpu", "engines", "disk"} <= checks
        assert any(f["check"] == "store" and "schema version" in f["message"] for f in report["findings"])

        assert stop_service(L, "server").startswith("llmgw server: stopped")
        doctor = _llmgw("doctor", "--root", str(root))
        assert doctor.returncode == 1
        assert "llmgw server is not running" in doctor.stdout
        assert f"read {L.log_file('server')}" in doctor.stdout
    finally:
        wipe = _llmgw("wipe", "--yes", "--root", str(root))
    assert wipe.returncode == 0, wipe.stderr
    assert "llmgw agent: stopped" in wipe.stdout
    assert not service_running(L, "agent")
    for path in (L.etc, L.state, L.logs, L.nft, L.unit("server"), L.unit("agent")):
        assert not path.exists(), path
    assert not root.exists() or not any(root.rglob("*")), list(root.rglob("*"))
    again = _llmgw("wipe", "--yes", "--root", str(root))
    assert again.returncode == 0 and "nothing to do" in again.stdout
