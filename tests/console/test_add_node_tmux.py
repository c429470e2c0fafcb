"""Do → Add a node in a real terminal (tmux): a fresh join code with the line to paste, and node add over SSH
with its steps shown as they happen (here to a port where no sshd listens: the same sentence as the CLI's).

Slow: the console runs as `python -m llmgw console` in a tmux session of its own, against a live admin API
whose server.yaml names a real cluster CA (join codes carry its fingerprint).
"""

from __future__ import annotations

import datetime as dt
import shlex
import socket
import sys

import pytest
from ctl_live import server_yaml_with_ca
from test_tmux import ROOT, tmux  # noqa: F401 - the fixture

from llmgw import pki
from llmgw.admin.testing import FakeCluster, LiveAdmin, gpu_node
from llmgw.control.join_codes import parse_code

pytestmark = pytest.mark.slow


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: nothing listens there


def open_add_a_node(tmux) -> str:  # noqa: F811
    for _ in range(30):
        tmux.keys("Down")
        if "Two ways to make a machine a node" in tmux.text():
            break
    return tmux.wait_for("Two ways to make a machine a node")


def test_add_a_node_shows_a_join_line_and_runs_node_add_with_its_steps(tmp_path, tmux):  # noqa: F811
    server_yaml = server_yaml_with_ca(tmp_path)
    with LiveAdmin(tmp_path, cluster=FakeCluster(nodes=[gpu_node("gpu-a-01")]), config_path=server_yaml) as live:
        live.run(live.store.set_setting("control.members.cp-test", {"holder": "cp-test",
                                                                    "agent_address": "127.0.0.1:7443"}, actor="t"))
        token = tmp_path / "admin-token"
        token.write_text(live.TOKEN)
        command = (f"cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m llmgw console "
                   f"--admin {live.url} --token-file {shlex.quote(str(token))} --actor tmux "
                   f"2>{shlex.quote(str(tmp_path / 'stderr'))}; sleep 60")
        tmux.start(command, width=120, height=45)
        tmux.wait_for("nodes: 1 ready")
        shown = open_add_a_node(tmux)
        assert "llmgw join CODE" in shown and "Type [user@]host" in shown

        # A join code: the line to paste, once.
        tmux.keys("Right", "Enter")
        tmux.wait_for("Make a join code")
        tmux.keys("Enter")
        shown = tmux.wait_for("It works once, until")
        rows = shown.splitlines()
        [first] = [i for i, row in enumerate(rows) if "sudo llmgw join llmgw1-" in row]
        column = rows[first].index("sudo llmgw join ")
        text = ""
        for row in rows[first:]:  # the line wraps in the panel; copied, its pieces join again
            piece = row[column:].strip()
            if not piece:
                break
            text += piece
        code = parse_code(text.removeprefix("sudo llmgw join "))
        assert code.addresses == ("127.0.0.1:7443",)
        assert code.ca_sha256 == pki.fingerprint(pki.load_certificate(tmp_path / "ca/ca.pem")).replace(":", "").lower()
        assert "Shown this once" in shown
        left = code.expires_at - dt.datetime.now(dt.timezone.utc)
        assert dt.timedelta(minutes=58) < left <= dt.timedelta(hours=1)  # it works for an hour

        # Over SSH, to a port nothing listens on: each step said, then why it stopped.
        port = closed_port()
        tmux.keys("Enter")
        tmux.wait_for("Add a machine over SSH")
        tmux.keys("Down", "Enter")
        tmux.wait_for("[user@]host, as ssh takes it")
        tmux.keys("root@127.0.0.1", literal=True)
        tmux.keys("Enter", "BSpace", "BSpace")
        tmux.keys(str(port), literal=True)
        tmux.keys("Enter", "Enter", "Enter", "Enter", "Enter", "Enter")  # key, options, name, under; Add
        shown = tmux.wait_for("Refused", timeout=30)
        assert f"cannot reach root@127.0.0.1 (port {port})" in shown.replace("\n", " ") or \
            "cannot reach root@127.0.0.1" in shown, shown
        tmux.keys("Enter")
        shown = tmux.wait_for("The last node add")
        assert f"checking root@127.0.0.1 (port {port})" in shown, shown
