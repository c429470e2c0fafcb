"""What a model's `adapters:` and `max_adapters` must keep, as (path, sentence) pairs.

Checked where server.yaml is read (llmgw.config.validate) and where a model is
added at run time (llmgw.control.catalog), so both refuse the same things:

- each adapter has a name of letters, digits and . _ - (no colon: BASE:NAME
  must split one way), unique among the catalog's models, aliases and every
  adapter; a source; a sha256 of 64 hex digits when given; a scale above 0;
- the model runs on the cluster (a provider's model has no adapters here);
- its engines load adapters: llama.cpp at start only (so no max_adapters),
  vLLM and the sim engine at start or on demand.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

Path = tuple[Any, ...]


def model_problems(model: Any) -> list[tuple[Path, str]]:
    """What is wrong in one model's adapters on their own (paths relative to the model)."""
    problems: list[tuple[Path, str]] = []
    if model.max_adapters < 0:
        problems.append((("max_adapters",), f"must be 0 (every adapter loaded at start) or more, got "
                                            f"{model.max_adapters}"))
    if not model.adapters:
        if model.max_adapters > 0:
            problems.append((("max_adapters",), "set, but the model declares no adapters; declare them in adapters"))
        return problems
    if not model.profiles:
        problems.append((("adapters",), "a model forwarded to a provider serves no adapters here; declare them on "
                                        "a model that runs on the cluster (profiles)"))
    seen: dict[str, int] = {}
    for index, adapter in enumerate(model.adapters):
        where = ("adapters", index)
        if not _NAME.match(adapter.name or ""):
            problems.append(((*where, "name"), f"{adapter.name!r} is not an adapter name: up to 64 letters, digits "
                                               f"and . _ - (no colon: clients ask for BASE:NAME), like sql-v2"))
        elif adapter.name in seen:
            problems.append(((*where, "name"), f"{adapter.name!r} is adapters[{seen[adapter.name]}]'s name too; "
                                               f"give each adapter its own"))
        seen.setdefault(adapter.name, index)
        if not (adapter.source or "").strip():
            problems.append(((*where, "source"), "empty; give where its file comes from, like a path on the mirror "
                                                 "(adapters/sql.gguf) or a URL"))
        if adapter.sha256 and not _SHA256.match(adapter.sha256):
            problems.append(((*where, "sha256"), f"{adapter.sha256!r} is not a SHA-256: 64 lower-case hex digits, "
                                                 f"or leave it empty"))
        if not (math.isfinite(adapter.scale) and adapter.scale > 0):
            problems.append(((*where, "scale"), f"must be above 0 (1 applies it as trained), got {adapter.scale}"))
    return problems


def catalog_problems(models: Iterable[Any]) -> list[tuple[int, Path, str]]:
    """Adapter names that clash across `models` (a model's name or alias, another adapter), as
    (model index, path, sentence)."""
    models = list(models)
    owners: dict[str, str] = {}
    for model in models:
        for name in (model.name, *model.aliases):
            owners.setdefault(name, f"model {model.name}")
    problems: list[tuple[int, Path, str]] = []
    for index, model in enumerate(models):
        for a_index, adapter in enumerate(model.adapters):
            owner = owners.get(adapter.name)
            if owner is not None:
                problems.append((index, ("adapters", a_index, "name"),
                                 f"{adapter.name!r} already names {owner}; adapters are asked for by their own "
                                 f"name too, so it must name nothing else"))
            else:
                owners[adapter.name] = f"adapter {adapter.name} of {model.name}"
    return problems


def clashes_with(model: Any, others: Iterable[Any]) -> list[str]:
    """A model being added: its names or its adapters' against the rest of the catalog (`others`)."""
    others = [m for m in others if m.name != model.name]
    problems = []
    adapters = {a.name: m.name for m in others for a in m.adapters}
    names = {n: m.name for m in others for n in (m.name, *m.aliases)}
    for index, adapter in enumerate(model.adapters):
        if adapter.name in names:
            problems.append(f"adapters[{index}].name: {adapter.name!r} already names model {names[adapter.name]}")
        elif adapter.name in adapters:
            problems.append(f"adapters[{index}].name: {adapter.name!r} is already an adapter of "
                            f"{adapters[adapter.name]}; adapter names are unique in the catalog")
    for name in (model.name, *model.aliases):
        if name in adapters:
            problems.append(f"aliases: {name!r} already names an adapter of {adapters[name]}")
    return problems


def engine_problems(model: Any, engines: Mapping[str, Any] | None) -> list[str]:
    """Each profile's engine can load the model's adapters, the way max_adapters asks."""
    if engines is None or not model.adapters:
        return []
    problems = []
    for index, profile in enumerate(model.profiles):
        name = profile.engine or model.engine
        engine = engines.get(name)
        if engine is None:
            continue  # said by check_engines
        loading = getattr(engine, "adapter_loading", "")
        if not loading:
            able = ", ".join(sorted(n for n, e in engines.items() if getattr(e, "adapter_loading", ""))) or "none"
            problems.append(f"profiles[{index}].engine: {name} loads no LoRA adapters; run the model on one that "
                            f"does ({able}), or remove its adapters")
        elif model.max_adapters and loading != "runtime":
            problems.append(f"max_adapters: {name} loads every adapter when it starts and none later; leave "
                            f"max_adapters 0")
    return problems


__all__ = ["catalog_problems", "clashes_with", "engine_problems", "model_problems"]
