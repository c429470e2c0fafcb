"""Backing up and restoring a PostgreSQL store with pg_dump and pg_restore, and keeping its password hidden."""

from __future__ import annotations

import asyncio

import pytest

from llmgw.backup import BackupError, make_backup, pg
from llmgw.backup.restore import apply_restore, check_not_in_use, plan_restore
from llmgw.store import open_store

from .conftest import check_seeded, lay_out, seed


@pytest.fixture
def pg_tools():
    try:
        return pg.find_tool("pg_dump"), pg.find_tool("pg_restore")
    except BackupError as exc:
        pytest.skip(f"PostgreSQL's client programs are not installed ({exc})")


@pytest.fixture
def databases(postgres_server):
    made = []

    def make() -> str:
        name = postgres_server.create_database()
        made.append(name)
        return postgres_server.dsn(name)

    yield make
    for name in made:
        postgres_server.drop_database(name)


async def test_round_trip_through_pg_dump_and_pg_restore(pg_tools, databases, tmp_path):
    first = lay_out(tmp_path / "cp1", store_dsn=databases(), backup_dir=str(tmp_path / "backups"))
    store = await open_store(first.store_dsn)
    try:
        seeded = await seed(store)
        result = await make_backup(first.config(), config_path=str(first.config_path), store=store)
        await store.create_org("made-after-the-backup")
        # The running server's own connections count as using the store.
        plan = await plan_restore(result.path, str(first.config_path), config_too=False)
        with pytest.raises(BackupError, match="the store's database is in use"):
            await check_not_in_use(plan)
    finally:
        await store.close()
    assert result.manifest.store_kind == "postgres"
    assert [f.name for f in result.manifest.files if f.role == "store"] == ["store/llmgw.dump"]
    assert result.path.startswith(str(tmp_path / "backups"))

    # Into another, empty database.
    fresh = lay_out(tmp_path / "cp2", store_dsn=databases(), backup_dir=str(tmp_path / "backups"))
    plan = await plan_restore(result.path, str(fresh.config_path), config_too=False)
    await check_not_in_use(plan)
    assert (await apply_restore(plan))[0].startswith("store: postgres://postgres@")
    restored = await open_store(fresh.store_dsn)
    try:
        await check_seeded(restored, seeded)
        assert await restored.get_org_by_name("made-after-the-backup") is None
    finally:
        await restored.close()

    # Over the database it came from: what was written since goes.
    plan = await plan_restore(result.path, str(first.config_path), config_too=False)
    await check_not_in_use(plan)
    await apply_restore(plan)
    store = await open_store(first.store_dsn)
    try:
        await check_seeded(store, seeded)
        assert await store.get_org_by_name("made-after-the-backup") is None
    finally:
        await store.close()


async def test_from_the_command_line_the_schema_version_is_read_from_the_database(pg_tools, databases, tmp_path):
    machine = lay_out(tmp_path / "cp1", store_dsn=databases(), backup_dir=str(tmp_path / "backups"))
    store = await open_store(machine.store_dsn)
    version = store.schema_version
    await store.close()
    result = await make_backup(machine.config(), config_path=str(machine.config_path))
    assert result.manifest.schema_version == version > 0


def test_the_password_goes_by_environment_never_on_the_command_line():
    dsn = "postgres://llmgw:s3cr%40t@db1:5432,db2:5432/llmgw?sslmode=require&target_session_attrs=read-write"
    conninfo, password = pg.split_password(dsn)
    assert password == "s3cr@t"
    assert conninfo == "postgres://llmgw@db1:5432,db2:5432/llmgw?sslmode=require&target_session_attrs=read-write"
    assert pg.split_password("postgres://u@h/db?password=pw&sslmode=disable") == \
        ("postgres://u@h/db?sslmode=disable", "pw")
    assert pg.split_password("postgres://u@h/db") == ("postgres://u@h/db", None)


async def test_pg_dump_is_given_the_password_in_its_environment(monkeypatch, tmp_path):
    seen = {}

    class Done:
        returncode = 1

        async def communicate(self):
            return b"", b'pg_dump: error: connection to server failed: FATAL: password authentication failed'

    async def fake_exec(*args, **kwargs):
        seen["args"] = args
        seen["env"] = kwargs["env"]
        return Done()

    monkeypatch.setattr(pg, "find_tool", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(asyncio, "create_subprocess_exec", fake_exec)
    with pytest.raises(BackupError) as caught:
        await pg.pg_dump("postgres://llmgw:hunter2@db:5432/llmgw", str(tmp_path / "x.dump"))
    assert "hunter2" not in " ".join(seen["args"]) and "hunter2" not in str(caught.value)
    assert seen["env"]["PGPASSWORD"] == "hunter2"
    assert "--dbname=postgres://llmgw@db:5432/llmgw" in seen["args"] and "--no-password" in seen["args"]
    assert str(caught.value).startswith("pg_dump failed: pg_dump: error: connection to server failed")


def test_a_missing_pg_dump_says_what_to_install(monkeypatch):
    monkeypatch.setattr(pg.shutil, "which", lambda name: None)
    monkeypatch.setattr(pg, "PG_GLOB", "/nonexistent/*/bin")
    with pytest.raises(BackupError, match=r"pg_dump is not installed .* apt-get install postgresql-client"):
        pg.find_tool("pg_dump")



def test_the_drill_restores_a_postgresql_dump_into_an_empty_database(pg_tools, databases, tmp_path, capsys):
    """The counts are taken in the snapshot pg_dump dumps; the drill refuses a database that is not empty."""
    from llmgw.cli.main import main

    first = lay_out(tmp_path / "cp1", store_dsn=databases(), backup_dir=str(tmp_path / "backups"))

    async def back_up():
        store = await open_store(first.store_dsn)
        try:
            await seed(store)
            return await make_backup(first.config(), config_path=str(first.config_path), store=store)
        finally:
            await store.close()

    result = asyncio.run(back_up())
    assert result.manifest.counts["orgs"] == 1 and result.manifest.counts["usage"] == 5
    capsys.readouterr()
    assert main(["server", "backup", "drill", result.path]) == 2
    assert "holds a PostgreSQL dump: give --into with the address of an empty database" in capsys.readouterr().err
    assert main(["server", "backup", "drill", result.path, "--into", first.store_dsn]) == 2
    assert "is not empty (it holds " in capsys.readouterr().err
    scratch = databases()
    assert main(["server", "backup", "drill", result.path, "--into", scratch]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("  ok   usage") and line.endswith("5 rows, manifest 5") for line in out)
    assert out[-1].startswith("Drill passed: all ")
