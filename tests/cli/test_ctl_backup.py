"""`llmgw ctl backup` and `llmgw ctl backups` against a live in-process admin API."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ctl_live import ctl_against, ok, ok_json


@pytest.fixture
def live(tmp_path, monkeypatch):
    with ctl_against(tmp_path, monkeypatch) as server:
        yield server


def test_backup_then_list(capsys, live, tmp_path):
    assert ok(capsys, "backups").splitlines() == [
        f"{tmp_path}/backups (keeping 7)",
        "  NOT ENCRYPTED: the archives hold key and password hashes and private keys in clear; set "
        "backup.encrypt_to",
        "(none)"]
    out = ok(capsys, "backup", "--actor", "ann").splitlines()
    path = out[0]
    assert path.startswith(f"{tmp_path}/backups/llmgw-backup-") and os.path.isfile(path)
    sha256 = Path(path + ".sha256").read_text().split()[0]
    assert out[2] == f"  sha256   {sha256}"
    assert out[3].startswith("  holds    the sqlite store (schema version ")
    assert out[3].endswith("and no configuration (the server was not started from a file)")
    assert out[-1] == "It is not encrypted and holds key and password hashes and private keys: set backup.encrypt_to."
    made = ok_json(capsys, "backup")
    table = ok(capsys, "backups").splitlines()
    assert table[2].split()[:2] == ["NAME", "MADE"]
    assert table[3].startswith(made["name"]) and table[3].endswith(made["sha256"])
    assert table[4].startswith(os.path.basename(path)) and table[4].endswith(sha256)
    listed = ok_json(capsys, "backups")
    assert [b["name"] for b in listed["backups"]] == [made["name"], os.path.basename(path)]
    events = ok_json(capsys, "audit", "--action", "backups.create")["events"]
    assert [(e["actor"], e["via"]) for e in events][-1] == ("ann", "ctl")
