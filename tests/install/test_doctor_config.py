"""`llmgw doctor` on a machine whose server.yaml and agent.yaml do not load: each said, with the command that
lists its problems, and nothing checked that the file would have named."""

from __future__ import annotations

import json

from llmgw.cli.main import main
from llmgw.install.layout import Layout


def test_files_that_do_not_load_are_problems_naming_config_check(tmp_path, capsys):
    L = Layout(tmp_path / "m")
    L.server_yaml.parent.mkdir(parents=True)
    L.server_yaml.write_text("listen: [not, an, address]\n")
    L.agent_yaml.write_text("control_planes: 7\n")
    assert main(["doctor", "--root", str(L.root), "--json"]) == 1
    findings = [(f["check"], f["status"], f["message"]) for f in json.loads(capsys.readouterr().out)["findings"]]
    assert [(check, status) for check, status, _ in findings] == [
        ("role", "ok"), ("server.yaml", "problem"), ("role", "ok"), ("agent.yaml", "problem")]
    assert findings[0][2] == f"a control plane ({L.server_yaml})" and findings[2][2] == f"a node ({L.agent_yaml})"
    assert "listen" in findings[1][2]
    assert findings[1][2].endswith(f"`llmgw config check {L.server_yaml}` lists each problem")
    assert "control_planes" in findings[3][2]
    assert findings[3][2].endswith(f"`llmgw config check --agent {L.agent_yaml}` lists each problem")
