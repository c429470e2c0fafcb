"""GET and PUT /server-config: this control plane's server.yaml read key by key, changed keeping its comments."""

from __future__ import annotations

import json
import os

import pytest

from llmgw.admin import server_config
from llmgw.admin.state import ADMIN
from llmgw.config.load import load_server_config
from llmgw.server.live import LIVE_KEYS

SERVER_YAML = """\
# server.yaml of cp-1: kept by hand, and by the console.
listen: ":8080"   # the client API, every interface

# The store: SQLite on this machine.
store:
  dsn: "{db}"   # literal, and secret
router:
  retries:
    attempts: 3   # one more than the default
# Queueing while replicas are busy
admission:
  max_wait: 30s
models:
  - name: qwen-small   # the starter
    endpoints:
      - url: https://llm.example.com/v1
        api_key: sk-live-provider-secret   # the provider's key
  # a second model
  - name: tiny
    profiles:
      - engine: sim
# the end
"""

COMMENTS = ["# server.yaml of cp-1: kept by hand, and by the console.", "# the client API, every interface",
            "# The store: SQLite on this machine.", "# literal, and secret", "# one more than the default",
            "# Queueing while replicas are busy", "# the starter", "# the provider's key", "# a second model",
            "# the end"]


class FakeLive:
    """A live applier that takes up what llmgw.server.live says it would, and remembers what it was given."""

    keys = frozenset(LIVE_KEYS)

    def __init__(self) -> None:
        self.given = []

    def apply(self, running, new):
        from llmgw.server.live import GatewayLive

        gateway = type("G", (), {})()  # the real applier's logic, on a stand-in gateway
        self.given.append(new)
        applier = GatewayLive(gateway)
        gateway.upstream = type("U", (), {})()
        gateway.chooser = type("C", (), {})()
        gateway.admission = type("A", (), {"config": running.admission})()
        return applier.apply(running, new)


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "server.yaml"
    p.write_text(SERVER_YAML.format(db=tmp_path / "llmgw.db"), encoding="utf-8")
    return p


@pytest.fixture
async def admin(make_admin, path):
    return await make_admin(None, load_server_config(path), config_path=str(path))


def keys_of(answer) -> dict:
    return {k["key"]: k for k in answer["keys"]}


async def test_every_key_with_its_doc_default_file_value_and_what_runs(admin, path):
    answer = await admin.call("GET", "/server-config")
    assert (answer["path"], answer["editable"], answer["file_problems"]) == (str(path), True, [])
    keys = keys_of(answer)
    assert list(keys)[:2] == ["listen", "admin_listen"]  # the reference's order
    listen = keys["listen"]
    assert (listen["kind"], listen["file_value"], listen["value"], listen["default"], listen["applies"]) == (
        "text", ":8080", ":8080", ":8080", "restart")
    attempts = keys["router.retries.attempts"]
    assert (attempts["file_value"], attempts["default"], attempts["cluster"], attempts["in_file"]) == (3, 2, True, True)
    dial = keys["router.timeouts.dial"]
    assert (dial["in_file"], dial["file_value"], dial["value"], dial["kind"]) == (False, None, "5s", "duration")
    assert keys["guard.mode"]["choices"] == ["enforce", "shadow", "off"]
    assert keys["router"]["kind"] == "section" and "replica" in keys["router"]["doc"]
    assert keys["models"]["kind"] == "blocks" and [m["name"] for m in keys["models"]["file_value"]] == [
        "qwen-small", "tiny"]
    assert keys["models[].scaling.min"]["default"] == 1 and keys["models[].name"]["required"] is True
    assert keys["guard.policies"]["kind"] == "block-map"
    # Without a server around it nothing is taken up live: every key says restart.
    assert {k["applies"] for k in keys.values()} == {"restart"}


