"""`llmgw ctl` quotas, usage, audit, config, people and openapi against a live in-process admin API."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import pathlib

import pytest
from ctl_live import ctl, ctl_against, ok, ok_json, refused
from test_ctl_cluster import QWEN

from llmgw.admin.testing import FakeCluster
from llmgw.store import UsageRow

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def live(tmp_path, monkeypatch):
    with ctl_against(tmp_path, monkeypatch, cluster=FakeCluster(models=[QWEN])) as server:
        yield server


def test_config_show_get_set_history_unset(capsys, live):
    table = ok(capsys, "config", "show")
    assert table.splitlines()[0].split()[:4] == ["KEY", "VALUE", "FROM", "BY"]
    assert "router.retries.attempts" in table
    out = ok(capsys, "config", "set", "router.retries.attempts", "4", "--actor", "ann")
    assert out.splitlines()[0] == "router.retries.attempts = 4  (set by ann)"
    assert ok_json(capsys, "config", "set", "admission.max_wait", "90s")["value"] == "1m30s"
    assert ok_json(capsys, "config", "get", "guard.mode")["choices"] == ["enforce", "shadow", "off"]
    assert refused(capsys, "config", "set", "guard.mode", "loud") == \
        "guard.mode: expected one of enforce, shadow, off, got 'loud'"
    assert refused(capsys, "config", "set", "router.retry.attempts", "1") == \
        "unknown setting 'router.retry.attempts'; did you mean router.retries.attempts?"
    history = ok(capsys, "config", "history")
    assert len(history.splitlines()) == 3 and "1m30s" in history
    assert "from server.yaml" in ok(capsys, "config", "unset", "admission.max_wait")
    # This admin API runs without a server around it, so nothing takes a setting up until a restart.
    assert "takes effect when llmgw server restarts" in ok(capsys, "config", "get", "router.timeouts.dial")
    assert "(unset)" in ok(capsys, "config", "history", "admission.max_wait")


def test_audit_filters_and_shows_refusals(capsys, live):
    ok(capsys, "config", "set", "guard.mode", "shadow", "--actor", "ann")
    refused(capsys, "config", "set", "guard.mode", "loud", "--actor", "ann")
    ok(capsys, "cordon", "gpu-a-01", "--actor", "bob")
    events = ok_json(capsys, "audit", "--since", "24h", "--actor", "ann", "--action", "settings.*")["events"]
    assert [(e["outcome"], e["via"]) for e in events] == [("refused", "ctl"), ("ok", "ctl")]
    table = ok(capsys, "audit", "--since", "24h")
    lines = table.splitlines()
    assert lines[0].split() == ["AT", "ACTOR", "VIA", "ACTION", "TARGET", "OUTCOME"]
    assert "nodes.cordon" in lines[1] and "bob" in lines[1]
    assert "refused: guard.mode: expected one of" in table
    assert ok_json(capsys, "audit", "--actor", "nobody")["events"] == []
    assert "is not a time" in refused(capsys, "audit", "--since", "last week")


def _usage(live) -> None:
    async def fill():
        org = await live.store.create_org("acme")
        project = await live.store.create_project(org.id, "web")
        now = dt.datetime.now(dt.UTC)
        await live.store.insert_usage_rows([
            UsageRow(request_id=f"r{i}", at=now - dt.timedelta(hours=2), org_id=org.id, project_id=project.id,
                     model_served="qwen-small" if i else "tiny", prompt_tokens=10, completion_tokens=5,
                     cost_micros=250_000) for i in range(3)])

    live.run(fill())


def test_usage_table_json_and_csv_export(capsys, live, tmp_path):
    _usage(live)
    table = ok(capsys, "usage", "--by", "project")
    header, row = table.splitlines()
    assert header.split() == ["PERIOD", "PROJECT", "REQUESTS", "ERRORS", "TOKENS", "COST", "LATENCY_MS"]
    assert row.split()[:4] == ["total", "acme/web", "3", "0"]
    report = ok_json(capsys, "usage", "--by", "model", "--since", "7d", "--period", "day")
    assert {r["group"]: r["requests"] for r in report["rows"]} == {"qwen-small": 2, "tiny": 1}
    text = ok(capsys, "usage", "export", "--by", "project,model", "--from", "7d", "--period", "total")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {(r["project"], r["model"], r["requests"]) for r in rows} == {
        ("acme/web", "qwen-small", "2"), ("acme/web", "tiny", "1")}
    out = tmp_path / "usage.csv"
    code, _, _ = ctl(capsys, "usage", "export", "--from", "2026-01-01", "-o", str(out))
    assert code == 0 and out.read_text().startswith("period_start,project,project_id")
    assert refused(capsys, "usage", "--by", "galaxy").startswith("by: 'galaxy' is not one of")


def test_quotas(capsys, live):
    ok(capsys, "orgs", "create", "acme")
    ok(capsys, "orgs", "create", "acme/ml")
    assert ok(capsys, "quota", "set", "team:acme/ml", "--gpus", "8", "--guaranteed-gpus", "2", "--memory", "1TiB") \
        == "team:acme/ml: limit 8 gpus, 1TiB memory; guaranteed 2 gpus\n"
    table = ok(capsys, "quotas")
    assert "team:acme/ml" in table and "1 gpus, 0 cores" in table
    assert refused(capsys, "quota", "set", "team:acme/ml", "--gpus", "1", "--guaranteed-gpus", "2") == \
        "guaranteed.gpus: 2 is more than the limit, 1"
    assert "quota removed" in ok(capsys, "quota", "remove", "team:acme/ml")
    assert ok_json(capsys, "quotas") == {"quotas": []}


def test_people_through_the_api(capsys, live):
    ok(capsys, "orgs", "create", "acme")
    ok(capsys, "orgs", "create", "acme/search")
    ok(capsys, "orgs", "create", "acme/search/indexer")
    assert [n["path"] for n in ok_json(capsys, "orgs", "list")["nodes"]] == [
        "acme", "acme/search", "acme/search/indexer"]
    assert ok(capsys, "users", "create", "ann@example.com", "--role", "operator").startswith("ann@example.com: active")
    ok(capsys, "users", "add-member", "ann@example.com", "acme/search")
    assert "member of acme/search" in ok(capsys, "users", "show", "ann@example.com")
    issued = ok_json(capsys, "keys", "create", "--project", "acme/search/indexer", "--user", "ann@example.com")
    assert issued["secret"].startswith("llmgw-")
    assert issued["key"]["id"] in ok(capsys, "keys", "list", "--user", "ann@example.com")
    assert ok(capsys, "limits", "set", "project:acme/search/indexer", "--rpm", "60") == \
        "project:acme/search/indexer: rpm 60\n"
    assert ok_json(capsys, "limits", "show", "project:acme/search/indexer")["limits"]["rpm"] == 60
    assert "limits removed" in ok(capsys, "limits", "clear", "project:acme/search/indexer")
    assert ok(capsys, "keys", "revoke", issued["key"]["id"]).endswith("revoked\n")
    assert ok(capsys, "users", "suspend", "ann@example.com") == "ann@example.com: suspended\n"
    assert "already" in refused(capsys, "orgs", "create", "acme")
    events = ok_json(capsys, "audit", "--action", "users.*")["events"]
    assert {e["via"] for e in events} == {"ctl"}


def test_storage_quota_shown_set_cleared_and_audited(capsys, live):
    ok(capsys, "orgs", "create", "acme")
    ok(capsys, "orgs", "create", "acme/search")
    ok(capsys, "orgs", "create", "acme/search/indexer")
    assert ok(capsys, "storage-quota", "acme/search/indexer") == (
        "acme/search/indexer: storage quota the server's, 10GiB (router.clients.project_storage_bytes);"
        " keeps 0 now\n")
    assert ok(capsys, "storage-quota", "acme/search/indexer", "50GiB").startswith(
        "acme/search/indexer: storage quota 50GiB; keeps 0 now\nA running gateway reads the change")
    assert ok_json(capsys, "storage-quota", "acme/search/indexer")["storage_quota_bytes"] == 50 * 1024**3
    assert "storage quota no limit" in ok(capsys, "storage-quota", "acme/search/indexer", "0")
    assert "the server's" in ok(capsys, "storage-quota", "acme/search/indexer", "--default")
    assert refused(capsys, "storage-quota", "acme/search/indexer", "lots").startswith("SIZE: expected a size")
    assert ok_json(capsys, "storage-quota", "acme/search/indexer")["storage_quota_bytes"] is None
    events = ok_json(capsys, "audit", "--action", "keys.quota")["events"]
    assert len(events) == 3 and {e["via"] for e in events} == {"ctl"}


def test_openapi_prints_the_committed_document(capsys, live):
    local = ok(capsys, "openapi")
    assert local == (ROOT / "docs" / "admin-api.openapi.json").read_text(encoding="utf-8")
    assert json.loads(ok(capsys, "openapi", "--remote")) == json.loads(local)
