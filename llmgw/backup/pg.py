"""PostgreSQL's own tools for a store there: pg_dump to back up, pg_restore to put it back.

The password never goes on a command line (where `ps` shows it) or into a
message: it is taken out of the address and handed to the tool in the
PGPASSWORD environment variable; the tool is given the rest of the address.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llmgw.backup.archive import BackupError

__all__ = ["find_tool", "other_sessions", "pg_dump", "pg_restore", "schema_version", "split_password"]

#: Where Debian and Ubuntu put each PostgreSQL version's programs, when they are not on PATH.
PG_GLOB = "/usr/lib/postgresql/*/bin"
INSTALL = "install PostgreSQL's client programs (Debian and Ubuntu: apt-get install postgresql-client)"


def find_tool(name: str) -> str:
    """The path of pg_dump or pg_restore: on PATH, else the newest under /usr/lib/postgresql."""
    found = shutil.which(name)
    if found:
        return found

    def version(folder: str) -> int:
        part = Path(folder).parent.name
        return int(part) if part.isdigit() else 0

    for folder in sorted(glob.glob(PG_GLOB), key=version, reverse=True):
        candidate = os.path.join(folder, name)
        if os.access(candidate, os.X_OK):
            return candidate
    raise BackupError(f"{name} is not installed (not on PATH, nor in {PG_GLOB}); {INSTALL}, at least as new "
                      "as the PostgreSQL server")


def split_password(dsn: str) -> tuple[str, str | None]:
    """(the address without its password, the password or None); a `password=` parameter counts too."""
    parts = urllib.parse.urlsplit(dsn)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    password = None
    if at and ":" in userinfo:
        user, secret = userinfo.split(":", 1)
        password = urllib.parse.unquote(secret)
        userinfo = user
    query = []
    for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if key == "password":
            password = value
        else:
            query.append((key, value))
    netloc = f"{userinfo}{at}{hosts}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=urllib.parse.urlencode(query))), password


def _env(password: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PGPASSWORD"}
    env.setdefault("PGAPPNAME", "llmgw-backup")
    if password:
        env["PGPASSWORD"] = password
    return env


async def _run(tool: str, args: Sequence[str], password: str | None, what: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        find_tool(tool), *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE, env=_env(password))
    try:
        _, err = await proc.communicate()
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if proc.returncode != 0:
        said = err.decode("utf-8", errors="replace").strip()
        if password:
            said = said.replace(password, "***")
        lines = said.splitlines()
        said = "; ".join(lines[-5:]) if lines else f"exit status {proc.returncode}"
        hint = ""
        if "version mismatch" in said:
            hint = f" ({tool} must be at least as new as the server: {INSTALL} of the server's version)"
        raise BackupError(f"{what} failed: {said}{hint}")


async def pg_dump(dsn: str, dest: str, *, snapshot: str | None = None) -> None:
    """The store's database into `dest`, in pg_dump's custom format (compressed, read by pg_restore)."""
    conninfo, password = split_password(dsn)
    more = [f"--snapshot={snapshot}"] if snapshot else []
    await _run("pg_dump", ["--format=custom", "--no-password", *more, f"--file={dest}", f"--dbname={conninfo}"],
               password, "pg_dump")


async def pg_dump_counted(dsn: str, dest: str) -> dict[str, int]:
    """pg_dump into `dest`, and the rows of each of llmgw's tables in the very snapshot it dumped.

    The rows are counted in a repeatable-read transaction whose snapshot is
    exported and given to pg_dump, so the counts are the dump's whatever is
    written meanwhile (what the restore drill checks a restored copy against).
    """
    conn = await _connect(dsn)
    try:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            snapshot = await conn.fetchval("SELECT pg_export_snapshot()")
            counts = await count_rows(conn)
            await pg_dump(dsn, dest, snapshot=snapshot)
    finally:
        await conn.close()
    return counts


async def count_rows(conn: Any) -> dict[str, int]:
    """Rows in each table of the connection's schema but the schema's history, as the SQLite count does."""
    names = [r["tablename"] for r in await conn.fetch(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename <> 'schema_migrations' "
        "ORDER BY tablename")]
    return {t: int(await conn.fetchval(f'SELECT count(*) FROM "{t}"')) for t in names}


async def count_rows_at(dsn: str) -> dict[str, int]:
    conn = await _connect(dsn)
    try:
        return await count_rows(conn)
    finally:
        await conn.close()


async def holds_tables(dsn: str) -> list[str]:
    """The tables already in the database's schema (a scratch database for the drill must have none)."""
    conn = await _connect(dsn)
    try:
        return [r["tablename"] for r in await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename")]
    finally:
        await conn.close()


async def pg_restore(dsn: str, dump: str) -> None:
    """The dump into the store's database, dropping what it replaces; in one transaction, so all or nothing."""
    conninfo, password = split_password(dsn)
    await _run("pg_restore", ["--clean", "--if-exists", "--no-owner", "--single-transaction", "--no-password",
                              f"--dbname={conninfo}", dump], password, "pg_restore")


async def _connect(dsn: str):
    import asyncpg

    from llmgw.store.postgres import redact, session_attrs_default

    kwargs = {}
    attrs_default = session_attrs_default(dsn)
    if attrs_default is not None:
        kwargs["target_session_attrs"] = attrs_default
    try:
        return await asyncpg.connect(dsn, timeout=10, server_settings={"application_name": "llmgw-backup"},
                                     **kwargs)
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as exc:
        raise BackupError(f"cannot connect to the store at {redact(dsn)}: {exc}") from None


async def schema_version(dsn: str) -> int:
    """The newest migration applied to the store (0 for a database llmgw never used)."""
    conn = await _connect(dsn)
    try:
        exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
        if not exists:
            return 0
        return int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_migrations"))
    finally:
        await conn.close()


async def other_sessions(dsn: str) -> list[str]:
    """Who else is connected to the store's database now (application and address), for refusing a restore."""
    conn = await _connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT coalesce(nullif(application_name, ''), 'a client') AS app, "
            "coalesce(host(client_addr), 'a local socket') AS addr FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
    finally:
        await conn.close()
    return sorted({f"{r['app']} from {r['addr']}" for r in rows})
