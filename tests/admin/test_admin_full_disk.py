"""An admin change while the store's disk is full: 503 with the reason (nothing changed), and the refusal is
still audited: kept in the audit journal beside the store and written there once the disk has room."""

from __future__ import annotations

import os

import pytest
from diskfaults import small_disk

from llmgw.admin import make_admin_app
from llmgw.config.server import ServerConfig
from llmgw.store import open_store

from .conftest import JSON, TOKEN

pytestmark = pytest.mark.slow  # mounts a small disk and fills it


async def test_a_change_on_a_full_disk_is_refused_503_and_audited_later(aiohttp_client, tmp_path):
    with small_disk(str(tmp_path / "disk"), size="8m") as disk:
        store = await open_store(os.path.join(disk.path, "admin.db"))
        try:
            client = await aiohttp_client(make_admin_app(ServerConfig(), store, token=TOKEN))
            hdr = {**JSON, "X-Llmgw-Actor": "ann@example.com"}
            disk.fill()
            resp = await client.post("/api/v1/users", json={"email": "bob@example.com"}, headers=hdr)
            assert resp.status == 503
            message = (await resp.json())["error"]
            assert "refuses writes" in message and "disk is full" in message
            assert os.path.getsize(os.path.join(disk.path, "audit-journal.jsonl")) > 0
            disk.free()
            resp = await client.post("/api/v1/users", json={"email": "bob@example.com"}, headers=hdr)
            assert resp.status == 201
            resp = await client.get("/api/v1/audit?actor=ann@example.com", headers=JSON)
            events = (await resp.json())["events"]
            assert [(e["action"], e["outcome"]) for e in events] == [("users.create", "ok"),
                                                                     ("users.create", "refused")]
            assert 503 in (events[1].get("status"), events[1]["detail"].get("status"))
            assert "journaled_at" in events[1]["detail"]
        finally:
            await store.close()
