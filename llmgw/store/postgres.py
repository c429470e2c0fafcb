"""The PostgreSQL backend (asyncpg): the store of several control planes.

The DSN may name several hosts (``postgres://u:p@h1:5432,h2:5432/db``);
with ``target_session_attrs=read-write`` asyncpg connects to whichever one
accepts writes, which is how a Patroni failover is ridden out. A multi-host
DSN that does not say is given ``read-write``: the store writes.

Each unit of work runs in one transaction on a pooled connection. When the
connection turns out dead (the primary went away, or was demoted and now
refuses writes), the pool's connections are expired and the work is run
once more on a fresh one, which the DSN points at the new primary.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import urllib.parse
from collections.abc import Sequence
from typing import Any

import asyncpg

from .errors import Conflict, Invalid, StoreError, StoreUnavailable, WritesRefused
from .migrate import SCHEMA_MIGRATIONS_DDL, Migration, load_migrations, pending, run_migrations
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

log = logging.getLogger("llmgw.store")

# pg_advisory_lock key held while migrating, so control planes starting
# together do not apply the same file twice ("llmgwmig" in ASCII).
MIGRATION_LOCK = 0x6C6C_6D67_776D_6967

CONNECT_TIMEOUT_S = 10.0

# Errors after which the same work may succeed on a new connection.
_RECONNECTABLE: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.PostgresConnectionError,  # class 08: the connection broke
    asyncpg.exceptions.AdminShutdownError,  # the server is shutting down (switchover)
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError,  # starting up or in recovery
    asyncpg.exceptions.ReadOnlySQLTransactionError,  # we hold a connection to a demoted primary
    asyncpg.exceptions.TooManyConnectionsError,
    OSError,
    asyncio.TimeoutError,
)
# Errors after which the same work may succeed on the same connection.
_RETRYABLE = (asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError)


@functools.lru_cache(maxsize=1024)
def numbered(sql: str) -> str:
    """The shared SQL's ``?`` placeholders as PostgreSQL's ``$1 … $n``
    (a ``?`` inside a quoted literal is left alone)."""
    out: list[str] = []
    n = 0
    quoted = False
    for ch in sql:
        if ch == "'":
            quoted = not quoted
        if ch == "?" and not quoted:
            n += 1
            out.append(f"${n}")
        else:
            out.append(ch)
    return "".join(out)


def redact(dsn: str) -> str:
    """The DSN with its password replaced, for messages and logs."""
    parts = urllib.parse.urlsplit(dsn)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    netloc = f"{userinfo}{at}{hosts}"
    query = urllib.parse.urlencode(
        [(k, "***" if k == "password" else val) for k, val in urllib.parse.parse_qsl(parts.query)],
        safe="/",  # sslrootcert=/etc/llmgw/tls/ca.pem stays readable
    )
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def session_attrs_default(dsn: str) -> str | None:
    """``read-write`` for a multi-host DSN that does not choose; else None (the DSN decides)."""
    parts = urllib.parse.urlsplit(dsn)
    hosts = parts.netloc.rpartition("@")[2]
    query = urllib.parse.parse_qs(parts.query)
    if "," in hosts and "target_session_attrs" not in query:
        return "read-write"
    return None


def _is_reconnectable(e: BaseException) -> bool:
    if isinstance(e, _RECONNECTABLE):
        return True
    return isinstance(e, asyncpg.exceptions.InterfaceError) and "closed" in str(e)


class PGTx:
    """A transaction on one asyncpg connection (see sqlbase.Tx)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def fetch(self, sql: str, *args: Any) -> Sequence[asyncpg.Record]:
        return await self._conn.fetch(numbered(sql), *args)

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        return await self._conn.fetchrow(numbered(sql), *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self._conn.fetchval(numbered(sql), *args)

    async def execute(self, sql: str, *args: Any) -> int:
        status = await self._conn.execute(numbered(sql), *args)
        # "UPDATE 3", "DELETE 0", "INSERT 0 1": the count is the last word.
        last = status.rsplit(" ", 1)[-1] if status else ""
        return int(last) if last.isdigit() else 0

    async def executemany(self, sql: str, args: Sequence[Sequence[Any]]) -> None:
        if args:
            await self._conn.executemany(numbered(sql), args)


class PostgresStore(SQLTenancy, SQLKeys, SQLOps, SQLCatalog, SQLWeb, SQLResponses, SQLClientData, SQLPeople,
                    SQLMail, SQLKept):
    def __init__(self, dsn: str, pool: asyncpg.Pool, clock: Clock | None) -> None:
        super().__init__(clock)
        self._dsn_shown = redact(dsn)
        self._pool = pool
        self._closed = False

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        clock: Clock | None = None,
        min_size: int = 1,
        max_size: int = 10,
    ) -> PostgresStore:
        """Connect, migrate (under an advisory lock) and return the store."""
        kwargs: dict[str, Any] = {}
        attrs_default = session_attrs_default(dsn)
        if attrs_default is not None:
            kwargs["target_session_attrs"] = attrs_default
        try:
            pool = await asyncpg.create_pool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                timeout=CONNECT_TIMEOUT_S,
                server_settings={"application_name": "llmgw"},
                **kwargs,
            )
        except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            raise StoreUnavailable(f"postgres: cannot connect to {redact(dsn)}: {e}") from None
        except ValueError as e:  # asyncpg's verdict on a malformed DSN
            raise Invalid(f"postgres: {redact(dsn)}: {e}") from None
        store = cls(dsn, pool, clock)
        try:
            store._schema_version = await store._migrate()
        except BaseException:
            await pool.close()
            raise
        return store

    async def _migrate(self) -> int:
        async with self._pool.acquire() as conn:
            if await conn.fetchval("SELECT pg_is_in_recovery()"):
                return await self._standby_schema(conn)
            await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
            try:
                return await run_migrations(_PGMigrations(conn), "postgres")
            finally:
                await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)

    async def _standby_schema(self, conn: asyncpg.Connection) -> int:
        """A standby in recovery (read-only) cannot migrate: its schema, replayed from the primary, must be current."""
        available = load_migrations("postgres")
        known = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
        rows = await conn.fetch("SELECT version, name FROM schema_migrations") if known else []
        todo = pending({int(r["version"]): r["name"] for r in rows}, available)
        if todo:
            raise StoreUnavailable(
                f"postgres: {self._dsn_shown} is a standby in recovery (read-only) and its schema lacks "
                f"{len(todo)} migration(s) up to {available[-1].version:04d}: open the store on the primary "
                "once to migrate it, or point store.dsn at the primary")
        return available[-1].version

    @property
    def dialect(self) -> str:
        return "postgres"

    def _t(self, value: dt.datetime | None) -> Any:
        return value

    def _dt(self, value: Any) -> dt.datetime | None:
        return None if value is None else value.astimezone(UTC)

    async def _run(self, work: Work[T], *, readonly: bool) -> T:
        if self._closed:
            raise StoreError("the store is closed")
        for attempt in (1, 2):
            try:
                async with self._pool.acquire() as conn, conn.transaction(readonly=readonly):
                    return await work(PGTx(conn))
            except StoreError:
                raise
            except asyncpg.UniqueViolationError as e:
                raise Conflict(f"already exists: {e.detail or e}") from e
            except asyncpg.IntegrityConstraintViolationError as e:
                raise Invalid(f"refused by the database: {e.detail or e}") from e
            except asyncpg.InsufficientResourcesError as e:  # disk full, out of memory: writes work again once fixed
                raise WritesRefused(f"postgres: the database refuses writes: {e}") from e
            except _RETRYABLE as e:
                if attempt == 2:
                    raise StoreError(f"postgres: {e}") from e
                log.info("store: %s; running the transaction again", e)
            except Exception as e:
                if not _is_reconnectable(e):
                    raise
                if attempt == 2:
                    raise StoreUnavailable(
                        f"postgres: {self._dsn_shown} is unreachable or read-only after reconnecting: {e}"
                    ) from e
                log.warning("store: %s (%s); reconnecting", type(e).__name__, e)
                await self._pool.expire_connections()
        raise AssertionError("unreachable")

    async def _write(self, work: Work[T]) -> T:
        try:
            return await self._run(work, readonly=False)
        except (Conflict, Invalid):
            raise
        except StoreError:
            self.write_errors += 1
            raise

    async def _read(self, work: Work[T]) -> T:
        return await self._run(work, readonly=True)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.wait_for(self._pool.close(), timeout=10)
        except TimeoutError:
            self._pool.terminate()


class _PGMigrations:
    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def applied(self) -> dict[int, str]:
        await self._conn.execute(SCHEMA_MIGRATIONS_DDL["postgres"])
        rows = await self._conn.fetch("SELECT version, name FROM schema_migrations")
        return {int(r["version"]): r["name"] for r in rows}

    async def apply(self, migration: Migration) -> None:
        try:
            async with self._conn.transaction():
                await self._conn.execute(migration.sql)
                await self._conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
                    migration.version, migration.name, dt.datetime.now(UTC),
                )
        except asyncpg.PostgresError as e:
            raise StoreError(
                f"postgres: migration {migration.version:04d}_{migration.name} failed: {e}"
            ) from e
