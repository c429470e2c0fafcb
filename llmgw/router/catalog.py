"""The names clients may ask for: models, their aliases and their fallbacks.

Built from server.yaml's `models:`; a model the control plane serves that
the file does not declare (its replicas are in the replica set) is known by
its own name, with no aliases or fallbacks.
"""

from __future__ import annotations

import attrs

from llmgw.config.server import ModelConfig
from llmgw.router.replicas import DEFAULT_CONCURRENCY, ReplicaSet


@attrs.frozen
class CatalogModel:
    name: str
    aliases: tuple[str, ...] = ()
    fallbacks: tuple[str, ...] = ()
    concurrency: int = DEFAULT_CONCURRENCY


class Catalog:
    def __init__(self, models: list[ModelConfig], replicas: ReplicaSet) -> None:
        self.replicas = replicas
        self._models: dict[str, CatalogModel] = {}
        self._names: dict[str, str] = {}
        # guard: judges (role: guard) are the guardrails' alone: not listed, not resolved, no one's fallback.
        self.judges = frozenset(n for m in models if getattr(m, "role", "model") == "guard" for n in (m.name, *m.aliases))
        for m in models:
            if m.name in self.judges:
                continue
            self._models[m.name] = CatalogModel(
                m.name, tuple(m.aliases), tuple(m.fallbacks),
                max(1, getattr(m, "concurrency", DEFAULT_CONCURRENCY)),
            )
            self._names[m.name] = m.name
            for alias in m.aliases:
                self._names.setdefault(alias, m.name)
        # A fallback may be written as an alias: keep canonical names.
        for name, model in list(self._models.items()):
            canonical = tuple(dict.fromkeys(self._names.get(f, f) for f in model.fallbacks
                                            if self._names.get(f, f) != name and f not in self.judges))
            self._models[name] = attrs.evolve(model, fallbacks=canonical)

    def resolve(self, asked: str) -> str | None:
        """The catalog name for a name or alias, or None when nothing serves it."""
        name = self._names.get(asked)
        if name is not None:
            return name
        return asked if asked not in self.judges and self.replicas.replicas_for(asked) else None

    def get(self, name: str) -> CatalogModel:
        return self._models.get(name) or CatalogModel(name)

    def fallbacks(self, name: str) -> tuple[str, ...]:
        return self.get(name).fallbacks

    def names(self) -> list[str]:
        """Every model clients may ask for by its own name, declared or served."""
        out = dict.fromkeys(self._models)
        for name in self.replicas.models():
            if name not in self.judges:
                out.setdefault(name)
        return sorted(out)
