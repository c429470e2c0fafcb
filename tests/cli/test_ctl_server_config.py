"""`llmgw ctl server-config` against a live admin API started from a server.yaml with comments."""

from __future__ import annotations

import pytest
from ctl_live import ctl_against, ok, ok_json, refused

SERVER_YAML = """\
# The control plane.
listen: ":8080"   # the client API

store:
  dsn: env:TEST_STORE_DSN   # read from the service's environment
router:
  retries:
    attempts: 3   # one more than the default
# Queueing
admission:
  max_wait: 30s
models:
  - name: qwen-small   # the starter
    profiles:
      - engine: sim
"""


@pytest.fixture
def live(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_STORE_DSN", f"{tmp_path}/store.db")
    path = tmp_path / "server.yaml"
    path.write_text(SERVER_YAML, encoding="utf-8")
    with ctl_against(tmp_path, monkeypatch, config_path=path) as server:
        server.path = path
        yield server


def test_show_get_set_unset_keep_the_comments(capsys, live):
    table = ok(capsys, "server-config")
    assert table.splitlines()[0] == str(live.path)
    assert table.splitlines()[1].split() == ["KEY", "VALUE", "FROM", "APPLIES", "NOTE"]
    rows = {line.split()[0]: line.split() for line in table.splitlines()[2:]}
    assert rows["listen"][1:4] == [":8080", "server.yaml", "restart"]
    assert rows["router.retries.attempts"][1:3] == ["3", "server.yaml"] and "cluster" in rows["router.retries.attempts"]
    assert rows["router.timeouts.dial"][1:3] == ["5s", "default"]
    assert rows["models"][1:4] == ["1", "entry", "server.yaml"]
    # A secret: neither its value nor anything but where it is read from.
    assert rows["store.dsn"][1] == "***"
    got = ok_json(capsys, "server-config", "get", "store.dsn")
    assert (got["file_value"], got["value"], got["secret_from"]) == ("***", "***", "env:TEST_STORE_DSN")
    assert str(live.folder) not in ok(capsys, "server-config", "get", "store.dsn")

    out = ok(capsys, "server-config", "get", "models[0].profiles[0].engine")
    assert out.splitlines()[0] == "models[0].profiles[0].engine = sim  (server.yaml says sim)"

    out = ok(capsys, "server-config", "set", "admission.queue_depth", "64")
    assert out.splitlines()[0] == "admission.queue_depth = 64  (was -; at restart)"
    assert "taking effect when llmgw server restarts: admission.queue_depth" in out
    saved = ok_json(capsys, "server-config", "set", "models[0].scaling", "{min: 0, max: 2, on_demand: true}")
    assert saved["changed"][0]["after"] == {"min": 0, "max": 2, "on_demand": True}
    ok(capsys, "server-config", "unset", "admission.max_wait")
    text = live.path.read_text(encoding="utf-8")
    for comment in ("# The control plane.", "# the client API", "# read from the service's environment",
                    "# one more than the default", "# Queueing", "# the starter"):
        assert comment in text
    assert "  queue_depth: 64\n" in text and "max_wait" not in text
    assert "    scaling:\n      min: 0\n      max: 2\n      on_demand: true\n" in text

    before = live.path.read_bytes()
    assert refused(capsys, "server-config", "set", "router.timeouts.dial", "soon") == (
        f"router.timeouts.dial: expected a duration like 5s, got 'soon'. {live.path} was not changed; correct "
        "the value and send it again")
    assert refused(capsys, "server-config", "set", "router.retries.atempts", "1") == (
        f"router.retries.atempts: unknown key (did you mean 'attempts'?); {live.path} was not changed")
    assert refused(capsys, "server-config", "get", "router.nope").startswith("router.nope: not a key of server.yaml")
    assert live.path.read_bytes() == before
