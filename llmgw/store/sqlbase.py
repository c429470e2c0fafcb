"""What both SQL backends share: the transaction interface they provide, and
the base class the shared method implementations hang on.

The shared code writes SQL with ``?`` placeholders and hands each unit of
work (an async function of a :class:`Tx`) to the backend's ``_read`` or
``_write``, which runs it in one transaction. The backend owns connections,
placeholder style, retries and how datetimes travel; nothing else differs.
"""

from __future__ import annotations

import abc
import base64
import datetime as dt
import json
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from .api import Store
from .errors import NotFound
from .records import (
    ApiKey,
    AuditEvent,
    Lease,
    Limits,
    Membership,
    Organization,
    Project,
    Setting,
    SettingChange,
    Team,
    UsageRow,
    UsageSum,
    User,
)

UTC = dt.UTC
T = TypeVar("T")

Clock = Callable[[], dt.datetime]


class Row(Protocol):
    def __getitem__(self, key: str | int) -> Any: ...


class Tx(Protocol):
    """One open transaction. SQL uses ``?`` placeholders."""

    async def fetch(self, sql: str, *args: Any) -> Sequence[Row]: ...

    async def fetchrow(self, sql: str, *args: Any) -> Row | None: ...

    async def fetchval(self, sql: str, *args: Any) -> Any: ...

    async def execute(self, sql: str, *args: Any) -> int:
        """Runs a statement; returns the number of rows it changed."""

    async def executemany(self, sql: str, args: Sequence[Sequence[Any]]) -> None: ...


Work = Callable[[Tx], Awaitable[T]]


def utcnow() -> dt.datetime:
    return dt.datetime.now(UTC)


def new_id(prefix: str) -> str:
    """A short random id like ``org-k3j5q0x2m4n6p8r1`` (80 random bits)."""
    return f"{prefix}-{base64.b32encode(secrets.token_bytes(10)).decode().lower()}"


def qmarks(n: int) -> str:
    """``?, ?, ?`` for an IN list of n values."""
    return ", ".join("?" * n)


def name_key(name: str) -> str:
    """What makes two names the same name: case does not count."""
    return name.casefold()


def floor_hour(t: dt.datetime) -> dt.datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def floor_day(t: dt.datetime) -> dt.datetime:
    return t.replace(hour=0, minute=0, second=0, microsecond=0)


def ceil_hour(t: dt.datetime) -> dt.datetime:
    f = floor_hour(t)
    return f if f == t else f + dt.timedelta(hours=1)


def ceil_day(t: dt.datetime) -> dt.datetime:
    f = floor_day(t)
    return f if f == t else f + dt.timedelta(days=1)


def chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def from_json(value: Any) -> Any:
    return None if value is None else json.loads(value)


def _models(value: Any) -> tuple[str, ...] | None:
    models = from_json(value)
    return None if models is None else tuple(models)


# Column lists, in the order the row mappers below read them.
ORG_COLS = "id, name, created_at"
TEAM_COLS = "id, org_id, name, created_at"
PROJECT_COLS = "id, org_id, team_id, name, created_at"
USER_COLS = "id, email, name, role, state, password_hash, created_at"
MEMBERSHIP_COLS = "user_id, scope_kind, scope_id, role, created_at"
KEY_COLS = (
    "id, prefix, key_hash, name, project_id, user_id, created_at, expires_at, "
    "revoked_at, last_used_at, priority_band, allowed_models"
)
LIMIT_COLS = "scope_kind, scope_id, rpm, tpm, budget_micros, budget_period, allowed_models, updated_at"
USAGE_COLS = (
    "request_id, at, key_id, project_id, team_id, org_id, user_id, model_requested, "
    "model_served, replica, prompt_tokens, completion_tokens, cached_tokens, cost_micros, "
    "status, outcome, latency_ms, ttft_ms, client_user, metadata, tags, "
    "guard_action, guard_policy, guard_category, guard_ms"
)
SETTING_COLS = "key, value, version, updated_at, actor"
SETTING_CHANGE_COLS = "id, key, value, removed, version, at, actor"
LEASE_COLS = "name, holder, epoch, acquired_at, expires_at"
AUDIT_COLS = "id, at, actor, action, target, detail"

