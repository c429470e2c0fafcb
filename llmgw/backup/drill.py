"""The restore drill: restore an archive into a scratch folder, open the store there, and check its counts.

    report = await run_drill(archive, opener)
    report.ok          # every table the manifest counted has as many rows in the restored store

It proves what a real restore would need, without touching the machine's
own store or configuration: the archive reads back whole (every sha256 of
its manifest), it decrypts with the key given, llmgw opens the restored
store (bringing an older schema up to date as the server would), and the
rows of each table (organizations, keys, usage rows …) are as many as the
manifest counted when the archive was made. The scratch folder is removed
afterwards, whatever happened.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from typing import Any

import attrs

from llmgw.backup.archive import BackupError, Manifest, verify
from llmgw.backup.make import count_rows

__all__ = ["DrillReport", "TableCount", "run_drill"]


@attrs.frozen(kw_only=True)
class TableCount:
    table: str
    expected: int  #: in the manifest
    found: int | None  #: in the restored store; None when the table is not there

    @property
    def ok(self) -> bool:
        return self.found == self.expected


@attrs.frozen(kw_only=True)
class DrillReport:
    archive: str
    manifest: Manifest
    schema_version: int  #: the restored store's, once llmgw opened it
    tables: tuple[TableCount, ...]

    @property
    def counted(self) -> bool:
        return self.manifest.counts is not None

    @property
    def ok(self) -> bool:
        return self.counted and all(t.ok for t in self.tables)

    @property
    def mismatched(self) -> list[TableCount]:
        return [t for t in self.tables if not t.ok]

    def as_json(self) -> dict[str, Any]:
        return {"archive": self.archive, "ok": self.ok, "store": self.manifest.store_kind,
                "schema_version": {"archive": self.manifest.schema_version, "restored": self.schema_version},
                "tables": [{"table": t.table, "expected": t.expected, "found": t.found, "ok": t.ok}
                           for t in self.tables]}


async def run_drill(archive: str, opener: Any = None, *, scratch_parent: str | None = None,
                    into: str | None = None) -> DrillReport:
    """Restore `archive` into a scratch folder and check it; BackupError when it cannot even be restored.

    A PostgreSQL dump is restored into `into`, the address of an empty
    database made for the drill (left restored, for the operator to drop)."""
    archive = os.path.abspath(os.path.expanduser(archive))
    scratch = tempfile.mkdtemp(prefix="llmgw-drill-", dir=scratch_parent)
    try:
        os.chmod(scratch, 0o700)
        if into is not None:
            await _check_empty(into)  # before the archive is read: a wrong address is said at once
        manifest = await asyncio.to_thread(verify, archive, scratch, opener)
        staged = os.path.join(scratch, *manifest.store_file.name.split("/"))
        if manifest.store_kind == "sqlite":
            version = await _open_store(staged)
            found = await asyncio.to_thread(count_rows, staged)
        else:
            if into is None:
                raise BackupError(f"{archive} holds a PostgreSQL dump: give --into with the address of an empty "
                                  "database to restore it into (its checksums and decryption were checked: every "
                                  "file matches its manifest)")
            from llmgw.backup import pg

            await pg.pg_restore(into, staged)
            version = await _open_store(into)
            found = await pg.count_rows_at(into)
        tables = tuple(TableCount(table=t, expected=n, found=found.get(t))
                       for t, n in sorted((manifest.counts or {}).items()))
        return DrillReport(archive=archive, manifest=manifest, schema_version=version, tables=tables)
    finally:
        await asyncio.to_thread(shutil.rmtree, scratch, True)


async def _check_empty(dsn: str) -> None:
    from llmgw.backup import pg
    from llmgw.store import parse_dsn
    from llmgw.store.errors import StoreError
    from llmgw.store.postgres import redact

    try:
        kind, _ = parse_dsn(dsn)
    except StoreError as exc:
        raise BackupError(f"--into: {exc}") from None
    if kind != "postgres":
        raise BackupError("--into: give a PostgreSQL address (postgres://USER@HOST/DATABASE) of an empty database")
    tables = await pg.holds_tables(dsn)
    if tables:
        raise BackupError(f"--into: {redact(dsn)} is not empty (it holds {', '.join(tables[:5])}); the drill "
                          "restores only into an empty database made for it (createdb llmgw_drill)")


async def _open_store(path: str) -> int:
    """Open the restored file as the server would (migrating it); its schema version."""
    from llmgw.store import open_store
    from llmgw.store.errors import StoreError

    try:
        store = await open_store(path)
    except StoreError as exc:
        raise BackupError(f"llmgw cannot open the restored store: {exc}") from None
    try:
        return int(store.schema_version)
    finally:
        await store.close()
