"""Schema migrations: numbered SQL files per dialect, applied in order.

Files live in ``llmgw/store/migrations/<dialect>/NNNN_name.sql`` and are read
with importlib.resources, so they are found inside a zipapp too. Each file
is applied in its own transaction together with its row in
``schema_migrations``. A database whose newest applied migration is newer
than any file this llmgw carries is refused (:class:`StoreTooNew`): an old
binary must not write to a schema it does not understand.
"""

from __future__ import annotations

import logging
import re
from importlib import resources
from typing import Protocol

import attrs

from .errors import StoreError, StoreTooNew

log = logging.getLogger("llmgw.store")

_FILE = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")

# The table each dialect records applied migrations in; created before
# anything else so the version can be read before any file is applied.
SCHEMA_MIGRATIONS_DDL = {
    "sqlite": (
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    ),
    "postgres": (
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL)"
    ),
}


@attrs.frozen
class Migration:
    version: int
    name: str
    sql: str = attrs.field(repr=False)


def load_migrations(dialect: str) -> list[Migration]:
    """Every migration file of a dialect, by version."""
    folder = resources.files("llmgw.store.migrations").joinpath(dialect)
    found: dict[int, Migration] = {}
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        m = _FILE.fullmatch(entry.name)
        if m is None:
            raise StoreError(
                f"store migrations: {dialect}/{entry.name} is not named NNNN_name.sql"
            )
        version = int(m.group(1))
        if version in found:
            raise StoreError(
                f"store migrations: {dialect} has two files numbered {version:04d}"
            )
        found[version] = Migration(version, m.group(2), entry.read_text(encoding="utf-8"))
    if not found:
        raise StoreError(f"store migrations: no files for {dialect} (a broken build?)")
    return [found[v] for v in sorted(found)]


class MigrationTarget(Protocol):
    """What a backend does for the migration runner."""

    async def applied(self) -> dict[int, str]:
        """Create schema_migrations when absent; the versions applied, with their names."""

    async def apply(self, migration: Migration) -> None:
        """Run one file and record it, in one transaction."""


def pending(applied: dict[int, str], available: list[Migration]) -> list[Migration]:
    """The files still to apply; refuses a store newer than ``available``."""
    newest_known = available[-1].version
    if applied and max(applied) > newest_known:
        raise StoreTooNew(max(applied), newest_known)
    for m in available:
        if m.version in applied and applied[m.version] != m.name:
            log.warning(
                "store migration %04d is recorded as %r but this llmgw calls it %r",
                m.version,
                applied[m.version],
                m.name,
            )
    return [m for m in available if m.version not in applied]


async def run_migrations(target: MigrationTarget, dialect: str) -> int:
    """Bring the schema up to date; returns the schema version now."""
    available = load_migrations(dialect)
    applied = await target.applied()
    todo = pending(applied, available)
    apply_all = getattr(target, "apply_all", None)
    if not applied and todo and apply_all is not None:
        # A new store: every file in one transaction (SQLite), one wait for the disk instead of one a file.
        log.info("store: creating the schema, migrations %04d to %04d (%s)", todo[0].version, todo[-1].version,
                 dialect)
        await apply_all(todo)
        return available[-1].version
    for m in todo:
        log.info("store: applying migration %04d_%s (%s)", m.version, m.name, dialect)
        await target.apply(m)
    return available[-1].version
