"""Addresses, and what is particular to each backend: SQLite's file, PostgreSQL's
several hosts and reconnecting."""

from __future__ import annotations

import os
import stat

import asyncpg
import pytest

from llmgw.store import Invalid, StoreUnavailable, open_store, parse_dsn
from llmgw.store.postgres import numbered, redact, session_attrs_default


def test_parse_dsn() -> None:
    assert parse_dsn("sqlite:///var/lib/llmgw/store.db") == ("sqlite", "/var/lib/llmgw/store.db")
    assert parse_dsn("sqlite::memory:") == ("sqlite", None)
    assert parse_dsn("/srv/store.db") == ("sqlite", "/srv/store.db")
    assert parse_dsn("store.db") == ("sqlite", os.path.abspath("store.db"))
    assert parse_dsn("~/s.db") == ("sqlite", os.path.expanduser("~/s.db"))
    multi = "postgres://u:p@h1:5432,h2:5432/llmgw?target_session_attrs=read-write"
    assert parse_dsn(multi) == ("postgres", multi)
    assert parse_dsn("postgresql://h/db") == ("postgres", "postgresql://h/db")
    for bad, message in [
        ("", "empty"),
        ("sqlite://relative.db", "three slashes"),
        ("mysql://h/db", "unknown kind 'mysql'"),
    ]:
        with pytest.raises(Invalid, match=message):
            parse_dsn(bad)


def test_postgres_dsn_helpers() -> None:
    assert redact("postgres://llmgw:s3cret@h1:5432,h2:5432/llmgw?sslmode=disable") == (
        "postgres://llmgw:***@h1:5432,h2:5432/llmgw?sslmode=disable"
    )
    assert redact("postgres://h/db?password=s3cret&sslmode=require") == (
        "postgres://h/db?password=%2A%2A%2A&sslmode=require"
    )
    assert session_attrs_default("postgres://u@h1,h2/db") == "read-write"
    assert session_attrs_default("postgres://u@h1:1,h2:2/db?target_session_attrs=any") is None
    assert session_attrs_default("postgres://u@h1/db") is None
    assert numbered("SELECT ? WHERE a = '?' AND b IN (?, ?)") == "SELECT $1 WHERE a = '?' AND b IN ($2, $3)"


async def test_sqlite_file_and_its_journal_are_private(tmp_path) -> None:
    path = tmp_path / "store.db"
    store = await open_store(str(path))
    try:
        assert store.dialect == "sqlite"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / "store.db-journal").stat().st_mode) == 0o600
        assert not (tmp_path / "store.db-wal").exists()  # a rollback journal, not WAL (llmgw.store.sqlite)
    finally:
        await store.close()
    with pytest.raises(Invalid, match="does not exist"):
        await open_store(str(tmp_path / "missing" / "store.db"))


async def test_memory_store(tmp_path) -> None:
    store = await open_store("sqlite::memory:")
    try:
        await store.create_org("Acme")
        assert [o.name for o in await store.list_orgs()] == ["Acme"]
    finally:
        await store.close()


async def test_postgres_multi_host_finds_the_live_one(postgres_server) -> None:
    name = postgres_server.create_database()
    try:
        dead = f"127.0.0.1:{_closed_port()}"
        live = f"{postgres_server.host}:{postgres_server.port}"
        dsn = f"postgres://postgres@{dead},{live}/{name}?target_session_attrs=read-write"
        store = await open_store(dsn)
        try:
            assert store.dialect == "postgres"
            await store.create_org("Acme")
            await store.ping()
        finally:
            await store.close()
        # The same without saying: read-write is assumed for several hosts.
        store = await open_store(f"postgres://postgres@{dead},{live}/{name}")
        await store.close()
    finally:
        postgres_server.drop_database(name)


async def test_postgres_reconnects_once_when_the_connection_dies(postgres_server) -> None:
    name = postgres_server.create_database()
    try:
        store = await open_store(postgres_server.dsn(name))
        try:
            org = await store.create_org("Acme")
            # What a switchover does to every open connection.
            killed = postgres_server.psql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                f" WHERE datname = '{name}' AND application_name = 'llmgw'"
            )
            assert int(killed) >= 1
            assert await store.get_org(org.id) == org
            await store.create_team(org.id, "ml")
        finally:
            await store.close()
    finally:
        postgres_server.drop_database(name)


async def test_postgres_unreachable(postgres_server) -> None:
    with pytest.raises(StoreUnavailable, match=r"cannot connect to postgres://u:\*\*\*@127.0.0.1"):
        await open_store(f"postgres://u:secret@127.0.0.1:{_closed_port()}/db")


async def test_postgres_schema_matches_sqlite(postgres_server, tmp_path) -> None:
    """The two dialects' tables and columns are the same."""
    name = postgres_server.create_database()
    try:
        pg = await open_store(postgres_server.dsn(name))
        await pg.close()
        conn = await asyncpg.connect(postgres_server.dsn(name))
        try:
            rows = await conn.fetch(
                "SELECT table_name, column_name FROM information_schema.columns"
                " WHERE table_schema = 'public'"
            )
        finally:
            await conn.close()
        pg_columns = {(r["table_name"], r["column_name"]) for r in rows}
    finally:
        postgres_server.drop_database(name)

    import sqlite3

    path = tmp_path / "s.db"
    lite = await open_store(str(path))
    await lite.close()
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        lite_columns = {
            (t, r[1]) for t in tables if not t.startswith("sqlite_") for r in conn.execute(f"PRAGMA table_info({t})")
        }
    assert pg_columns == lite_columns


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