async def test_secrets_are_never_answered(admin, path, store):
    text = json.dumps(await admin.call("GET", "/server-config"))
    assert "sk-live-provider-secret" not in text and "llmgw.db" not in text.replace("/var/lib/llmgw/llmgw.db", "")
    keys = keys_of(json.loads(text))
    assert (keys["store.dsn"]["file_value"], keys["store.dsn"]["value"], keys["store.dsn"]["secret_from"]) == (
        "***", "***", "server.yaml itself")
    assert keys["models"]["file_value"][0]["endpoints"][0]["api_key"] == "***"
    # Sent back as the answer had it, *** keeps the file's secret.
    models = keys["models"]["file_value"]
    models[0]["endpoints"][0]["url"] = "https://llm2.example.com/v1"
    saved = await admin.call("PUT", "/server-config", {"set": {"models": models}})
    assert "sk-live-provider-secret" not in json.dumps(saved)
    written = path.read_text(encoding="utf-8")
    assert "api_key: sk-live-provider-secret   # the provider's key" in written and "llm2.example.com" in written
    # A new secret is written, and kept out of the audit log.
    await admin.call("PUT", "/server-config", {"set": {"store.dsn": "/srv/other-secret.db"}})
    assert 'dsn: "/srv/other-secret.db"' in path.read_text(encoding="utf-8")
    events = await store.list_audit(action="server-config.set", limit=10)
    assert "other-secret" not in json.dumps([e.detail for e in events])
    error = await admin.refused("PUT", "/server-config", {"set": {"models[1].endpoints[0].api_key": "***"}},
                                status=400)
    assert error.startswith("models[1].endpoints[0].api_key: *** stands for a secret the file has, and it has none")


async def test_a_change_keeps_every_comment_and_every_other_key(admin, path, store):
    before = path.read_text(encoding="utf-8")
    saved = await admin.call("PUT", "/server-config", {"set": {"router.retries.attempts": 5,
                                                               "router.timeouts.dial": "2s",
                                                               "listen": ":8081"}})
    after = path.read_text(encoding="utf-8")
    for comment in COMMENTS:
        assert comment in after, comment
    assert 'listen: ":8081"   # the client API, every interface' in after  # same quotes, same comment
    assert "    attempts: 5   # one more than the default\n  timeouts:\n    dial: 2s\n# Queueing" in after
    unchanged = [line for line in before.splitlines() if "attempts" not in line and "listen" not in line]
    assert [line for line in after.splitlines() if line in unchanged] == unchanged  # in the same order
    assert [(c["key"], c["before"], c["after"], c["takes_effect"]) for c in saved["changed"]] == [
        ("router.retries.attempts", 3, 5, "at restart"), ("router.timeouts.dial", None, "2s", "at restart"),
        ("listen", ":8080", ":8081", "at restart")]
    assert saved["restart_needed"] == ["listen", "router.timeouts.dial", "router.retries.attempts"]
    assert "taking effect when llmgw server restarts: listen" in saved["message"]
    assert load_server_config(path).router.retries.attempts == 5
    # The answer says what waits for a restart, key by key.
    keys = keys_of(await admin.call("GET", "/server-config"))
    assert keys["listen"]["restart_pending"] is True and keys["listen"]["value"] == ":8080"
    assert keys["admission.max_wait"]["restart_pending"] is False
    event = (await store.list_audit(action="server-config.set", limit=1))[0]
    assert event.target == f"file:{path}" and event.detail["outcome"] == "ok"
    assert event.detail["fields"]["set"]["router.retries.attempts"] == 5


async def test_a_bad_value_is_refused_naming_the_key_and_the_file_is_untouched(admin, path, store):
    before = path.read_bytes()
    mtime = os.stat(path).st_mtime_ns
    for change, words in [
        ({"set": {"router.timeouts.dial": "five"}}, "router.timeouts.dial: expected a duration like 5s, got 'five'"),
        ({"set": {"models[1].scaling": {"min": 3, "max": 1}}}, "models[1].scaling.min: 3 is more than max"),
        ({"set": {"router.retries.atempts": 1}}, "router.retries.atempts: unknown key (did you mean 'attempts'?)"),
        ({"set": {"models[5].name": "x"}}, "models[5]: the file's list has 2 entries; a new one is [2]"),
        ({"unset": ["models[7]"]}, "models[7]: the file's list has 2 entries; there is no [7]"),
        ({"set": {"listen[0]": 1}}, "listen: a text holds no keys"),
        ({}, "nothing to change"),
    ]:
        error = await admin.refused("PUT", "/server-config", change, status=400)
        assert words in error, error
        if change:
            assert f"{path} was not changed" in error, error
    assert path.read_bytes() == before and os.stat(path).st_mtime_ns == mtime
    assert not [p for p in os.listdir(path.parent) if p.endswith(".tmp")]
    refused = (await store.list_audit(action="server-config.set", limit=1))[0]
    assert refused.detail["outcome"] == "refused" and refused.detail["status"] == 400


