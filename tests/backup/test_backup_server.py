"""A real `llmgw server` with backup.schedule: its log says when archives would be in clear, its metrics
listener has llmgw_backup_*, and GET /backups shows the schedule."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest

from .conftest import free_port, lay_out


def _get(url: str, token: str | None = None) -> str:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read().decode()


@pytest.mark.slow
def test_a_server_with_a_schedule_reports_its_backups(tmp_path):
    machine = lay_out(tmp_path / "cp1")
    listen, metrics = free_port(), free_port()
    text = machine.config_path.read_text()
    text = text.replace("agent_tls:", f"listen: 127.0.0.1:{listen}\nmetrics_listen: 127.0.0.1:{metrics}\n"
                                      "agent_insecure: true\nauth: {keys_required: false}\nagent_tls:")
    machine.config_path.write_text(text + "  schedule: 6h\n")
    admin = text.split("admin_listen: ")[1].split()[0]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen([sys.executable, "-m", "llmgw", "server", "--config", str(machine.config_path)],
                              env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        body = ""
        while time.monotonic() < deadline:
            assert server.poll() is None, server.stderr.read()
            try:
                body = _get(f"http://127.0.0.1:{metrics}/metrics")
                if "llmgw_backup_runs_total" in body:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert 'llmgw_backup_runs_total{outcome="ok"} 0.0' in body
        assert "llmgw_backup_last_failed 0.0" in body
        import json

        listed = json.loads(_get(f"http://{admin}/api/v1/backups", machine.token.read_text().strip()))
        assert listed["schedule"] == "every 6h" and listed["encrypted"] is False and listed["next_due"]
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    warned = [line for line in err.splitlines() if "backups are not encrypted" in line]
    assert len(warned) == 1 and "level=warning" in warned[0]
    assert machine.token.read_text().strip() not in err
