"""Capacity quotas as placement uses them: what a scope may hold at most, and what it is guaranteed.

An operator sets a quota on an organization, team or project (`PUT
/api/v1/quotas`, `llmgw ctl quota set`); the admin API keeps them in the
store's `quotas` setting, by the scope's id. A model's `owner` names the
scope its replicas count against, by path, in any case: `team:acme/ml`,
`project:acme/ml/train`, or the bare path `acme/ml`. A replica counts
against the quota of the scope its owner names and of every scope above it:
a project's models count toward its team's quota and its organization's.

`QuotaReader` reads the quotas for the reconciler, once per pass, and
resolves each scope's id to its path (again when the quotas change, and at
least every `PATHS_TTL` seconds, so a renamed team is followed); `Quotas` is
what placement is given: the quotas with the paths they cover, looked up by
owner.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from llmgw.config.units import ByteSize
from llmgw.store import Store

#: The store setting the admin API keeps capacity quotas in (llmgw/admin/handlers_ops.py):
#: {scope id: {"kind": "org"|"team"|"project", "limit": {...}, "guaranteed": {...}}}.
QUOTAS_SETTING = "quotas"
KINDS = ("org", "team", "project")
#: Seconds the scopes' paths are kept before they are looked up again (a rename shows within this).
PATHS_TTL = 60.0


@attrs.frozen
class Amounts:
    """GPUs, cores and bytes of memory; None where the quota says nothing."""

    gpus: int | None = None
    cores: int | None = None
    memory: int | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.gpus, self.cores, self.memory))


@attrs.frozen
class CapacityQuota:
    """One scope's capacity quota."""

    scope: str  #: as people write it: team:acme/ml
    path: str  #: the scope's path, lower-cased: owners at it or under it count against the quota
    limit: Amounts = Amounts()
    guaranteed: Amounts = Amounts()


def owner_path(owner: str) -> str:
    """The path an owner (or a scope label) names, lower-cased: `team:Acme/ML` -> `acme/ml`; '' for none."""
    text = owner.strip().lower()
    kind, sep, rest = text.partition(":")
    if sep and kind in KINDS:
        text = rest
    return "/".join(part.strip() for part in text.strip().strip("/").split("/"))


def under(path: str, scope_path: str) -> bool:
    """Whether an owner at `path` counts against the quota of the scope at `scope_path`."""
    return bool(scope_path) and (path == scope_path or path.startswith(scope_path + "/"))


class Quotas:
    """The capacity quotas in force, looked up by owner. Empty (false) when there are none."""

    def __init__(self, quotas: Iterable[CapacityQuota] = ()) -> None:
        # Widest first, so a decision names the organization's quota before its team's.
        self.quotas = tuple(sorted(quotas, key=lambda q: (q.path.count("/"), q.path)))
        self._by_owner: dict[str, tuple[CapacityQuota, ...]] = {}

    def __bool__(self) -> bool:
        return bool(self.quotas)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quotas) and other.quotas == self.quotas

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Quotas({list(self.quotas)!r})"

    def of(self, owner: str) -> tuple[CapacityQuota, ...]:
        """The quotas an owner's replicas count against, the widest first (none for no owner)."""
        found = self._by_owner.get(owner)
        if found is None:
            path = owner_path(owner)
            found = self._by_owner[owner] = tuple(q for q in self.quotas if path and under(path, q.path))
        return found


def amounts(value: Any) -> Amounts:
    """A stored `limit` or `guaranteed` map as numbers; what cannot be read is left out."""
    if not isinstance(value, dict):
        return Amounts()
    out: dict[str, int] = {}
    for name in ("gpus", "cores"):
        n = value.get(name)
        if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
            out[name] = n
    try:
        if value.get("memory") is not None:
            out["memory"] = int(ByteSize.parse(value["memory"]))
    except ValueError:
        pass
    return Amounts(**out)


class QuotaReader:
    """Reads the quotas from the store for the reconciler; keeps the scopes' paths between reads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._version: int | None = None
        self._paths: dict[tuple[str, str], str] = {}
        self._paths_at = 0.0

    async def read(self, store: Store) -> Quotas:
        """The quotas now: one read of the setting; the paths looked up only when they may have changed.
        A scope that no longer exists is left out."""
        kept = await store.get_setting(QUOTAS_SETTING)
        entries = kept.value if kept is not None and isinstance(kept.value, dict) else {}
        if not entries:
            self._version, self._paths = None, {}
            return Quotas()
        now = self.clock()
        if kept.version != self._version or now - self._paths_at > PATHS_TTL:
            from llmgw.auth.tenancy import Tenancy

            tenancy = Tenancy(store, actor="llmgw control plane")
            paths = {}
            for scope_id, entry in entries.items():
                kind = entry.get("kind", "org") if isinstance(entry, dict) else "org"
                if kind in KINDS:
                    path = await tenancy.path_of(kind, scope_id)
                    if path != scope_id:  # path_of answers the id for a scope that is gone
                        paths[(kind, scope_id)] = path
            self._version, self._paths, self._paths_at = kept.version, paths, now
        quotas = []
        for scope_id, entry in entries.items():
            if not isinstance(entry, dict):
                continue
            kind = entry.get("kind", "org")
            path = self._paths.get((kind, scope_id))
            if path is None:
                continue
            quotas.append(CapacityQuota(scope=f"{kind}:{path}", path=owner_path(path),
                                        limit=amounts(entry.get("limit")),
                                        guaranteed=amounts(entry.get("guaranteed"))))
        return Quotas(quotas)


__all__ = ["PATHS_TTL", "QUOTAS_SETTING", "Amounts", "CapacityQuota", "QuotaReader", "Quotas", "amounts",
           "owner_path", "under"]
