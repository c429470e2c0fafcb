"""The real console in a real terminal (tmux) against a live admin API: Overview, Models, a scale, Q.

Slow: it starts `python -m llmgw console` in a tmux session of its own
(its own server socket, 120x40), types into it with send-keys and reads it
with capture-pane. Without tmux it is skipped, except under CI, where
.ci/run installs it and its absence is a failure.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import pytest
from tmux_screen import tmux_screen

from llmgw.admin.testing import FakeCluster, LiveAdmin, gpu_node

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
QWEN = {"name": "qwen-small", "owner": "team:acme/ml", "profiles": [{"engine": "sim", "gpus": 1}],
        "scaling": {"min": 1, "max": 2}}


@pytest.fixture
def tmux():
    with tmux_screen("llmgw-console-test", "console") as screen:
        yield screen


def test_the_console_in_a_terminal_opens_models_scales_one_and_overview_shows_it(tmp_path, tmux):
    cluster = FakeCluster(nodes=[gpu_node("gpu-a-01"), gpu_node("gpu-a-02")], models=[QWEN])
    with LiveAdmin(tmp_path, cluster=cluster) as live:
        token = tmp_path / "admin-token"
        token.write_text(live.TOKEN)
        done = tmp_path / "exit-status"
        command = (f"cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m llmgw console "
                   f"--admin {live.url} --token-file {shlex.quote(str(token))} --actor tmux "
                   f"2>{shlex.quote(str(tmp_path / 'stderr'))}; echo $? > {shlex.quote(str(done))}; sleep 60")
        tmux.start(command, width=120, height=40)

        shown = tmux.wait_for("nodes: 2 ready")
        assert "llmgw console" in shown.splitlines()[0] and live.url in shown.splitlines()[0]
        assert "Watch" in shown and "models: 1 ready" in shown and "replicas: 1 ready" in shown
        assert "↑↓ choose  →/Enter open" in shown

        tmux.keys("Down", "Down", "Down")
        shown = tmux.wait_for("qwen-small  ready   1/1")
        assert "MODEL       STATUS  READY  MIN  MAX" in shown

        tmux.keys("Right", "Enter")
        tmux.wait_for("Replicas (scale)")
        tmux.keys("Down", "Enter")
        tmux.wait_for("Scale qwen-small")
        tmux.keys("End", "BSpace", "2", "Tab", "Tab", "Tab", "Tab", "Enter")
        tmux.wait_for("qwen-small: scaled; ready, 2/2 ready (min 2, max 2)")
        assert cluster.calls[-1][0] == "scale_model" and cluster.calls[-1][1][2] == "tmux"

        tmux.keys("Left", "Up", "Up", "Up")
        tmux.wait_for("replicas: 2 ready")

        tmux.keys("q")
        deadline = time.monotonic() + 10
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert done.exists() and done.read_text().strip() == "0", (tmp_path / "stderr").read_text()
