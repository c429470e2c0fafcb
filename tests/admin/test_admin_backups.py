"""POST /backups makes an archive on the control plane now; GET /backups lists those kept."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import attrs

from llmgw.admin.state import ADMIN
from llmgw.config.server import BackupConfig, ServerConfig


def config_in(tmp_path, *, keep: int = 7, folder: str | None = None) -> tuple[ServerConfig, str]:
    """A server.yaml in its own folder with a certificate beside it, and the config read from it."""
    etc = tmp_path / "etc"
    (etc / "tls").mkdir(parents=True)
    (etc / "tls" / "ca.pem").write_text("CA\n")
    path = etc / "server.yaml"
    path.write_text("admin_listen: 127.0.0.1:9090\n")
    config = attrs.evolve(ServerConfig(), admin_token_file=str(tmp_path / "no-token-yet"),
                          backup=BackupConfig(dir=folder or str(tmp_path / "backups"), keep=keep))
    return config, str(path)


async def test_back_up_now_then_list(make_admin, tmp_path):
    config, path = config_in(tmp_path, keep=2)
    admin = await make_admin(None, config=config, config_path=path)
    made = await admin.call("POST", "/backups", status=201)
    assert set(made) == {"path", "name", "size", "sha256", "created", "store", "schema_version", "config_dir",
                         "config_files", "removed", "encrypted", "copies"}
    assert made["encrypted"] is False and made["copies"] == []
    assert made["path"] == str(tmp_path / "backups" / made["name"])
    assert made["store"] == "sqlite" and made["schema_version"] == admin.store.schema_version
    assert made["config_dir"] == str(tmp_path / "etc") and made["config_files"] == 2 and made["removed"] == []
    assert hashlib.sha256(Path(made["path"]).read_bytes()).hexdigest() == made["sha256"]
    assert os.path.getsize(made["path"]) == made["size"]
    assert stat.S_IMODE(os.stat(made["path"]).st_mode) == 0o600

    events = (await admin.call("GET", "/audit", params={"action": "backups.create"}))["events"]
    assert [(e["target"], e["outcome"]) for e in events] == [(f"backup:{made['name']}", "ok")]

    second = await admin.call("POST", "/backups", status=201)
    third = await admin.call("POST", "/backups", status=201)
    assert third["removed"] == [made["name"]] and second["removed"] == []
    listed = await admin.call("GET", "/backups")
    assert listed["dir"] == str(tmp_path / "backups") and listed["keep"] == 2
    assert [(b["name"], b["sha256"], b["size"]) for b in listed["backups"]] == [
        (third["name"], third["sha256"], third["size"]), (second["name"], second["sha256"], second["size"])]


async def test_without_server_yaml_only_the_store_is_kept(make_admin, tmp_path):
    config, _ = config_in(tmp_path)
    admin = await make_admin(None, config=config)
    made = await admin.call("POST", "/backups", status=201)
    assert made["config_dir"] is None and made["config_files"] == 0


async def test_an_empty_folder_lists_nothing_and_the_default_is_beside_the_store(make_admin, tmp_path):
    admin = await make_admin(None, config=ServerConfig())
    listed = await admin.call("GET", "/backups")
    assert listed == {"dir": str(tmp_path / "backups"), "keep": 7, "backups": [], "encrypted": False,
                      "copy_to": [], "schedule": "", "next_due": None, "last_scheduled": None}


async def test_one_at_a_time_and_failures_said(make_admin, tmp_path):
    config, path = config_in(tmp_path, folder=str(tmp_path / "no" / "such" / "folder"))
    admin = await make_admin(None, config=config, config_path=path)
    message = await admin.refused("POST", "/backups", status=500)
    assert message.startswith("the backup failed: the backup folder") and "does not exist" in message
    events = (await admin.call("GET", "/audit", params={"action": "backups.create"}))["events"]
    assert events[0]["outcome"] == "refused" and events[0]["reason"] == message

    lock = admin.client.server.app[ADMIN].backup_lock
    async with lock:
        message = await admin.refused("POST", "/backups", status=409)
    assert message == "a backup is being made on this control plane already; wait for it and ask again"
