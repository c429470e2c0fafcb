"""`llmgw ctl node join-code`, `join-codes` and `join-code-revoke` against a live admin API whose server.yaml
names a cluster CA."""

from __future__ import annotations

from ctl_live import ctl_against, ok, ok_json, server_yaml_with_ca


def test_a_code_is_made_listed_as_a_table_and_revoked(capsys, tmp_path, monkeypatch):
    server_yaml = server_yaml_with_ca(tmp_path)
    with ctl_against(tmp_path, monkeypatch, config_path=server_yaml) as live:
        live.run(live.store.set_setting("control.members.cp-test", {"holder": "cp-test",
                                                                    "agent_address": "127.0.0.1:7443"}, actor="t"))
        assert ok(capsys, "node", "join-codes").strip() == \
            "no join codes that still work; make one with `llmgw ctl node join-code`"
        named = ok_json(capsys, "node", "join-code", "--name", "gpu-b-01", "--actor", "ann")
        anyone = ok_json(capsys, "node", "join-code", "--ttl", "10m")
        lines = ok(capsys, "node", "join-codes").splitlines()
        assert lines[0].split() == ["ID", "NODE", "EXPIRES", "MADE", "BY"]
        rows = {line.split()[0]: line for line in lines[1:]}
        assert set(rows) == {named["id"], anyone["id"]} and len(lines) == 3
        assert rows[named["id"]].split()[1] == "gpu-b-01" and rows[named["id"]].endswith("ann")
        assert "(its choice)" in rows[anyone["id"]]
        assert lines[0].index("NODE") == rows[named["id"]].index("gpu-b-01")  # aligned columns
        assert named["code"] not in "\n".join(lines)  # the secret is shown once, when made
        assert "revoked" in ok(capsys, "node", "join-code-revoke", anyone["id"])
        assert [c["id"] for c in ok_json(capsys, "node", "join-codes")["codes"]] == [named["id"]]
