"""Migrations, the refusal of a newer store, and data surviving a reopen."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import asyncpg
import pytest

import llmgw
from llmgw.store import StoreTooNew, UsageRow, open_store, parse_dsn
from llmgw.store.migrate import Migration, load_migrations, pending

from .conftest import START, FakeClock


async def raw_sql(dsn: str, sql: str) -> list[tuple]:
    """Run SQL beside the store, as another tool (or a newer llmgw) would."""
    kind, where = parse_dsn(dsn)
    if kind == "sqlite":
        with sqlite3.connect(where) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    conn = await asyncpg.connect(where)
    try:
        return [tuple(r) for r in await conn.fetch(sql)]
    finally:
        await conn.close()


def test_both_dialects_have_the_same_migrations() -> None:
    sqlite_files = [(m.version, m.name) for m in load_migrations("sqlite")]
    postgres_files = [(m.version, m.name) for m in load_migrations("postgres")]
    assert sqlite_files == postgres_files
    assert [v for v, _ in sqlite_files] == list(range(1, len(sqlite_files) + 1))


def test_pending() -> None:
    files = [Migration(1, "init", ""), Migration(2, "more", "")]
    assert pending({}, files) == files
    assert pending({1: "init"}, files) == files[1:]
    assert pending({1: "init", 2: "more"}, files) == []
    with pytest.raises(StoreTooNew) as e:
        pending({1: "init", 2: "more", 3: "future"}, files)
    assert str(e.value) == (
        "this store was written by a newer llmgw (schema version 3, this llmgw knows up to 2):"
        " upgrade llmgw on this machine"
    )


async def test_store_too_new_is_refused(store_dsn: str) -> None:
    store = await open_store(store_dsn)
    known = store.schema_version
    assert known == load_migrations(store.dialect)[-1].version
    await store.close()
    applied_at = "'2030-01-01T00:00:00.000000Z'" if store_dsn.startswith("sqlite") else "now()"
    await raw_sql(
        store_dsn,
        f"INSERT INTO schema_migrations (version, name, applied_at) VALUES ({known + 5}, 'future', {applied_at})",
    )
    with pytest.raises(StoreTooNew) as e:
        await open_store(store_dsn)
    assert str(e.value) == (
        f"this store was written by a newer llmgw (schema version {known + 5},"
        f" this llmgw knows up to {known}): upgrade llmgw on this machine"
    )
    assert (e.value.store_version, e.value.known_version) == (known + 5, known)


async def test_control_planes_starting_together_migrate_once(store_dsn: str) -> None:
    stores = await asyncio.gather(*(open_store(store_dsn) for _ in range(4)))
    try:
        assert {s.schema_version for s in stores} == {load_migrations(stores[0].dialect)[-1].version}
        await stores[0].create_org("Acme")
        assert [o.name for o in await stores[3].list_orgs()] == ["Acme"]
    finally:
        for s in stores:
            await s.close()
    rows = await raw_sql(store_dsn, "SELECT version FROM schema_migrations")
    assert len(rows) == len(load_migrations(stores[0].dialect))


async def test_data_survives_close_and_reopen(store_dsn: str) -> None:
    clock = FakeClock()
    store = await open_store(store_dsn, clock=clock)
    org = await store.create_org("Acme")
    project = await store.create_project(org.id, "train")
    key = await store.create_key(
        key_hash=hashlib.sha256(b"k").hexdigest(), prefix="sk", name="k", project_id=project.id,
        expires_at=START + dt.timedelta(days=1), allowed_models=["m"],
    )
    await store.set_limits("project", project.id, budget_micros=5, budget_period="day")
    await store.insert_usage_rows([UsageRow(request_id="r1", at=START, org_id=org.id, cost_micros=3)])
    await store.set_setting("a.b", [1, "two"], actor="me")
    lease = await store.try_acquire_lease("leader", "cp1", 60)
    event = await store.append_audit("me", "org.create", org.id, {"name": "Acme"})
    await store.close()

    again = await open_store(store_dsn, clock=clock)
    try:
        assert await again.get_org(org.id) == org
        assert await again.get_key_by_hash(key.key_hash) == key
        assert (await again.get_limits("project", project.id)).budget_micros == 5
        assert (await again.get_usage("r1")).cost_micros == 3
        assert await again.spend_since("org", org.id, START - dt.timedelta(hours=1)) == 3
        assert (await again.get_setting("a.b")).value == [1, "two"]
        assert await again.get_lease("leader") == lease
        assert await again.list_audit() == [event]
        await again.ping()
    finally:
        await again.close()
    rows = await raw_sql(store_dsn, "SELECT version FROM schema_migrations ORDER BY version")
    assert [r[0] for r in rows] == [m.version for m in load_migrations(again.dialect)]


async def test_closed_store_refuses_work(store: object) -> None:
    await store.close()  # type: ignore[attr-defined]
    await store.close()  # type: ignore[attr-defined]  (twice is fine)
    with pytest.raises(Exception, match="closed"):
        await store.list_orgs()  # type: ignore[attr-defined]


def test_migrations_load_from_a_zipapp(tmp_path: Path) -> None:
    """The SQL files are resources: found when llmgw runs from a zip file."""
    package = Path(llmgw.__file__).parent
    archive = tmp_path / "llmgw.pyz"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(package / "__init__.py", "llmgw/__init__.py")
        for path in sorted((package / "store").rglob("*")):
            if path.suffix in (".py", ".sql"):
                z.write(path, f"llmgw/{path.relative_to(package)}")
    program = (
        "import asyncio, sys\n"
        f"sys.path.insert(0, {str(archive)!r})\n"
        "import llmgw.store, llmgw.store.migrate as m\n"
        f"assert llmgw.store.__file__.startswith({str(archive)!r}), llmgw.store.__file__\n"
        "print([x.version for x in m.load_migrations('sqlite')], len(m.load_migrations('postgres')))\n"
        "async def main():\n"
        "    s = await llmgw.store.open_store('sqlite::memory:')\n"
        "    print(s.schema_version, (await s.create_org('Acme')).name)\n"
        "    await s.close()\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, done.stderr
    versions = [m.version for m in load_migrations("sqlite")]
    assert done.stdout.splitlines() == [f"{versions} {len(versions)}", f"{versions[-1]} Acme"]


async def test_many_opening_a_new_sqlite_file_at_once_all_get_it(tmp_path) -> None:
    # One of them puts the new file in WAL mode, a step SQLite does not wait on: the others try again.
    for round_ in range(20):
        dsn = f"sqlite:///{tmp_path}/store-{round_}.db"
        stores = await asyncio.gather(*(open_store(dsn) for _ in range(6)), return_exceptions=True)
        refused = [s for s in stores if isinstance(s, BaseException)]
        for s in stores:
            if not isinstance(s, BaseException):
                await s.close()
        assert not refused, refused[0]
