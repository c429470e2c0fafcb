"""The SQLite backend (aiosqlite): the embedded store of ``llmgw up`` and of a
single control plane.

A rollback journal kept in place (``journal_mode = TRUNCATE``), foreign keys
on, a busy timeout for other processes (``llmgw users`` run beside a server),
and no memory mapping of any of the store's files: ``mmap_size = 0`` for the
database, and no WAL, whose index (``-shm``) SQLite maps and shares between
processes. A mapped file that is made immutable (``chattr +i``), whose disk
fails or fills kills the process with SIGBUS at the next access, even a read
(SQLite writes its read mark into the WAL index). Without a mapping, every such
fault is an error from a call: a full disk or a file made read-only is
``WritesRefused``, reads go on, and writes work again once it is fixed.

Writes go through one connection, one transaction at a time, serialised by an
asyncio.Lock; reads use a second connection. Readers and a committing writer
wait on each other (the busy timeout); transactions are short.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import sqlite3
from collections.abc import Sequence
from typing import Any

import aiosqlite

from .errors import Conflict, Invalid, StoreError, StoreUnavailable, WritesRefused
from .migrate import SCHEMA_MIGRATIONS_DDL, Migration, run_migrations
from .sql_catalog import SQLCatalog
from .sql_client_data import SQLClientData
from .sql_keys import SQLKeys
from .sql_ops import SQLOps
from .sql_mail import SQLMail
from .sql_kept import SQLKept  # kept requests
from .sql_people import SQLPeople
from .sql_responses import SQLResponses
from .sql_tenancy import SQLTenancy
from .sql_web import SQLWeb
from .sqlbase import UTC, Clock, T, Work

from llmgw.compat import fromisoformat

BUSY_TIMEOUT_MS = 5000
#: The rollback journal, kept in place as an empty file between transactions (see _connect_once).
JOURNAL_MODE = "TRUNCATE"
#: In rollback-journal mode NORMAL can corrupt the file at a power loss; FULL waits for the disk at each commit.
SYNC = "FULL"
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


class SQLiteTx:
    """A transaction on one aiosqlite connection (see sqlbase.Tx)."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def fetch(self, sql: str, *args: Any) -> Sequence[sqlite3.Row]:
        async with self._conn.execute(sql, args) as cur:
            return await cur.fetchall()

    async def fetchrow(self, sql: str, *args: Any) -> sqlite3.Row | None:
        async with self._conn.execute(sql, args) as cur:
            row = await cur.fetchone()
            # Drain, so a statement with RETURNING has run to completion.
            await cur.fetchall()
            return row

    async def fetchval(self, sql: str, *args: Any) -> Any:
        row = await self.fetchrow(sql, *args)
        return None if row is None else row[0]

    async def execute(self, sql: str, *args: Any) -> int:
        async with self._conn.execute(sql, args) as cur:
            return cur.rowcount

    async def executemany(self, sql: str, args: Sequence[Sequence[Any]]) -> None:
        """An ``INSERT ... VALUES (?, ...)`` runs as one statement of many rows a chunk, anything else row by row.

        Python's sqlite3 lets go of the GIL around each step of a statement and must take it back after, so a
        row-by-row executemany in the store's thread waits on the event loop's thread once per row: with the
        loop busy, a batch of usage rows cost three times the CPU a row it costs alone. One statement for a
        chunk of rows is one step.
        """
        values = _VALUES.search(sql) if args else None
        if values is None or len(args) == 1:
            await self._conn.executemany(sql, args)
            return
        width = values.group(1).count("?")
        head, one, tail = sql[:values.start(1)], values.group(1), sql[values.end(1):]
        at = 0
        for size in _row_counts(len(args), width):
            part = args[at:at + size]
            at += size
            await self._conn.execute(head + ", ".join([one] * size) + tail, [x for row in part for x in row])


