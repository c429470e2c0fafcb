"""The names an adapter is asked for by, and the model each name means.

An adapter `sql` of the model `qwen` (aliases `small`) is asked for as
`qwen:sql`, `small:sql` or plainly `sql`; all three mean the catalog name
`qwen:sql`, which the router's replicas, the usage rows and the metrics use.
A model whose own name has a colon in it is still found by that name first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

SEPARATOR = ":"


def full_name(base: str, adapter: str) -> str:
    """The catalog name of `adapter` of `base`: BASE:NAME."""
    return f"{base}{SEPARATOR}{adapter}"


def adapter_names(models: Iterable) -> dict[str, tuple[str, str]]:
    """Every name an adapter of `models` is asked for by -> (base model, adapter).

    `models` are ModelConfig-like (name, aliases, adapters). The adapter's own
    name is left out where a model or alias has it (the catalog refuses that).
    """
    models = list(models)
    taken = {n for m in models for n in (m.name, *m.aliases)}
    out: dict[str, tuple[str, str]] = {}
    for model in models:
        for adapter in getattr(model, "adapters", ()) or ():
            pair = (model.name, adapter.name)
            for base in (model.name, *model.aliases):
                out.setdefault(full_name(base, adapter.name), pair)
            if adapter.name not in taken:
                out.setdefault(adapter.name, pair)
    return out


def base_aliases(models: Iterable) -> dict[str, str]:
    """Every adapter name of `models` -> its base model's name (what key allowlists compare by)."""
    return {name: base for name, (base, _) in adapter_names(models).items()}


def split(names: Mapping[str, tuple[str, str]], asked: str) -> tuple[str, str] | None:
    """(base, adapter) for an adapter's name, or None when `asked` names none."""
    return names.get(asked)


__all__ = ["SEPARATOR", "adapter_names", "base_aliases", "full_name", "split"]
