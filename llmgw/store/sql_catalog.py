"""The run-time catalog: the shared SQL implementation both backends use.

Each row is one model added while the cluster runs, or the run-time scaling
of a model server.yaml declares; the control plane's catalog
(:mod:`llmgw.control.catalog`) reads and checks what the spec means. Here a
spec is only a JSON mapping, and each change names the version it read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import validate as v
from .errors import Conflict, Invalid
from .records import CATALOG_KINDS, CatalogEntry
from .sqlbase import SQLStoreBase, Tx, from_json

CATALOG_COLS = "name, kind, spec, version, created_at, updated_at, actor"


def _check_name(name: Any) -> str:
    name = v.check_text(name, "model name", max_len=v.MAX_NAME)
    if name != name.strip() or any(c.isspace() for c in name):
        raise Invalid(f"model name: {name!r} must not hold spaces")
    return name


def _check_expect(value: Any) -> int | None:
    return None if value is None else v.check_int(value, "expect_version")


def _stale(name: str, expected: int, current: int) -> Conflict:
    if expected == 0:
        return Conflict(f"model {name!r} is already in the run-time catalog (version {current})")
    if current == 0:
        return Conflict(f"model {name!r} is not in the run-time catalog any more (you read version {expected})")
    return Conflict(
        f"model {name!r} changed since it was read: it is at version {current}, you read {expected};"
        " read it again and repeat the change"
    )


class SQLCatalog(SQLStoreBase):
    def _catalog_entry(self, r: Any) -> CatalogEntry:
        return CatalogEntry(
            name=r["name"],
            kind=r["kind"],
            spec=from_json(r["spec"]),
            version=r["version"],
            created_at=self._dt(r["created_at"]),
            updated_at=self._dt(r["updated_at"]),
            actor=r["actor"],
        )

    async def get_catalog_entry(self, name: str) -> CatalogEntry | None:
        name = _check_name(name)

        async def work(tx: Tx) -> Any:
            return await tx.fetchrow(f"SELECT {CATALOG_COLS} FROM catalog_models WHERE name = ?", name)

        r = await self._read(work)
        return None if r is None else self._catalog_entry(r)

    async def list_catalog_entries(self) -> list[CatalogEntry]:
        async def work(tx: Tx) -> list[Any]:
            return list(await tx.fetch(f"SELECT {CATALOG_COLS} FROM catalog_models ORDER BY name"))

        return [self._catalog_entry(r) for r in await self._read(work)]

    async def put_catalog_entry(
        self,
        name: str,
        kind: str,
        spec: Mapping[str, Any],
        *,
        actor: str,
        expect_version: int | None = None,
    ) -> CatalogEntry:
        name = _check_name(name)
        if kind not in CATALOG_KINDS:
            raise Invalid(f"kind: {kind!r} is not one of {', '.join(CATALOG_KINDS)}")
        if not isinstance(spec, Mapping):
            raise Invalid(f"spec: expected a mapping, got {type(spec).__name__}")
        text = v.to_json(dict(spec), f"model {name}")
        actor = v.check_text(actor, "actor")
        expect = _check_expect(expect_version)
        now = self._now()
        t_now = self._t(now)

        async def work(tx: Tx) -> CatalogEntry:
            r = await tx.fetchrow("SELECT version, created_at FROM catalog_models WHERE name = ?", name)
            current = 0 if r is None else int(r["version"])
            if expect is not None and current != expect:
                raise _stale(name, expect, current)
            if r is None:
                await tx.execute(
                    f"INSERT INTO catalog_models ({CATALOG_COLS}) VALUES (?, ?, ?, 1, ?, ?, ?)",
                    name, kind, text, t_now, t_now, actor,
                )
                created = now
            else:
                changed = await tx.execute(
                    "UPDATE catalog_models SET kind = ?, spec = ?, version = ?, updated_at = ?, actor = ?"
                    " WHERE name = ? AND version = ?",
                    kind, text, current + 1, t_now, actor, name, current,
                )
                if not changed:  # changed between our read and our write
                    raise _stale(name, current, current + 1)
                created = self._dt(r["created_at"])
            return CatalogEntry(
                name=name, kind=kind, spec=from_json(text), version=current + 1,
                created_at=created, updated_at=now, actor=actor,
            )

        return await self._write(work)

    async def delete_catalog_entry(self, name: str, *, expect_version: int | None = None) -> bool:
        name = _check_name(name)
        expect = _check_expect(expect_version)

        async def work(tx: Tx) -> bool:
            current = await tx.fetchval("SELECT version FROM catalog_models WHERE name = ?", name)
            if current is None:
                if expect:
                    raise _stale(name, expect, 0)
                return False
            if expect is not None and int(current) != expect:
                raise _stale(name, expect, int(current))
            return bool(await tx.execute("DELETE FROM catalog_models WHERE name = ? AND version = ?", name, current))

        return await self._write(work)
