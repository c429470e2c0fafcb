"""`llmgw keys threads|memory|cache`: a project's stored features, from the command line."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import pytest

from llmgw.cli.main import main
from llmgw.store import open_store


@pytest.fixture
def store_args(tmp_path) -> list[str]:
    return ["--store", f"sqlite:///{tmp_path}/store.db"]


def ok(capsys, *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def ok_json(capsys, *argv: str):
    return json.loads(ok(capsys, *argv, "--json"))


def refused(capsys, *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    return [line for line in err.splitlines() if "level=" not in line][-1]


def test_switches_are_shown_changed_and_audited(capsys, store_args) -> None:
    S = store_args
    ok(capsys, "org", "create", "acme", *S)
    project = ok_json(capsys, "org", "create", "acme/indexer", "--project", *S)
    shown = ok_json(capsys, "keys", "threads", "acme/indexer", *S)
    assert (shown["threads"], shown["retention_s"], shown["updated_at"]) == (False, 720 * 3600, None)

    on = ok_json(capsys, "keys", "threads", "acme/indexer", "--on", "--retention", "24h", *S)
    assert (on["threads"], on["retention_s"]) == (True, 86400)
    assert ok_json(capsys, "keys", "cache", "acme/indexer", "--on", "--ttl", "5m", *S)["ttl_s"] == 300
    assert ok_json(capsys, "keys", "memory", "acme/indexer", "--on", *S)["memory"] is True
    assert "threads off" in ok(capsys, "keys", "threads", "acme/indexer", "--off", *S)

    assert "no project named" in refused(capsys, "keys", "cache", "acme/nope", "--on", *S)
    assert "--ttl" in refused(capsys, "keys", "cache", "acme/indexer", "--ttl", "soon", *S)

    async def read():
        store = await open_store(S[1])
        try:
            return (await store.get_project_features(project["id"]),
                    await store.list_audit(action="keys.*"))
        finally:
            await store.close()

    features, audit = asyncio.run(read())
    assert (features.threads, features.thread_retention, features.memory, features.cache) == (
        False, dt.timedelta(hours=24), True, True)
    assert [e.action for e in audit] == ["keys.threads", "keys.memory", "keys.cache", "keys.threads"]


def test_a_projects_storage_quota_is_set_shown_reset_and_audited(capsys, store_args) -> None:
    S = store_args
    ok(capsys, "org", "create", "acme", *S)
    ok_json(capsys, "org", "create", "acme/indexer", "--project", *S)
    shown = ok_json(capsys, "keys", "quota", "acme/indexer", *S)
    assert (shown["storage_quota_bytes"], shown["server_default"], shown["used_bytes"]) == (None, True, 0)
    assert ok_json(capsys, "keys", "quota", "acme/indexer", "50GiB", *S)["storage_quota_bytes"] == 50 * 1024**3
    assert "no limit" in ok(capsys, "keys", "quota", "acme/indexer", "0", *S)
    assert "the server's" in ok(capsys, "keys", "quota", "acme/indexer", "--default", *S)
    assert "SIZE" in refused(capsys, "keys", "quota", "acme/indexer", "lots", *S)

    async def read():
        store = await open_store(S[1])
        try:
            return await store.list_audit(action="keys.quota")
        finally:
            await store.close()

    events = asyncio.run(read())
    assert [e.detail["storage_quota_bytes"] for e in reversed(events)] == [50 * 1024**3, 0, None]
