"""The names clients may ask for: models, their aliases and their fallbacks.

Built from server.yaml's `models:`, and with a control plane from its whole
catalog (server.yaml's models and those added at run time, kept in step by
llmgw.router.catalog_follow); a model the control plane serves that
the file does not declare (its replicas are in the replica set) is known by
its own name, with no aliases or fallbacks.
"""

from __future__ import annotations

import attrs

from llmgw.adapters.names import adapter_names, full_name
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
        #: only declared models resolve (the control plane's catalog is followed): a removed model's
        #: replicas still stopping are not asked for by its name
        self.declared_only = False
        self.set_models(models)

    def set_models(self, models: list[ModelConfig], *, declared_only: bool | None = None) -> None:
        """Take up a new list of models at once (the control plane's catalog changed)."""
        if declared_only is not None:
            self.declared_only = declared_only
        self.configs = list(models)  #: as given, for what the metrics read of them (llmgw_model_slo_seconds)
        found: dict[str, CatalogModel] = {}
        names: dict[str, str] = {}
        # guard: judges (role: guard) are the guardrails' alone: not listed, not resolved, no one's fallback.
        judges = frozenset(n for m in models if getattr(m, "role", "model") == "guard" for n in (m.name, *m.aliases))
        for m in models:
            if m.name in judges:
                continue
            found[m.name] = CatalogModel(
                m.name, tuple(m.aliases), tuple(m.fallbacks),
                max(1, getattr(m, "concurrency", DEFAULT_CONCURRENCY)),
            )
            names[m.name] = m.name
            for alias in m.aliases:
                names.setdefault(alias, m.name)
        # adapters: BASE:NAME (and ALIAS:NAME, NAME) served as models of their own, limited as their base is
        for asked, (base, adapter) in adapter_names(m for m in models if m.name not in judges).items():
            full = full_name(base, adapter)
            found.setdefault(full, CatalogModel(full, concurrency=found[base].concurrency))
            names.setdefault(asked, full)
        # A fallback may be written as an alias: keep canonical names.
        for name, model in list(found.items()):
            canonical = tuple(dict.fromkeys(names.get(f, f) for f in model.fallbacks
                                            if names.get(f, f) != name and f not in judges))
            found[name] = attrs.evolve(model, fallbacks=canonical)
        self.judges, self._models, self._names = judges, found, names

    def resolve(self, asked: str) -> str | None:
        """The catalog name for a name or alias, or None when nothing serves it."""
        name = self._names.get(asked)
        if name is not None:
            return name
        if self.declared_only:  # federation: a peer's PEER/MODEL replicas are served by their own name
            return asked if any(r.source == "federation" for r in self.replicas.replicas_for(asked)) else None
        return asked if asked not in self.judges and self.replicas.replicas_for(asked) else None

    def get(self, name: str) -> CatalogModel:
        return self._models.get(name) or CatalogModel(name)

    def fallbacks(self, name: str) -> tuple[str, ...]:
        return self.get(name).fallbacks

    def names(self) -> list[str]:
        """Every model clients may ask for by its own name, declared or served."""
        out = dict.fromkeys(self._models)
        for name in self.replicas.models():
            if self.declared_only and self.resolve(name) != name:  # federation: peers' models still listed
                continue
            if name not in self.judges:
                out.setdefault(name)
        return sorted(out)