async def test_unset_takes_a_key_out_and_its_default_applies(admin, path):
    saved = await admin.call("PUT", "/server-config", {"unset": ["admission.max_wait", "models[0]",
                                                                 "router.timeouts.idle"]})
    text = path.read_text(encoding="utf-8")
    assert "admission" not in text and "qwen-small" not in text and "idle" not in text
    assert "# Queueing while replicas are busy" in text and "# a second model\n  - name: tiny" in text
    assert [(c["key"], c["after"]) for c in saved["changed"]] == [
        ("admission.max_wait", None), ("models[0]", None), ("router.timeouts.idle", None)]
    assert saved["changed"][0]["takes_effect"] == "in force"  # 30s was the default already
    assert [m.name for m in load_server_config(path).models] == ["tiny"]


async def test_entries_of_a_list_are_added_changed_and_removed_by_index(admin, path):
    await admin.call("PUT", "/server-config", {"set": {"models[2]": {"name": "big", "profiles": [
                                                           {"engine": "vllm", "gpus": 1}]},
                                                       "models[1].scaling.max": 3,
                                                       "models[0].profiles": [{"engine": "sim"}]},
                                               "unset": ["models[0].endpoints"]})
    config = load_server_config(path)
    assert [m.name for m in config.models] == ["qwen-small", "tiny", "big"]
    assert config.models[1].scaling.max == 3 and config.models[0].endpoints == []
    assert "# a second model" in path.read_text(encoding="utf-8")


async def test_the_file_keeps_its_mode_and_is_replaced_whole(admin, path):
    os.chmod(path, 0o640)
    inode = os.stat(path).st_ino
    await admin.call("PUT", "/server-config", {"set": {"router.retries.attempts": 4}})
    st = os.stat(path)
    assert st.st_mode & 0o777 == 0o640 and st.st_ino != inode  # renamed over, not rewritten in place
    assert not [p for p in os.listdir(path.parent) if p.endswith(".tmp")]


async def test_live_keys_are_taken_up_and_the_rest_wait_for_a_restart(make_admin, path):
    live = FakeLive()
    admin = await make_admin(None, load_server_config(path), config_path=str(path), live=live)
    keys = keys_of(await admin.call("GET", "/server-config"))
    assert keys["router.retries.attempts"]["applies"] == "live" and keys["store.dsn"]["applies"] == "restart"
    assert keys["router.retries"]["applies"] == "live" and keys["router"]["applies"] == "restart"
    saved = await admin.call("PUT", "/server-config", {"set": {"router.retries.attempts": 6,
                                                               "admission.queue_depth": 10,
                                                               "agent_tls.cert": "/etc/llmgw/tls/new.pem"}})
    assert saved["applied"] == ["router.retries.attempts", "admission.queue_depth"]
    assert saved["restart_needed"] == ["agent_tls.cert"]
    assert [c["takes_effect"] for c in saved["changed"]] == ["now", "now", "at restart"]
    running = admin.client.app[ADMIN].config
    assert (running.router.retries.attempts, running.admission.queue_depth) == (6, 10)
    assert running.agent_tls.cert == "/etc/llmgw/tls/server.pem"  # still what the server started with


async def test_a_change_made_by_hand_is_noticed(make_admin, path, caplog):
    live = FakeLive()
    admin = await make_admin(None, load_server_config(path), config_path=str(path), live=live)
    state = admin.client.app[ADMIN]
    state.config_seen = server_config._signature(str(path))
    path.write_text(path.read_text(encoding="utf-8").replace("attempts: 3", "attempts: 7"), encoding="utf-8")
    await server_config.take_up(state)
    assert state.config.router.retries.attempts == 7
    path.write_text(path.read_text(encoding="utf-8").replace("attempts: 7", "attempts: seven"), encoding="utf-8")
    with caplog.at_level("WARNING", logger="llmgw.admin"):
        await server_config.take_up(state)
    assert state.config.router.retries.attempts == 7
    assert "cannot be used" in caplog.text


async def test_without_a_file_the_keys_are_shown_and_changes_refused(make_admin):
    admin = await make_admin(None)
    answer = await admin.call("GET", "/server-config")
    assert (answer["path"], answer["editable"]) == (None, False)
    assert "not started from a server.yaml" in answer["reason"]
    assert keys_of(answer)["listen"]["value"] == ":8080"
    error = await admin.refused("PUT", "/server-config", {"set": {"listen": ":1"}}, status=409)
    assert "not started from a server.yaml" in error


async def test_a_file_broken_by_hand_is_said_and_cannot_be_changed_until_fixed(admin, path):
    path.write_text("router:\n  retries: [\n", encoding="utf-8")
    answer = await admin.call("GET", "/server-config")
    assert answer["editable"] is False and "not valid YAML" in answer["file_problems"][0]
    error = await admin.refused("PUT", "/server-config", {"set": {"listen": ":1"}}, status=409)
    assert "fix it by hand first" in error