def _row_counts(rows: int, width: int) -> list[int]:
    """How many rows each statement takes: the most that fit, then powers of two for the rest.

    Each statement's text differs by its count, and sqlite3 keeps every text it prepared (128 of them):
    counts of a few sizes only keep what it holds, and the time spent preparing, small.
    """
    most = min(_MOST_ROWS, 1 << max(0, (_MAX_VARIABLES // width).bit_length() - 1))
    counts = [most] * (rows // most)
    rest = rows % most
    while rest:
        size = 1 << (rest.bit_length() - 1)
        counts.append(size)
        rest -= size
    return counts


#: One row's placeholders in an INSERT: `VALUES (?, ?, ?)`, and nothing but placeholders between its brackets.
_VALUES = re.compile(r"^\s*INSERT\b[^;]*?\bVALUES\s*(\(\s*\?(?:\s*,\s*\?)*\s*\))", re.IGNORECASE | re.DOTALL)
#: Placeholders in one statement: SQLite allows 32,766 since 3.32 and 999 before.
_MAX_VARIABLES = 32766 if sqlite3.sqlite_version_info >= (3, 32) else 999
#: Rows in one statement at most: past this, a longer statement saves little and holds more memory.
_MOST_ROWS = 64


def _translate(e: sqlite3.Error) -> StoreError:
    text = str(e)
    if isinstance(e, sqlite3.IntegrityError):
        if "UNIQUE" in text or "PRIMARY KEY" in text:
            return Conflict(f"already exists ({text})")
        return Invalid(f"refused by the database: {text}")
    lower = text.lower()
    if "disk is full" in lower:
        return WritesRefused(f"sqlite: the store's disk is full ({text}); free space there and writes resume")
    if "readonly" in lower or "read-only" in lower or "disk i/o error" in lower:
        return WritesRefused(f"sqlite: the store's file cannot be written ({text}); check that it and its folder"
                             " are writable (mount, chattr -i, chmod) and writes resume")
    if isinstance(e, sqlite3.OperationalError) and "locked" in text:
        return StoreUnavailable(
            f"sqlite: the database stayed locked by another process for {BUSY_TIMEOUT_MS} ms ({text})"
        )
    return StoreError(f"sqlite: {text}")


class SQLiteStore(SQLTenancy, SQLKeys, SQLOps, SQLCatalog, SQLWeb, SQLResponses, SQLClientData, SQLPeople,
                  SQLMail, SQLKept):
    def __init__(
        self,
        path: str | None,
        writer: aiosqlite.Connection,
        reader: aiosqlite.Connection,
        clock: Clock | None,
    ) -> None:
        super().__init__(clock)
        self.path = path  # None: in memory
        self._writer = writer
        self._reader = reader
        self._write_lock = asyncio.Lock()
        # In memory there is one connection, so reads queue behind writes.
        self._read_lock = self._write_lock if reader is writer else asyncio.Lock()
        self._closed = False
        #: connections whose last transaction was cancelled: made clean before their next one (_run)
        self._interrupted: set[aiosqlite.Connection] = set()

    @classmethod
    async def open(cls, path: str | None, *, clock: Clock | None = None) -> SQLiteStore:
        """Open (creating when absent) and migrate; ``path`` None is a private in-memory database."""
        if path is not None:
            _create_private(path)
        target = path or ":memory:"
        try:
            writer = await _connect(target, memory=path is None)
        except sqlite3.Error as e:
            raise StoreUnavailable(f"sqlite: cannot open {target}: {e}") from None
        reader = writer
        try:
            store_version = await run_migrations(_SQLiteMigrations(writer), "sqlite")
            if path is not None:
                reader = await _connect(target, memory=False)
        except BaseException:
            await writer.close()
            raise
        store = cls(path, writer, reader, clock)
        store._schema_version = store_version
        return store

    @property
    def dialect(self) -> str:
        return "sqlite"

    def _t(self, value: dt.datetime | None) -> Any:
        return None if value is None else value.astimezone(UTC).strftime(_TIME_FORMAT)

    def _dt(self, value: Any) -> dt.datetime | None:
        return None if value is None else fromisoformat(value).astimezone(UTC)

    async def _run(self, conn: aiosqlite.Connection, lock: asyncio.Lock, begin: str, work: Work[T]) -> T:
        if self._closed:
            raise StoreError("the store is closed")
        async with lock:
            if conn in self._interrupted:
                # A transaction cancelled half-way (a shutdown cancelling a read): its statements may still have
                # run in aiosqlite's thread after the await gave up, a BEGIN among them. What was queued runs
                # first; a transaction it left open is rolled back before this one begins.
                self._interrupted.discard(conn)
                await conn.execute("SELECT 1")
                if conn.in_transaction:
                    await conn.execute("ROLLBACK")
            try:
                await conn.execute(begin)
                result = await work(SQLiteTx(conn))
                await conn.execute("COMMIT")
                return result
            except BaseException as e:
                if isinstance(e, asyncio.CancelledError):
                    self._interrupted.add(conn)
                if conn.in_transaction:
                    await conn.execute("ROLLBACK")
                if isinstance(e, sqlite3.Error):
                    raise _translate(e) from e
                raise

    async def _write(self, work: Work[T]) -> T:
        # IMMEDIATE takes the write lock at once, so another process's writer
        # waits on the busy timeout instead of failing half-way.
        try:
            return await self._run(self._writer, self._write_lock, "BEGIN IMMEDIATE", work)
        except (Conflict, Invalid):
            raise
        except StoreError:
            self.write_errors += 1
            raise

    async def _read(self, work: Work[T]) -> T:
        return await self._run(self._reader, self._read_lock, "BEGIN", work)

    async def _scrub(self) -> None:
        """Rebuild the file (VACUUM) after a person is forgotten: deleted rows and older copies of changed ones
        otherwise linger in the file's free space until overwritten."""
        if self._closed or self.path is None:
            return
        async with self._write_lock:
            try:
                await self._writer.execute("VACUUM")
            except sqlite3.Error as e:
                raise _translate(e) from e

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Wait for the transactions in progress to end.
        async with self._write_lock:
            if self._reader is not self._writer:
                async with self._read_lock:
                    await self._reader.close()
            await self._writer.close()


def _create_private(path: str) -> None:
    """Create the file readable by its owner only: it holds key and password hashes."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise Invalid(f"sqlite: the folder {folder} does not exist; create it or choose another path")
    try:
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    except OSError as e:
        raise StoreUnavailable(f"sqlite: cannot open {path}: {e.strerror}") from None


async def _connect(target: str, *, memory: bool) -> aiosqlite.Connection:
    """A connection set up as the store needs it. Several processes opening a new file at once can find it
    locked while one of them sets its journal mode, a step SQLite does not wait on by itself: tried again,
    within the busy timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BUSY_TIMEOUT_MS / 1000
    delay = 0.01
    while True:
        try:
            return await _connect_once(target, memory=memory)
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or loop.time() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.25)


async def _connect_once(target: str, *, memory: bool) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(target, isolation_level=None)
    try:
        conn.row_factory = sqlite3.Row
        await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        await conn.execute("PRAGMA foreign_keys = ON")
        # No memory-mapped reads of the database file: a mapped file whose disk fails, fills or is made
        # read-only kills the process with SIGBUS instead of failing a call.
        await conn.execute("PRAGMA mmap_size = 0")
        if not memory:
            # A rollback journal, not WAL: WAL's index (-shm) is a file SQLite maps into every process that
            # opens the store, and a write into it once the file is immutable is a SIGBUS. TRUNCATE keeps the
            # journal file in place between transactions, so a store whose folder is made immutable still
            # takes writes. A store left in WAL mode by an earlier llmgw is taken out of it here (SQLite
            # checkpoints the WAL and removes -wal and -shm), once no other process has it open.
            async with conn.execute(f"PRAGMA journal_mode = {JOURNAL_MODE}") as cur:
                row = await cur.fetchone()
            if row is None or str(row[0]).lower() != JOURNAL_MODE.lower():
                raise StoreError(f"sqlite: {target} could not be put in {JOURNAL_MODE} journal mode"
                                 f" (got {row and row[0]})")
            await conn.execute(f"PRAGMA synchronous = {SYNC}")
    except BaseException:
        await conn.close()
        raise
    return conn


class _SQLiteMigrations:
    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def applied(self) -> dict[int, str]:
        await self._conn.execute(SCHEMA_MIGRATIONS_DDL["sqlite"])
        async with self._conn.execute("SELECT version, name FROM schema_migrations") as cur:
            return {int(r[0]): r[1] for r in await cur.fetchall()}

    async def apply(self, migration: Migration) -> None:
        await self.apply_all([migration])

    async def apply_all(self, migrations: list[Migration]) -> None:
        # Statement by statement inside our own transaction (executescript
        # would commit on its own), each file only if another process starting
        # on the same file has not applied it in the meantime. All of them in
        # one transaction: a new store's schema is one commit, not one a file.
        conn = self._conn
        migration = migrations[0]
        try:
            await conn.execute("BEGIN IMMEDIATE")
            for migration in migrations:
                async with conn.execute(
                    "SELECT 1 FROM schema_migrations WHERE version = ?", (migration.version,)
                ) as cur:
                    done = await cur.fetchone()
                if done is not None:
                    continue
                for statement in split_script(migration.sql):
                    await conn.execute(statement)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.name, dt.datetime.now(UTC).strftime(_TIME_FORMAT)),
                )
            await conn.execute("COMMIT")
        except BaseException as e:
            if conn.in_transaction:
                await conn.execute("ROLLBACK")
            if isinstance(e, sqlite3.Error):
                raise StoreError(
                    f"sqlite: migration {migration.version:04d}_{migration.name} failed: {e}"
                ) from e
            raise


def split_script(sql: str) -> list[str]:
    """A script's statements, split where SQLite says a statement is complete
    (so a trigger's BEGIN … END; stays whole)."""
    statements: list[str] = []
    pending = ""
    for line in sql.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    rest = "\n".join(x for x in pending.splitlines() if not x.strip().startswith("--")).strip()
    if rest:
        raise StoreError(f"sqlite: a migration ends in an unfinished statement: {rest[:80]!r}")
    return statements
