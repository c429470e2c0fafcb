"""The agent's systemd unit lets it replace its own file, and only that folder of /usr."""

from __future__ import annotations

import sys

from llmgw.install.layout import Layout
from llmgw.install.service import install_service


def test_the_agent_unit_may_write_the_folder_of_its_own_file(tmp_path):
    layout = Layout(tmp_path)
    install_service(layout, "agent", [sys.executable, str(layout.binary), "agent"], user=None)
    text = layout.unit("agent").read_text()
    assert "ProtectSystem=full" in text and "KillMode=process" in text
    assert f"ReadWritePaths=-{layout.binary.parent}\n" in text
