"""Builds the plugin manager: entry points loaded one by one, checked, listed.

There is no module-level manager: every role calls `load_plugins()` once and
passes the result to what needs it, so tests can build their own.
"""

from __future__ import annotations

import importlib.metadata as md
import inspect
import os
from typing import Any, Iterable

import attrs
import pluggy

from llmgw.plugins import ENTRY_POINT_GROUP, PROJECT, hookspecs
from llmgw.plugins.types import Detector, Engine, JudgeFormat, Sink

# hook name -> what its items are called when listed.
HOOKS: dict[str, str] = {
    "llmgw_engines": "engines",
    "llmgw_guard_detectors": "guard detectors",
    "llmgw_judge_formats": "judge formats",
    "llmgw_notify_sinks": "notification sinks",
}


class PluginError(Exception):
    """A plugin that cannot be used; the message names it and says what to do."""


@attrs.frozen
class PluginInfo:
    name: str  #: the entry point's name
    distribution: str
    version: str
    module: str
    contributes: dict[str, list[str]]  #: hook's label -> names of what it gives


@attrs.define
class Plugins:
    pm: pluggy.PluginManager
    infos: list[PluginInfo]

    def collect(self, hook: str) -> list[Any]:
        """Everything every plugin gives through `hook`, in load order."""
        items: list[Any] = []
        for result in getattr(self.pm.hook, hook)():
            items.extend(_as_list(result, hook))
        return items

    async def acollect(self, hook: str) -> list[Any]:
        """As `collect`, for hooks whose implementations may be coroutines."""
        items: list[Any] = []
        for result in getattr(self.pm.hook, hook)():
            if inspect.isawaitable(result):
                result = await result
            items.extend(result or [])
        return items

    def engines(self) -> dict[str, Engine]:
        return _by_name(self.collect("llmgw_engines"), Engine, "engine")

    def detectors(self) -> dict[str, Detector]:
        return _by_name(self.collect("llmgw_guard_detectors"), Detector, "guard detector")

    def judge_formats(self) -> dict[str, JudgeFormat]:
        return _by_name(self.collect("llmgw_judge_formats"), JudgeFormat, "judge format")

    def sinks(self) -> dict[str, Sink]:
        return _by_name(self.collect("llmgw_notify_sinks"), Sink, "notification sink")


def _as_list(result: Any, hook: str) -> list[Any]:
    if inspect.isawaitable(result):
        if hasattr(result, "close"):
            result.close()
        raise PluginError(f"{hook} returned a coroutine here; call Plugins.acollect instead")
    return list(result or [])


def _by_name(items: Iterable[Any], kind: type, label: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if not isinstance(item, kind):
            raise PluginError(f"a plugin gave a {label} that is a {type(item).__name__}, not a {kind.__name__}")
        if item.name in out:
            raise PluginError(f"two plugins give a {label} named {item.name!r}; uninstall one")
        out[item.name] = item
    return out


def allowed_names(env: dict[str, str] | None = None) -> set[str] | None:
    """The names in LLMGW_PLUGINS, or None when every installed plugin may load."""
    raw = (env if env is not None else os.environ).get("LLMGW_PLUGINS", "").strip()
    if not raw:
        return None
    return {n.strip() for n in raw.split(",") if n.strip()}


def load_plugins(
    allow: set[str] | None = None,
    entry_points: Iterable[md.EntryPoint] | None = None,
    extra: Iterable[tuple[str, object]] = (),
) -> Plugins:
    """Load the `llmgw` entry-point group, each plugin checked as it loads.

    `allow` defaults to LLMGW_PLUGINS. A plugin that fails to import, or that
    implements a hook llmgw does not have (a misspelt name), stops the load
    with a PluginError naming it: a half-loaded gateway is worse than none.
    """
    if allow is None:
        allow = allowed_names()
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    infos: list[PluginInfo] = []
    eps = list(entry_points) if entry_points is not None else list(md.entry_points(group=ENTRY_POINT_GROUP))
    seen: set[str] = set()
    for ep in eps:
        # A zipapp keeps the host's site-packages on the path: the first of a
        # name wins, and LLMGW_PLUGINS can exclude the rest.
        if ep.name in seen or (allow is not None and ep.name not in allow):
            continue
        seen.add(ep.name)
        try:
            module = ep.load()
        except Exception as exc:
            raise PluginError(
                f"plugin {ep.name!r} ({_dist_label(ep)}) failed to load: {exc.__class__.__name__}: {exc}; "
                f"fix or uninstall it, or leave it out with LLMGW_PLUGINS"
            ) from exc
        _register(pm, ep.name, module)
        infos.append(_info(pm, ep.name, module, ep))
    for name, module in extra:
        _register(pm, name, module)
        infos.append(_info(pm, name, module, None))
    if allow is not None:
        missing = sorted(allow - {i.name for i in infos})
        if missing:
            raise PluginError(f"LLMGW_PLUGINS names {', '.join(missing)}, which is not installed")
    return Plugins(pm=pm, infos=infos)


def _register(pm: pluggy.PluginManager, name: str, module: object) -> None:
    try:
        pm.register(module, name=name)
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        pm.unregister(name=name)
        raise PluginError(f"plugin {name!r} is refused: {exc}") from exc
    except ValueError as exc:
        raise PluginError(f"plugin {name!r} is refused: {exc}") from exc


def _info(pm: pluggy.PluginManager, name: str, module: object, ep: md.EntryPoint | None) -> PluginInfo:
    contributes: dict[str, list[str]] = {}
    for hook, label in HOOKS.items():
        for impl in getattr(pm.hook, hook).get_hookimpls():
            if impl.plugin_name != name:
                continue
            try:
                items = impl.function()
            except Exception as exc:
                raise PluginError(f"plugin {name!r} failed in {hook}: {exc}") from exc
            if inspect.isawaitable(items):
                if hasattr(items, "close"):
                    items.close()
                contributes[label] = ["(resolved at run time)"]
                continue
            contributes[label] = [getattr(i, "name", repr(i)) for i in items or []]
    dist = ep.dist if ep is not None else None
    return PluginInfo(
        name=name,
        distribution=dist.metadata["Name"] if dist is not None else "(built in)",
        version=dist.version if dist is not None else "",
        module=getattr(module, "__name__", repr(module)),
        contributes=contributes,
    )


def _dist_label(ep: md.EntryPoint) -> str:
    dist = ep.dist
    return f"{dist.metadata['Name']} {dist.version}" if dist is not None else ep.value