# The tables a scope kind's id lives in.
SCOPE_TABLES = {
    "org": "orgs",
    "team": "teams",
    "project": "projects",
    "user": "users",
    "key": "api_keys",
}
SCOPE_WORDS = {
    "org": "organization",
    "team": "team",
    "project": "project",
    "user": "person",
    "key": "key",
}


class SQLStoreBase(Store):
    """The part of a SQL backend the shared methods rely on."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock or utcnow
        self._schema_version = 0
        #: writes that failed for the store's sake (not a refusal of the input): llmgw_store_write_errors_total
        self.write_errors = 0
        # Every transaction timed, by kind (llmgw_store_query_duration_seconds, llmgw/obs/store_metrics.py):
        # the backends' own _read and _write, wrapped once here.
        from llmgw.obs.store_metrics import QueryTimes

        from .errors import Conflict, Invalid

        self.query_times = QueryTimes()
        self._read = self.query_times.timed("read", self._read, (Conflict, Invalid))  # type: ignore[method-assign]
        self._write = self.query_times.timed("write", self._write, (Conflict, Invalid))  # type: ignore[method-assign]

    # ---- what a backend provides -------------------------------------------

    @abc.abstractmethod
    async def _read(self, work: Work[T]) -> T:
        """Run ``work`` in a read-only transaction."""

    @abc.abstractmethod
    async def _write(self, work: Work[T]) -> T:
        """Run ``work`` in a read-write transaction; commit when it returns."""

    @abc.abstractmethod
    def _t(self, value: dt.datetime | None) -> Any:
        """A UTC datetime as this database's driver takes it."""

    @abc.abstractmethod
    def _dt(self, value: Any) -> dt.datetime | None:
        """A datetime read back, as an aware UTC datetime."""

    # ---- shared helpers ----------------------------------------------------

    @property
    def schema_version(self) -> int:
        return self._schema_version

    def _now(self) -> dt.datetime:
        return self._clock().astimezone(UTC)

    async def ping(self) -> None:
        async def work(tx: Tx) -> None:
            await tx.fetchval("SELECT 1")

        await self._read(work)

    async def _exists(self, tx: Tx, kind: str, scope_id: str) -> bool:
        table = SCOPE_TABLES[kind]
        return bool(await tx.fetchval(f"SELECT 1 FROM {table} WHERE id = ?", scope_id))

    async def _must_exist(self, tx: Tx, kind: str, scope_id: str) -> None:
        if not await self._exists(tx, kind, scope_id):
            raise NotFound(f"no {SCOPE_WORDS[kind]} with id {scope_id!r}")

    async def _drop_attachments(self, tx: Tx, kind: str, scope_id: str) -> None:
        """What hangs on a scope without a foreign key: memberships and limits."""
        await tx.execute("DELETE FROM memberships WHERE scope_kind = ? AND scope_id = ?", kind, scope_id)
        await tx.execute("DELETE FROM limits WHERE scope_kind = ? AND scope_id = ?", kind, scope_id)

    async def _one(self, sql: str, *args: object) -> object:
        async def work(tx: Tx) -> object:
            return await tx.fetchrow(sql, *args)

        return await self._read(work)

    async def _all(self, sql: str, *args: object) -> list:
        async def work(tx: Tx) -> list:
            return list(await tx.fetch(sql, *args))

        return await self._read(work)

    def _org(self, r: Row) -> Organization:
        return Organization(id=r["id"], name=r["name"], created_at=self._dt(r["created_at"]))

    def _team(self, r: Row) -> Team:
        return Team(id=r["id"], org_id=r["org_id"], name=r["name"], created_at=self._dt(r["created_at"]))

    def _project(self, r: Row) -> Project:
        return Project(
            id=r["id"],
            org_id=r["org_id"],
            team_id=r["team_id"],
            name=r["name"],
            created_at=self._dt(r["created_at"]),
        )

    def _user(self, r: Row) -> User:
        return User(
            id=r["id"],
            email=r["email"],
            name=r["name"],
            role=r["role"],
            state=r["state"],
            password_hash=r["password_hash"],
            created_at=self._dt(r["created_at"]),
        )

    def _membership(self, r: Row) -> Membership:
        return Membership(
            user_id=r["user_id"],
            scope_kind=r["scope_kind"],
            scope_id=r["scope_id"],
            role=r["role"],
            created_at=self._dt(r["created_at"]),
        )

    def _key(self, r: Row) -> ApiKey:
        return ApiKey(
            id=r["id"],
            prefix=r["prefix"],
            key_hash=r["key_hash"],
            name=r["name"],
            project_id=r["project_id"],
            user_id=r["user_id"],
            created_at=self._dt(r["created_at"]),
            expires_at=self._dt(r["expires_at"]),
            revoked_at=self._dt(r["revoked_at"]),
            last_used_at=self._dt(r["last_used_at"]),
            priority_band=r["priority_band"],
            allowed_models=_models(r["allowed_models"]),
        )

    def _limits(self, r: Row) -> Limits:
        return Limits(
            scope_kind=r["scope_kind"],
            scope_id=r["scope_id"],
            rpm=r["rpm"],
            tpm=r["tpm"],
            budget_micros=r["budget_micros"],
            budget_period=r["budget_period"],
            allowed_models=_models(r["allowed_models"]),
            updated_at=self._dt(r["updated_at"]),
        )

    def _usage(self, r: Row) -> UsageRow:
        return UsageRow(
            request_id=r["request_id"],
            at=self._dt(r["at"]),
            key_id=r["key_id"],
            project_id=r["project_id"],
            team_id=r["team_id"],
            org_id=r["org_id"],
            user_id=r["user_id"],
            model_requested=r["model_requested"],
            model_served=r["model_served"],
            replica=r["replica"],
            prompt_tokens=r["prompt_tokens"],
            completion_tokens=r["completion_tokens"],
            cached_tokens=r["cached_tokens"],
            cost_micros=r["cost_micros"],
            status=r["status"],
            outcome=r["outcome"],
            latency_ms=r["latency_ms"],
            ttft_ms=r["ttft_ms"],
            client_user=r["client_user"],
            metadata=from_json(r["metadata"]),
            tags=tuple(from_json(r["tags"]) or ()),
            guard_action=r["guard_action"],
            guard_policy=r["guard_policy"],
            guard_category=r["guard_category"],
            guard_ms=r["guard_ms"],
        )

    def _usage_sum(self, r: Row) -> UsageSum:
        return UsageSum(
            bucket=self._dt(r["bucket"]),
            group=r["grp"] or None,
            requests=r["requests"],
            errors=r["errors"],
            prompt_tokens=r["prompt_tokens"],
            completion_tokens=r["completion_tokens"],
            cached_tokens=r["cached_tokens"],
            cost_micros=r["cost_micros"],
            latency_ms_sum=r["latency_ms_sum"],
        )

    def _setting(self, r: Row) -> Setting:
        return Setting(
            key=r["key"],
            value=from_json(r["value"]),
            version=r["version"],
            updated_at=self._dt(r["updated_at"]),
            actor=r["actor"],
        )

    def _setting_change(self, r: Row) -> SettingChange:
        return SettingChange(
            id=r["id"],
            key=r["key"],
            value=from_json(r["value"]),
            removed=bool(r["removed"]),
            version=r["version"],
            at=self._dt(r["at"]),
            actor=r["actor"],
        )

    def _lease(self, r: Row) -> Lease:
        return Lease(
            name=r["name"],
            holder=r["holder"],
            epoch=r["epoch"],
            acquired_at=self._dt(r["acquired_at"]),
            expires_at=self._dt(r["expires_at"]),
        )

    def _audit(self, r: Row) -> AuditEvent:
        return AuditEvent(
            id=r["id"],
            at=self._dt(r["at"]),
            actor=r["actor"],
            action=r["action"],
            target=r["target"],
            detail=from_json(r["detail"]),
        )
