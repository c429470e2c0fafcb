"""`llmgw ctl cert …` through the real entry point."""

from __future__ import annotations

import json
import stat

from llmgw.cli.main import main


def test_init_issue_and_show(tmp_path, capsys):
    d, out = tmp_path / "pki", tmp_path / "out"
    assert main(["ctl", "cert", "init-ca", "--dir", str(d)]) == 0
    assert "keep" in capsys.readouterr().out
    assert stat.S_IMODE((d / "ca-key.pem").stat().st_mode) == 0o600

    assert main(["ctl", "cert", "issue-server", "llmgw-ctl", "--host", "10.0.0.200",
                 "--host", "agents.example.com", "--dir", str(d), "--out", str(out), "--json"]) == 0
    issued = json.loads(capsys.readouterr().out)
    assert issued["common_name"] == "llmgw-ctl"
    assert issued["dns_names"] == ["agents.example.com"]
    assert issued["ip_addresses"] == ["10.0.0.200"]
    assert issued["usages"] == ["server"]
    assert (out / "server.pem").exists() and (out / "ca.pem").exists()

    assert main(["ctl", "cert", "issue-node", "gpu-01", "--dir", str(d), "--out", str(out)]) == 0
    assert "node.pem" in capsys.readouterr().out

    assert main(["ctl", "cert", "show", str(out / "node.pem"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["common_name"] == "gpu-01"
    assert shown["usages"] == ["client"]
    assert shown["issuer"] == "CN=llmgw cluster CA"

    assert main(["ctl", "cert", "show", str(out / "server.pem")]) == 0
    text = capsys.readouterr().out
    assert "DNS:agents.example.com, IP:10.0.0.200" in text
    assert "days left" in text and "sha256:" in text


def test_init_ca_twice_is_refused(tmp_path, capsys):
    assert main(["ctl", "cert", "init-ca", "--dir", str(tmp_path)]) == 0
    assert main(["ctl", "cert", "init-ca", "--dir", str(tmp_path)]) == 1
    assert "--force" in capsys.readouterr().err
    assert main(["ctl", "cert", "init-ca", "--dir", str(tmp_path), "--force"]) == 0


def test_issue_without_a_ca_says_to_make_one(tmp_path, capsys):
    code = main(["ctl", "cert", "issue-node", "n1", "--dir", str(tmp_path / "none"), "--out", str(tmp_path)])
    assert code == 1
    assert "llmgw ctl cert init-ca --dir" in capsys.readouterr().err


def test_a_bad_node_id_is_a_usage_error(tmp_path, capsys):
    main(["ctl", "cert", "init-ca", "--dir", str(tmp_path)])
    capsys.readouterr()
    assert main(["ctl", "cert", "issue-node", "no spaces", "--dir", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "not allowed" in capsys.readouterr().err
