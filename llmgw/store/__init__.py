"""The store: tenancy, keys, limits, usage, settings, leases, the run-time catalog and the audit log.

``store = await open_store(dsn)`` opens one (SQLite or PostgreSQL, chosen by
the address), applying migrations first; see :mod:`llmgw.store.api` for
what it offers and docs/store.md for operators.
"""

from __future__ import annotations

import os

from .api import Store
from .errors import (
    Conflict,
    Invalid,
    NotFound,
    StoreError,
    StoreTooNew,
    StoreUnavailable,
    WritesRefused,
)
from .records import (
    BUDGET_PERIODS,
    CATALOG_KINDS,
    LIMIT_SCOPES,
    MEMBER_ROLES,
    MEMBER_SCOPES,
    STAFF_ROLES,
    SUM_PERIODS,
    USAGE_GROUPS,
    USER_STATES,
    ApiKey,
    AuditEvent,
    CatalogEntry,
    Lease,
    Limits,
    Membership,
    Organization,
    PasswordReset,
    Project,
    ResolvedKey,
    Setting,
    SettingChange,
    StoredResponse,
    Team,
    UsageRow,
    UsageSum,
    User,
    WebSession,
)
from .sqlbase import Clock

__all__ = [
    "BUDGET_PERIODS",
    "CATALOG_KINDS",
    "LIMIT_SCOPES",
    "MEMBER_ROLES",
    "MEMBER_SCOPES",
    "STAFF_ROLES",
    "SUM_PERIODS",
    "USAGE_GROUPS",
    "USER_STATES",
    "ApiKey",
    "AuditEvent",
    "CatalogEntry",
    "Conflict",
    "Invalid",
    "Lease",
    "Limits",
    "Membership",
    "NotFound",
    "Organization",
    "PasswordReset",
    "Project",
    "ResolvedKey",
    "Setting",
    "SettingChange",
    "Store",
    "StoreError",
    "StoreTooNew",
    "StoreUnavailable",
    "WritesRefused",
    "StoredResponse",
    "Team",
    "UsageRow",
    "UsageSum",
    "User",
    "WebSession",
    "open_store",
    "parse_dsn",
]

MEMORY = "sqlite::memory:"


def parse_dsn(dsn: str) -> tuple[str, str | None]:
    """``("sqlite", path or None for memory)`` or ``("postgres", dsn)``.

    Forms: ``sqlite:///abs/path.db``, ``sqlite::memory:``, a plain path
    (``/var/lib/llmgw/store.db``, ``./store.db``, ``~/store.db``),
    ``postgres://…`` or ``postgresql://…`` (several hosts allowed).
    """
    if not isinstance(dsn, str) or not dsn.strip():
        raise Invalid("store address: empty; give a path, sqlite:///abs/path.db or postgres://…")
    dsn = dsn.strip()
    lower = dsn.lower()
    if lower.startswith(("postgres://", "postgresql://")):
        return "postgres", dsn
    if lower == MEMORY:
        return "sqlite", None
    if lower.startswith("sqlite:"):
        rest = dsn[len("sqlite:"):]
        if not rest.startswith("///"):
            raise Invalid(
                f"store address {dsn!r}: write sqlite:///absolute/path.db (three slashes),"
                " sqlite::memory:, or a plain path"
            )
        return "sqlite", rest[2:]
    if "://" in dsn:
        scheme = dsn.split("://", 1)[0]
        raise Invalid(f"store address: unknown kind {scheme!r}; use sqlite:///… or postgres://…")
    return "sqlite", os.path.abspath(os.path.expanduser(dsn))


async def open_store(dsn: str, *, clock: Clock | None = None) -> Store:
    """Open the store at ``dsn``, bringing its schema up to date.

    Raises StoreTooNew when a newer llmgw has migrated it, StoreUnavailable
    when it cannot be reached, Invalid for an address it cannot read.
    ``clock`` (returning aware datetimes) is for tests.
    """
    kind, where = parse_dsn(dsn)
    if kind == "postgres":
        from .postgres import PostgresStore

        assert where is not None
        return await PostgresStore.open(where, clock=clock)
    from .sqlite import SQLiteStore

    return await SQLiteStore.open(where, clock=clock)
