"""Backing up and restoring a SQLite store with its configuration: the archive, its checks, its folder."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import os
import sqlite3
import stat
import sys
import tarfile
from pathlib import Path

import attrs
import pytest

from llmgw.backup import ArchiveDamaged, BackupError, list_archives, make_backup
from llmgw.backup.archive import ManifestFile, verify, write_archive
from llmgw.backup.restore import (
    apply_restore,
    check_not_in_use,
    plan_restore,
    sqlite_in_use,
)
from llmgw.store import open_store
from llmgw.store.migrate import load_migrations

from .conftest import check_seeded, lay_out, seed

NEWEST = load_migrations("sqlite")[-1].version


def ticking(start: dt.datetime = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)):
    """A clock a second later at each call (archives are named by the second)."""
    state = {"now": start}

    def now() -> dt.datetime:
        state["now"] += dt.timedelta(seconds=1)
        return state["now"]

    return now


def digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


async def test_round_trip_with_the_server_running_into_a_fresh_machine(machine, tmp_path):
    store = await open_store(machine.store_dsn)  # as a running server has it open
    try:
        seeded = await seed(store)
        result = await make_backup(machine.config(), config_path=str(machine.config_path), store=store)
        await store.create_org("made-after-the-backup")
    finally:
        await store.close()

    names = {f.name for f in result.manifest.files}
    assert names == {"store/llmgw.db", "config/server.yaml", "config/tls/ca.pem", "config/tls/server.pem",
                     "config/tls/server-key.pem", f"files{machine.token}"}
    assert result.manifest.schema_version == NEWEST and result.manifest.store_kind == "sqlite"
    assert os.path.dirname(result.path) == str(machine.db.parent / "backups")  # beside the store by default
    assert result.name.startswith("llmgw-backup-") and result.name.endswith("Z.tar.gz")
    assert digest(result.path) == result.sha256 and os.path.getsize(result.path) == result.size
    assert Path(result.path + ".sha256").read_text() == f"{result.sha256}  {result.name}\n"

    # A fresh machine: nothing there but its own server.yaml naming a store file not made yet.
    fresh = lay_out(tmp_path / "cp2")
    plan = await plan_restore(result.path, str(fresh.config_path), config_too=False)
    await check_not_in_use(plan)
    done = await apply_restore(plan)
    assert done == [f"store: {fresh.db} restored"]
    assert stat.S_IMODE(os.stat(fresh.db).st_mode) == 0o600
    restored = await open_store(fresh.store_dsn)
    try:
        await check_seeded(restored, seeded)
        assert await restored.get_org_by_name("made-after-the-backup") is None
    finally:
        await restored.close()


async def test_restore_in_place_keeps_the_old_file_and_leaves_no_journal_behind(machine):
    config = machine.config()
    store = await open_store(machine.store_dsn)
    try:
        seeded = await seed(store)
        result = await make_backup(config, config_path=str(machine.config_path), store=store)
        await store.create_org("later")
    finally:
        await store.close()
    plan = await plan_restore(result.path, str(machine.config_path), config_too=False)
    lines = plan.lines()
    assert f"The store {machine.db} is replaced (the file there now is kept as {machine.db}.before-restore)." in lines
    assert "The configuration in the archive is left out (--config-too restores it)." in lines
    await apply_restore(plan)
    assert not os.path.exists(f"{machine.db}-wal")
    store = await open_store(machine.store_dsn)
    try:
        await check_seeded(store, seeded)
        assert await store.get_org_by_name("later") is None
    finally:
        await store.close()
    before = await open_store(f"{machine.db}.before-restore")
    try:
        assert await before.get_org_by_name("later") is not None
    finally:
        await before.close()


async def test_the_archive_and_its_folder_are_private(machine):
    result = await make_backup(machine.config(), config_path=str(machine.config_path))
    folder = os.path.dirname(result.path)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(result.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(result.path + ".sha256").st_mode) == 0o600
    assert sorted(os.listdir(folder)) == [result.name, result.name + ".sha256"]  # nothing staged is left
    with tarfile.open(result.path) as tar:
        members = tar.getmembers()
        assert members[0].name == "manifest.json"
        assert all(m.mode == 0o600 and m.uid == 0 and m.uname == "" for m in members)
        manifest = json.loads(tar.extractfile("manifest.json").read())
    assert manifest["format"] == 1 and manifest["store"]["kind"] == "sqlite"
    key = next(f for f in manifest["files"] if f["name"] == "config/tls/server-key.pem")
    assert key["mode"] == "0600" and key["size"] == len("PRIVATE KEY\n")
    assert key["sha256"] == hashlib.sha256(b"PRIVATE KEY\n").hexdigest()


async def test_keep_n_removes_the_oldest_archives_only(machine):
    config = machine.config()
    folder = machine.db.parent / "backups"
    folder.mkdir()
    (folder / "notes.txt").write_text("not an archive")
    (folder / "llmgw-backup-manual.tar.gz").write_text("not named as llmgw names them")
    clock = ticking()
    made = [await make_backup(config, keep=2, clock=clock) for _ in range(4)]
    assert made[2].removed == (made[0].name,) and made[3].removed == (made[1].name,)
    left = [a.name for a in list_archives(str(folder))]
    assert left == [made[3].name, made[2].name]
    assert list_archives(str(folder))[0].sha256 == made[3].sha256
    assert sorted(os.listdir(folder)) == sorted([made[2].name, made[2].name + ".sha256", made[3].name,
                                                 made[3].name + ".sha256", "notes.txt",
                                                 "llmgw-backup-manual.tar.gz"])
    # Two in the same second get different names; keep 0 keeps every one.
    same = lambda: dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
    a = await make_backup(config, keep=0, clock=same)
    b = await make_backup(config, keep=0, clock=same)
    assert a.name == "llmgw-backup-20270101T000000Z.tar.gz" and b.name == "llmgw-backup-20270101T000000Z-2.tar.gz"
    assert len(list_archives(str(folder))) == 4


def _damaged_copies(path: str, tmp_path) -> dict[str, str]:
    """The archive flipped in the middle, cut short, and re-packed with one file changed (manifest kept)."""
    raw = Path(path).read_bytes()
    out = {}
    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 0xFF
    out["flipped"] = bytes(flipped)
    out["truncated"] = raw[: len(raw) * 2 // 3]
    with tarfile.open(path) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    repacked = tmp_path / "repacked.tar.gz"
    with tarfile.open(repacked, "w:gz") as tar:
        for m, data in members:
            if m.name == "config/server.yaml":
                data = data.replace(b"# this machine", b"# someone else")  # same size, other bytes
            import io

            tar.addfile(m, io.BytesIO(data))
    out["altered"] = repacked.read_bytes()
    return out


async def test_a_damaged_archive_is_refused_and_nothing_changes(machine, tmp_path):
    store = await open_store(machine.store_dsn)
    try:
        await seed(store)
    finally:
        await store.close()
    result = await make_backup(machine.config(), config_path=str(machine.config_path))
    (machine.etc / "server.yaml").write_text((machine.etc / "server.yaml").read_text() + "# edited since\n")
    before = {p: digest(p) for p in (machine.db, machine.config_path, machine.etc / "tls" / "ca.pem")}
    listing = sorted(os.listdir(machine.db.parent)), sorted(os.listdir(machine.etc))
    for kind, data in _damaged_copies(result.path, tmp_path).items():
        bad = tmp_path / f"{kind}.tar.gz"
        bad.write_bytes(data)
        with pytest.raises(ArchiveDamaged) as caught:
            await plan_restore(str(bad), str(machine.config_path), config_too=True)
        if kind == "altered":
            assert "config/server.yaml: its sha256 is not the one in the manifest" in str(caught.value)
        assert {p: digest(p) for p in before} == before, kind
        assert (sorted(os.listdir(machine.db.parent)), sorted(os.listdir(machine.etc))) == listing, kind
    not_ours = tmp_path / "not-ours.tar.gz"
    with tarfile.open(not_ours, "w:gz") as tar:
        tar.add(machine.config_path, arcname="server.yaml")
    with pytest.raises(ArchiveDamaged, match="not an llmgw backup archive"):
        verify(str(not_ours))


async def test_config_too_puts_files_back_keeping_what_it_replaces(machine):
    result = await make_backup(machine.config(), config_path=str(machine.config_path))
    original = machine.config_path.read_text()
    machine.config_path.write_text(original.replace("# this machine's", "# an edited"))
    (machine.etc / "tls" / "server-key.pem").unlink()
    machine.token.write_text("another token\n")
    plan = await plan_restore(result.path, str(machine.config_path), config_too=True)
    assert len(plan.config_files) == 5 and plan.left_out == ()
    done = await apply_restore(plan)
    assert done[1] == "configuration: 3 file(s) restored, 2 already as in the archive"
    assert machine.config_path.read_text() == original
    assert (machine.etc / "server.yaml.before-restore").read_text().startswith("# an edited")
    assert (machine.etc / "tls" / "server-key.pem").read_text() == "PRIVATE KEY\n"
    assert stat.S_IMODE(os.stat(machine.etc / "tls" / "server-key.pem").st_mode) == 0o600
    assert machine.token.read_text().startswith("admin-token-of-")
    assert (machine.token.parent / "admin-token.before-restore").read_text() == "another token\n"


async def test_a_file_outside_the_folder_goes_back_only_where_server_yaml_names_it(machine, tmp_path):
    result = await make_backup(machine.config(), config_path=str(machine.config_path))
    plan = await plan_restore(result.path, str(machine.config_path), config_too=False)
    assert plan.config_files == ()  # without --config-too nothing but the store
    plan = await plan_restore(result.path, str(machine.config_path), config_too=True)
    assert [(f.name, dest) for f, dest in plan.config_files if f.role == "file"] == \
        [(f"files{machine.token}", str(machine.token))]

    # An archive whose manifest (checksums and all) was made to carry a file to a path server.yaml does not
    # name: verified, but that file is not written anywhere.
    stray = tmp_path / "stray"
    stray.write_text("not llmgw's\n")
    target = tmp_path / "etc-passwd-of-someone"
    extra = ManifestFile(name=f"files{target}", size=stray.stat().st_size, sha256=digest(stray), mode=0o644,
                         role="file", source=str(target))
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    manifest = verify(result.path, str(unpacked))
    staged = {f.name: str(unpacked / f.name) for f in manifest.files} | {extra.name: str(stray)}
    crafted_dir = tmp_path / "crafted"
    crafted_dir.mkdir()
    crafted, _, _, _ = write_archive(str(crafted_dir), attrs.evolve(manifest, files=(*manifest.files, extra)), staged)
    plan = await plan_restore(crafted, str(machine.config_path), config_too=True)
    assert plan.left_out == (f"{target} (the restored server.yaml does not name it)",)
    assert f"  not restored: {target} (the restored server.yaml does not name it)" in plan.lines()
    await apply_restore(plan)
    assert not target.exists()


async def test_an_archive_without_configuration_cannot_restore_it(machine):
    result = await make_backup(machine.config())  # no config_path: a server not started from a file
    assert [f.name for f in result.manifest.files] == ["store/llmgw.db"]
    with pytest.raises(BackupError, match="holds no configuration"):
        await plan_restore(result.path, str(machine.config_path), config_too=True)


async def test_a_store_from_a_newer_schema_is_refused(machine, tmp_path):
    conn = sqlite3.connect(machine.db)
    conn.execute("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'from_the_future', '')",
                 (NEWEST + 5,))
    conn.commit()
    conn.close()
    result = await make_backup(machine.config(), config_path=str(machine.config_path))  # a copy is still a copy
    assert result.manifest.schema_version == NEWEST + 5
    fresh = lay_out(tmp_path / "cp2")
    with pytest.raises(BackupError) as caught:
        await plan_restore(result.path, str(fresh.config_path), config_too=False)
    assert f"schema version {NEWEST + 5}, this llmgw knows up to {NEWEST}" in str(caught.value)
    assert "upgrade llmgw" in str(caught.value)
    assert not fresh.db.exists()


async def test_a_store_of_the_other_kind_is_refused(machine, tmp_path):
    result = await make_backup(machine.config())
    other = lay_out(tmp_path / "cp2", store_dsn="postgres://llmgw@db.invalid:5432/llmgw")
    with pytest.raises(BackupError, match="holds a sqlite store, but store.dsn .* is postgres"):
        await plan_restore(result.path, str(other.config_path), config_too=False)


async def test_a_store_in_use_is_not_restored(machine):
    result = await make_backup(machine.config())
    plan = await plan_restore(result.path, str(machine.config_path), config_too=False)
    hold = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1]); "
            "c.execute('SELECT count(*) FROM schema_migrations').fetchall(); print('open', flush=True); "
            "time.sleep(60)")
    holder = await asyncio.create_subprocess_exec(sys.executable, "-c", hold, str(machine.db),
                                                  stdout=asyncio.subprocess.PIPE)
    try:
        assert await holder.stdout.readline() == b"open\n"
        assert sqlite_in_use(str(machine.db))
        with pytest.raises(BackupError, match="another process has the store .* open"):
            await check_not_in_use(plan)
    finally:
        holder.kill()
        await holder.wait()
    assert not sqlite_in_use(str(machine.db))
    await check_not_in_use(plan)


async def test_a_server_answering_on_admin_listen_stops_a_restore(machine):
    result = await make_backup(machine.config())
    plan = await plan_restore(result.path, str(machine.config_path), config_too=False)
    host, port = plan.config.admin_listen.rsplit(":", 1)
    server = await asyncio.start_server(lambda r, w: w.close(), host, int(port))
    try:
        with pytest.raises(BackupError, match=f"something answers on admin_listen \\({host}:{port}\\)"):
            await check_not_in_use(plan)
    finally:
        server.close()
        await server.wait_closed()


async def test_a_backup_while_the_store_is_written_is_consistent(machine):
    store = await open_store(machine.store_dsn)
    stop = asyncio.Event()

    async def writer() -> int:
        n = 0
        while not stop.is_set():
            await store.create_org(f"org-{n}")
            n += 1
            await asyncio.sleep(0)
        return n

    try:
        task = asyncio.create_task(writer())
        await asyncio.sleep(0.05)
        result = await make_backup(machine.config(), store=store)
        stop.set()
        written = await task
    finally:
        await store.close()
    assert written > 0
    fresh_db = machine.root / "check.db"
    plan_dir = machine.root / "unpacked"
    plan_dir.mkdir()
    verify(result.path, str(plan_dir))
    os.replace(plan_dir / "store" / "llmgw.db", fresh_db)
    conn = sqlite3.connect(fresh_db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        count = conn.execute("SELECT count(*) FROM orgs").fetchone()[0]
    finally:
        conn.close()
    assert 0 <= count <= written


async def test_clear_refusals_for_what_cannot_be_backed_up(tmp_path):
    machine = lay_out(tmp_path / "cp1")  # no store made yet
    with pytest.raises(BackupError, match="there is no SQLite store at"):
        await make_backup(machine.config())
    with pytest.raises(BackupError, match="does not exist; create it"):
        await make_backup(machine.config(), to_dir=str(tmp_path / "no" / "such"))
    assert not (machine.db.parent / "backups").exists() or os.listdir(machine.db.parent / "backups") == []
