"""What the console watches: each resource read from the admin API, kept with its error and its age.

A read never blocks the screen: `refresh()` starts reads as tasks on the
running loop and returns at once; each one, when it ends, updates its
`Watched` and tells the listeners. A read still under way is not started
again, so a slow API is asked once, not piled on. A failing read keeps the
last good data and says why beside it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import attrs

from llmgw.cli.ctl_client import quote
from llmgw.console.model.api import AdminApi, AdminError

__all__ = ["USAGE_GROUPINGS", "ConsoleModel", "Watched", "scope_of"]

#: How Usage may be grouped, in the order → goes through them.
USAGE_GROUPINGS = ("org", "team", "project")
#: The most organizations, teams and projects whose limits are read with the tree.
MAX_LIMIT_READS = 200
#: How many of a node's last log lines Logs reads.
LOG_LINES = 500


@attrs.define
class Watched:
    """One resource: the last good answer, the last error, and when."""

    name: str
    fetch: Callable[[], Awaitable[Any]]
    data: Any = None
    error: str | None = None
    read_at: float | None = None  #: monotonic time of the last good read
    started_at: float | None = None  #: monotonic time the read now under way started
    task: asyncio.Task | None = None

    @property
    def reading(self) -> bool:
        return self.task is not None and not self.task.done()


class ConsoleModel:
    """Everything the views show, read from the admin API."""

    def __init__(self, api: AdminApi, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.clock = clock
        self.usage_by = USAGE_GROUPINGS[0]
        self.logs_of: str | None = None  #: the node whose agent log "logs" reads
        self.listeners: list[Callable[[str], None]] = []
        fetchers = {
            "summary": lambda: api.get("/summary"),
            "nodes": lambda: self._list("/nodes", "nodes"),
            "models": lambda: self._list("/models", "models"),
            "replicas": lambda: self._list("/replicas", "replicas"),
            "usage": lambda: api.get("/usage", by=self.usage_by, period="total", since="24h"),
            "quotas": lambda: self._list("/quotas", "quotas"),
            "audit": lambda: self._list("/audit", "events", since="7d", limit=200),
            "users": lambda: self._list("/users", "users"),
            "keys": lambda: self._list("/keys", "keys", all=True),
            "orgs": self._orgs,
            "settings": lambda: self._list("/settings", "settings"),
            "backups": lambda: api.get("/backups"),
            "server-config": lambda: api.get("/server-config"),
            "jobs": lambda: self._list("/jobs", "jobs"),
            "releases": lambda: api.get("/releases"),
            "logs": self._logs,
        }
        self.watched = {name: Watched(name, fetch) for name, fetch in fetchers.items()}

    def __getitem__(self, name: str) -> Watched:
        return self.watched[name]

    def data(self, name: str, default: Any = None) -> Any:
        value = self.watched[name].data
        return default if value is None else value

    # ---- reading

    def refresh(self, names: Iterable[str] | None = None) -> list[asyncio.Task]:
        """Start reading `names` (all when None) unless already under way; returns the reads in flight."""
        tasks = []
        for name in self.watched if names is None else dict.fromkeys(names):
            w = self.watched[name]
            if not w.reading:
                w.started_at = self.clock()
                w.task = asyncio.get_running_loop().create_task(self._read(w), name=f"console-read-{name}")
            tasks.append(w.task)
        return tasks

    async def refresh_now(self, *names: str) -> None:
        """Read `names` (all when none given) and wait for the answers."""
        tasks = self.refresh(names or None)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _read(self, w: Watched) -> None:
        try:
            w.data = await w.fetch()
            w.error = None
            w.read_at = self.clock()
        except AdminError as exc:
            w.error = exc.message
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - an answer the console misread must not end the screen
            w.error = f"the answer could not be read ({type(exc).__name__}: {exc})"
        finally:
            w.started_at = None
        for listener in list(self.listeners):
            listener(w.name)

    async def _list(self, path: str, field: str, **query: Any) -> list[dict[str, Any]]:
        return (await self.api.get(path, **query))[field]

    async def _orgs(self) -> dict[str, Any]:
        """The tree, and the limits set on each of its organizations, teams and projects."""
        nodes = (await self.api.get("/orgs"))["nodes"]

        async def limits_of(node: dict[str, Any]) -> Any:
            try:
                return (await self.api.get("/limits", scope=scope_of(node)))["limits"]
            except AdminError:
                return None

        shown = nodes[:MAX_LIMIT_READS]
        limits = await asyncio.gather(*(limits_of(n) for n in shown))
        return {"nodes": nodes, "limits": {n["id"]: lim for n, lim in zip(shown, limits)}}

    # ---- what the status line says

    def age(self, name: str) -> float | None:
        read_at = self.watched[name].read_at
        return None if read_at is None else self.clock() - read_at

    def trouble(self, names: Iterable[str]) -> str:
        """One line on what is wrong with `names` now, or what is slow; empty when all is well."""
        for name in names:
            w = self.watched[name]
            if w.error:
                age = self.age(name)
                shown = f"showing what was read {age:.0f}s ago · " if age is not None else ""
                return f"{shown}{name}: {w.error}"
        for name in names:
            w = self.watched[name]
            if w.reading and w.started_at is not None and self.clock() - w.started_at > 2:
                return f"reading {name}… ({self.clock() - w.started_at:.0f}s, the admin API is slow)"
        return ""

    def cycle_usage(self) -> str:
        """Group Usage by the next of org, team, project; read it again."""
        i = USAGE_GROUPINGS.index(self.usage_by)
        self.usage_by = USAGE_GROUPINGS[(i + 1) % len(USAGE_GROUPINGS)]
        w = self.watched["usage"]
        if w.reading:  # its answer would be by the old grouping
            w.task.cancel()
            w.task = None
        w.data = None
        self.refresh(["usage"])
        return self.usage_by

    # ---- a node's log

    async def _logs(self) -> dict[str, Any] | None:
        node = self.logs_of
        if node is None:
            return None
        return await self.api.get(f"/nodes/{quote(node)}/logs", lines=LOG_LINES)

    def read_logs(self, node: str | None) -> None:
        """Read `node`'s agent log from now on (None: no node's); what was read of another node's is dropped."""
        w = self.watched["logs"]
        if node != self.logs_of:
            if w.reading:  # its answer would be the other node's
                w.task.cancel()
                w.task = None
            w.data, w.error, w.read_at = None, None, None
        self.logs_of = node
        if node is not None:
            self.refresh(["logs"])


def scope_of(node: dict[str, Any]) -> str:
    """An organization tree node as a scope the limits and quotas endpoints read: team:acme/ml."""
    return f"{node['kind']}:{node['path']}"

