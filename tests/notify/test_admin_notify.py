"""POST /api/v1/notify/test and `llmgw ctl notify test` against a local receiver; a failed backup is told."""

from __future__ import annotations

import json

import attrs
import pytest
from ctl_live import ctl_against

from llmgw.admin import make_admin_app
from llmgw.cli.main import main
from llmgw.config.server import BackupConfig
from llmgw.notify.notifier import Notifier
from llmgw.store import open_store

from .conftest import ThreadedReceiver, fast_sinks, server_config

TOKEN = "notify-admin-token-for-tests"
JSON = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", "X-Llmgw-Actor": "ann"}


@pytest.fixture
async def store(tmp_path):
    s = await open_store(f"sqlite:///{tmp_path}/admin.db")
    try:
        yield s
    finally:
        await s.close()


async def admin_client(aiohttp_client, store, config, **kw):
    return await aiohttp_client(make_admin_app(config, store, token=TOKEN, **kw))


async def test_the_endpoint_sends_a_test_event_and_says_how_each_sink_answered(aiohttp_client, store, receiver):
    config = server_config({"url": receiver.url + "/ops", "name": "ops", "secret": "k", "events": ["node_lost"]},
                           {"url": receiver.url + "/services/T/B/key", "kind": "slack", "name": "chat"})
    client = await admin_client(aiohttp_client, store, config)
    resp = await client.post("/api/v1/notify/test", headers=JSON, data=b"{}")
    assert resp.status == 200, await resp.text()
    answer = await resp.json()
    assert answer["ok"] and answer["event_id"].startswith("evt-")
    assert [(s["sink"], s["kind"], s["ok"], s["status"], s["attempts"], s["error"]) for s in answer["sinks"]] == [
        ("ops", "webhook", True, 200, 1, ""), ("chat", "slack", True, 200, 1, "")]
    assert all(isinstance(s["seconds"], float) for s in answer["sinks"])
    [hook] = receiver.on("/ops")
    assert hook.json()["kind"] == "test" and hook.json()["id"] == answer["event_id"]  # events: [node_lost] or not
    assert hook.json()["details"] == {"asked_by": "ann"}
    assert receiver.on("/services/T/B/key")[0].json()["text"].startswith("Test notification: ")

    resp = await client.post("/api/v1/notify/test", headers=JSON, json={"sink": "chat"})
    assert [s["sink"] for s in (await resp.json())["sinks"]] == ["chat"]
    resp = await client.post("/api/v1/notify/test", headers=JSON, json={"sink": "pager"})
    assert resp.status == 404 and (await resp.json())["error"] == "no sink is called 'pager'; the sinks are: ops, chat"

    resp = await client.get("/api/v1/audit?action=notify.test", headers=JSON)
    audited = [(e["actor"], e["target"], e["outcome"]) for e in (await resp.json())["events"]]
    assert sorted(audited) == sorted([("ann", "notify", "ok"), ("ann", "notify:chat", "ok"),
                                      ("ann", "notify:pager", "refused")])
    assert "/services/T/B/key" not in json.dumps((await resp.json())["events"])


async def test_a_failing_sink_is_answered_not_refused(aiohttp_client, store, receiver):
    receiver.answers = [403]
    client = await admin_client(aiohttp_client, store, server_config({"url": receiver.url + "/x", "name": "x"}))
    resp = await client.post("/api/v1/notify/test", headers=JSON, data=b"{}")
    assert resp.status == 200
    answer = await resp.json()
    assert not answer["ok"]
    assert answer["sinks"][0]["status"] == 403 and answer["sinks"][0]["error"] == "answered 403: refused with 403"


async def test_without_sinks_the_endpoint_says_so(aiohttp_client, store):
    client = await admin_client(aiohttp_client, store, server_config())
    resp = await client.post("/api/v1/notify/test", headers=JSON, data=b"{}")
    assert resp.status == 409 and "notify.sinks is empty" in (await resp.json())["error"]


async def test_a_backup_that_fails_through_the_api_is_told(aiohttp_client, store, receiver, tmp_path):
    config = server_config({"url": receiver.url + "/hook", "events": ["backup_failed"]})
    (tmp_path / "not-a-folder").write_text("")
    config = attrs.evolve(config, backup=BackupConfig(dir=str(tmp_path / "not-a-folder")))
    notifier = Notifier(config.notify, fast_sinks(), source="cp-test")
    client = await admin_client(aiohttp_client, store, config, notifier=notifier)
    resp = await client.post("/api/v1/backups", headers=JSON, data=b"{}")
    assert resp.status == 500, await resp.text()
    await notifier.start()
    await notifier.stop()
    [got] = receiver.received
    body = got.json()
    assert body["kind"] == "backup_failed" and body["subject"] == "backup"
    assert "is a file, not a folder" in body["details"]["error"] and body["details"]["asked_by"] == "ann"


# ---------------------------------------------------------------- llmgw ctl notify test


@pytest.fixture
def sinks():
    with ThreadedReceiver() as r:
        yield r


@pytest.fixture
def live(tmp_path, monkeypatch, sinks):
    config = server_config({"url": sinks.url + "/ops", "name": "ops"},
                           {"url": sinks.url + "/services/T/B/key", "kind": "slack", "name": "chat"})
    with ctl_against(tmp_path, monkeypatch, config=config) as server:
        yield server


def ctl(capsys, *argv):
    code = main(["ctl", "notify", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_ctl_notify_test_prints_how_each_sink_answered(capsys, live, sinks):
    code, out, err = ctl(capsys, "test")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["SINK", "KIND", "ANSWER", "STATUS", "TIME", "TRIES", "ERROR"]
    assert lines[1].split()[:4] == ["ops", "webhook", "delivered", "200"]
    assert lines[2].split()[:4] == ["chat", "slack", "delivered", "200"]
    assert lines[1].split()[5:] == ["1", "-"]
    assert [r.json()["kind"] for r in sinks.on("/ops")] == ["test"]


def test_ctl_notify_test_json_one_sink_and_a_failure(capsys, live, sinks):
    code, out, _ = ctl(capsys, "test", "--sink", "ops", "--json")
    assert code == 0
    answer = json.loads(out)
    assert answer["ok"] and [s["sink"] for s in answer["sinks"]] == ["ops"]
    sinks.answers = [410]
    code, out, _ = ctl(capsys, "test", "--sink", "chat")
    assert code == 1
    assert out.splitlines()[1].split()[:4] == ["chat", "slack", "failed", "410"]


def test_ctl_notify_test_naming_no_sink_is_refused(capsys, live):
    code, _, err = ctl(capsys, "test", "--sink", "pager")
    assert code == 2 and "no sink is called 'pager'; the sinks are: ops, chat" in err.splitlines()
