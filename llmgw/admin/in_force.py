"""The configuration in force: server.yaml's, with the cluster settings the store keeps laid over it.

A cluster setting (a key of `llmgw.admin.settings.REGISTRY`) set in the
store — through `PUT /api/v1/settings/{key}`, `llmgw ctl config set` or the
console — wins over server.yaml on every control plane. `overlay` makes
the configuration that should run from the two. `ConfigInForce` holds both
halves and what runs, and takes up a change of either through the live
applier (llmgw.server.live): server.yaml's, noticed by the admin API
(llmgw.admin.server_config), and the store's, read every `WATCH_S` seconds
(`watch`) and at once after a change made through this control plane's
admin API. A key the running server cannot take up waits for its next
restart, and the admin API says so.

At start `run_server` reads the settings before it builds anything, so
every cluster setting, those that wait for a restart too, is in force from
the first request.

A value in the store that the registry's own check refuses (one written
straight into the store, or a band server.yaml no longer has) is skipped:
server.yaml's value applies and the log says which key and why, once per
change. The registry holds no secret (its kinds are numbers, durations,
switches and choices), so what the check says about a value may be logged.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from llmgw.admin.errors import ApiError
from llmgw.admin.settings import REGISTRY
from llmgw.config.schema import keys_of, parse_path, replace_at, value_at
from llmgw.config.server import ServerConfig
from llmgw.config.units import Duration
from llmgw.obs import logs

__all__ = ["WATCH_S", "ConfigInForce", "differing", "overlay", "read_settings", "watch"]

log = logs.get("llmgw.server")

#: Seconds between two reads of the store's cluster settings.
WATCH_S = 3.0

_ABSENT = object()


def overlay(file: ServerConfig, settings: Mapping[str, Any]) -> tuple[ServerConfig, dict[str, str]]:
    """(`file` with each registry key `settings` sets, {key: why its stored value was skipped}).

    `settings` are the store's values by key, as kept (durations as text); each is checked by the registry's
    own parse against `file` (the bands a default band must be one of are the file's)."""
    config = file
    problems: dict[str, str] = {}
    for key in sorted(settings):
        spec = REGISTRY.get(key)
        if spec is None:
            continue
        try:
            kept = spec.parse(settings[key], file)
            value = Duration.parse(kept) if spec.kind == "duration" else kept
            config = replace_at(config, parse_path(key), value)
        except ApiError as exc:
            problems[key] = exc.message
        except (TypeError, ValueError) as exc:  # a check of the configuration's own classes
            problems[key] = f"{key}: {exc}"
    return config, problems


@functools.cache
def _compared_keys() -> tuple[tuple[str, tuple], ...]:
    """The keys a difference is judged on: values, and lists and maps taken whole (not sections)."""
    return tuple((s.path, parse_path(s.path)) for s in keys_of(ServerConfig) if not s.template and s.kind != "section")


def differing(a: ServerConfig, b: ServerConfig) -> list[str]:
    """The keys whose values differ between two configurations, in the reference's order."""
    return [key for key, path in _compared_keys() if value_at(a, path) != value_at(b, path)]


async def read_settings(store: Any) -> dict[str, Any]:
    """The registry's keys the store sets, with their settings (value, version, who, when): one query."""
    return {k: s for k, s in (await store.get_settings()).items() if k in REGISTRY}


class ConfigInForce:
    """server.yaml's configuration, the store's cluster settings, and what this server runs."""

    def __init__(self, file: ServerConfig, *, settings: Mapping[str, Any] | None = None, live: Any = None) -> None:
        #: the configuration server.yaml makes (or the one the server was given), as last read
        self.file = file
        #: the registry's keys the store sets, {key: value as kept}, as last read
        self.settings: dict[str, Any] = dict(settings or {})
        wanted, self.problems = overlay(file, self.settings)
        for key, problem in self.problems.items():
            _log_problem(key, problem)
        #: what runs: at the start, the file with the settings over it
        self.running: ServerConfig = wanted
        #: takes up the keys that apply without a restart (llmgw.server.live.GatewayLive); None: none do
        self.live = live
        #: told the configuration in force after each change (the admin API's view of it)
        self.on_change: list[Callable[[ServerConfig], None]] = []
        self._lock = asyncio.Lock()

    @property
    def live_keys(self) -> frozenset[str]:
        return frozenset(self.live.keys) if self.live is not None else frozenset()

    def wanted(self, file: ServerConfig | None = None) -> ServerConfig:
        """What should run: `file` (by default server.yaml's as last read) with the store's settings over it."""
        return overlay(self.file if file is None else file, self.settings)[0]

    def restart_pending(self) -> list[str]:
        """The keys whose wanted value only a restart takes up."""
        return differing(self.running, self.wanted())

    def take_up(self, *, file: ServerConfig | None = None,
                settings: Mapping[str, Any] | None = None) -> tuple[list[str], list[str]]:
        """Put a new server.yaml's configuration, new store settings, or both, into what runs.

        (the keys taken up now, the keys that wait for a restart)."""
        if file is not None:
            self.file = file
        if settings is not None:
            self.settings = dict(settings)
        wanted, problems = overlay(self.file, self.settings)
        for key, problem in problems.items():
            if self.problems.get(key) != problem:
                _log_problem(key, problem)
        self.problems = problems
        applied: list[str] = []
        if self.live is not None:
            running, applied = self.live.apply(self.running, wanted)
            if running is not self.running:
                self.running = running
                for tell in self.on_change:
                    tell(running)
        return applied, differing(self.running, wanted)

    async def refresh(self, store: Any) -> dict[str, Any]:
        """Read the store's settings and take them up when they changed; the registry's settings it has."""
        async with self._lock:  # two reads at once must not take up the older last
            kept = await read_settings(store)
            values = {k: s.value for k, s in kept.items()}
            if values != self.settings:
                changed = sorted(k for k in {*values, *self.settings}
                                 if values.get(k, _ABSENT) != self.settings.get(k, _ABSENT))
                applied, restart = self.take_up(settings=values)
                logs.event(log, "cluster settings changed", changed=changed, applied=applied,
                           restart_needed=[k for k in restart if k in changed])
            return kept


def _log_problem(key: str, problem: str) -> None:
    logs.event(log, "a cluster setting in the store cannot be used; server.yaml's value applies",
               logging.WARNING, key=key, problem=problem)


async def watch(in_force: ConfigInForce, store: Any, *, every: float | None = None) -> None:
    """Read the store's settings every `every` (WATCH_S) seconds and take up a change; runs until cancelled."""
    failing = False
    while True:
        await asyncio.sleep(WATCH_S if every is None else every)
        try:
            await in_force.refresh(store)
        except Exception as exc:  # noqa: BLE001 - the store may be away a while: the next read tries again
            if not failing:
                logs.event(log, "cluster settings not read; what runs is unchanged", logging.WARNING,
                           error=str(exc))
            failing = True
        else:
            failing = False
