"""`llmgw doctor` on a control plane whose limits.store is a Redis: it says whether the Redis answers."""

from __future__ import annotations

import json

from llmgw.cli.main import main
from llmgw.install.layout import Layout


def _limits_finding(L: Layout, capsys) -> tuple[str, str]:
    main(["doctor", "--root", str(L.root), "--json"])
    found = [(f["status"], f["message"]) for f in json.loads(capsys.readouterr().out)["findings"]
             if f["check"] == "limits store"]
    assert len(found) == 1, found
    return found[0]


def test_doctor_says_whether_the_limits_store_answers(tmp_path, redis_server, capsys):
    L = Layout(tmp_path / "m")
    L.server_yaml.parent.mkdir(parents=True)
    L.server_yaml.write_text(f"store: {{dsn: {tmp_path / 'llmgw.db'}}}\nagent_insecure: true\n"
                             f"limits: {{store: '{redis_server.url}'}}\n")
    status, text = _limits_finding(L, capsys)
    assert status == "ok" and f"127.0.0.1:{redis_server.port}" in text and "answers (Redis " in text
    redis_server.kill()
    status, text = _limits_finding(L, capsys)
    assert status == "problem" and "does not answer" in text and "clients are refused (503)" in text
    assert "limits.store" in text
