"""The catalog: every model the cluster runs, from server.yaml and from the store.

Models come from two places:

- server.yaml's `models:` (origin `file`): changed by editing the file; their
  scaling may still be changed at run time (`scale`), kept in the store as a
  `scaling` row that wins over the file until removed;
- models added at run time (origin `store`): `add`, `remove`, `scale`, kept in
  the store's `catalog_models` table so every control plane sees them.

Every model is checked before it is kept: the same checks as server.yaml
(names, profiles, min <= max, on demand => min 0), then each profile's engine
must be installed on this control plane and must accept the profile's
arguments and environment. A model read from the file or the store that fails
them is kept aside with its problems (`invalid`), never placed.

`add`, `remove` and `scale` are what the admin API exposes; each writes an
audit event naming the actor.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from llmgw.adapters import declared as adapters_declared
from llmgw.config.errors import format_path
from llmgw.config.load import ConfigError, make_converter, parse_server_config
from llmgw.config.server import ModelConfig, Scaling
from llmgw.config.units import Duration
from llmgw.control.rollout_state import ROLLOUTS_SETTING, Rollouts
from llmgw.control.schedules import window_problems
from llmgw.obs import logs
from llmgw.plugins.types import Engine
from llmgw.store import Conflict, Store

log = logs.get("llmgw.control.catalog")

ORIGINS = ("file", "store")


class CatalogError(ValueError):
    """A change the catalog refuses; `problems` lists every reason, each with its path."""

    def __init__(self, subject: str, problems: Sequence[str], *, conflict: bool = False) -> None:
        self.subject = subject
        self.problems = list(problems)
        #: the change clashes with what is there (a name taken, a model from the file, a newer version)
        self.conflict = conflict
        super().__init__(f"{subject}: " + "; ".join(self.problems))


class UnknownModel(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"no model called {self.name!r} is in the catalog"


@attrs.frozen
class CatalogModel:
    """One model as the scheduler sees it: its definition with any run-time scaling applied."""

    config: ModelConfig
    origin: str  #: file or store
    version: int = 0  #: the store row's version (0: none)
    scaling_from: str = "file"  #: where its scaling comes from: file or store
    problems: tuple[str, ...] = ()  #: why it cannot run; empty when it can

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def scaling(self) -> Scaling:
        return self.config.scaling

    @property
    def model_class(self) -> str:
        return self.config.class_

    @property
    def runs_on_cluster(self) -> bool:
        """Placed on nodes (it has profiles), as opposed to forwarded to a provider."""
        return bool(self.config.profiles)

    @property
    def valid(self) -> bool:
        return not self.problems

    def engine_of(self, profile_index: int = 0) -> str:
        profile = self.config.profiles[profile_index]
        return profile.engine or self.config.engine

    def describe(self) -> dict[str, Any]:
        """The model for the admin API and explain: its spec as server.yaml writes it, and where it came from."""
        return {
            "name": self.name, "origin": self.origin, "version": self.version,
            "scaling_from": self.scaling_from, "class": self.model_class,
            "problems": list(self.problems), "spec": model_to_spec(self.config),
        }


_CONVERTER = make_converter()


def model_to_spec(model: ModelConfig) -> dict[str, Any]:
    """A model as server.yaml writes it (durations and sizes as text)."""
    return _CONVERTER.unstructure(model)


def _relative(problem: str) -> str:
    # parse_server_config names paths from the file's top: drop `models[0].`.
    for prefix in ("models[0].", "models[0]: "):
        if problem.startswith(prefix):
            return problem[len(prefix):]
    return problem


def parse_model(spec: Mapping[str, Any], source: str = "model") -> ModelConfig:
    """A model from its spec (a mapping as server.yaml writes it); CatalogError with every problem."""
    if not isinstance(spec, Mapping):
        raise CatalogError(source, [f"expected a mapping as server.yaml writes a model, got {type(spec).__name__}"])
    spec = dict(spec)
    # Fallbacks name other models of the catalog, which a lone model's parse cannot see: kept aside here,
    # checked against the catalog by Catalog.check.
    fallbacks = spec.pop("fallbacks", [])
    if not isinstance(fallbacks, list) or not all(isinstance(f, str) and f.strip() for f in fallbacks):
        raise CatalogError(source, ["fallbacks: give a list of model names or aliases, like [llama-8b]"])
    # server.yaml refuses max 0 (a model that never runs); at run time it is how
    # a model is stopped without being removed, so it is checked as 1 and kept.
    scaling = spec.get("scaling")
    stopped = isinstance(scaling, Mapping) and scaling.get("max") == 0
    if stopped:
        spec["scaling"] = {**scaling, "max": 1}
    try:
        config = parse_server_config({"models": [spec]}, source)
    except ConfigError as exc:
        raise CatalogError(source, [_relative(p) for p in exc.problems]) from None
    model = config.models[0]
    if stopped:
        model = attrs.evolve(model, scaling=attrs.evolve(model.scaling, max=0))
    if fallbacks:
        model = attrs.evolve(model, fallbacks=[f.strip() for f in fallbacks])
    return model


def parse_scaling(spec: Mapping[str, Any], base: Scaling | None = None, source: str = "scaling") -> Scaling:
    """Scaling from a mapping of the keys to change over `base`; CatalogError when a value is wrong."""
    base = base or Scaling()
    merged = {**model_to_spec_scaling(base), **dict(spec)}
    try:
        return _CONVERTER.structure(merged, Scaling)
    except Exception as exc:  # noqa: BLE001 - cattrs' own class validation errors, said in words
        raise CatalogError(source, [_cattrs_problem(exc)]) from None


def model_to_spec_scaling(scaling: Scaling) -> dict[str, Any]:
    return _CONVERTER.unstructure(scaling)


def _cattrs_problem(exc: BaseException) -> str:
    from cattrs.errors import ClassValidationError

    if isinstance(exc, ClassValidationError):
        with_notes, without = exc.group_exceptions()
        parts = [f"{note.name}: {sub}" for sub, note in with_notes] + [str(sub) for sub in without]
        return "; ".join(parts)
    return str(exc)


def check_scaling(scaling: Scaling) -> list[str]:
    """What is impossible in a model's scaling (the run-time form of server.yaml's checks)."""
    problems = []
    if scaling.min < 0 or scaling.max < 0:
        problems.append("scaling: min and max must not be negative")
    if scaling.min > scaling.max:
        problems.append(f"scaling.min: {scaling.min} is more than max ({scaling.max})")
    if scaling.on_demand and scaling.min > 0:
        problems.append(
            f"scaling.min: must be 0 for an on-demand model, which starts at its first request; got {scaling.min}"
        )
    if scaling.idle_timeout <= Duration(0):
        problems.append("scaling.idle_timeout: must be longer than 0s")
    problems += [f"{format_path(('scaling', *path))}: {text}" for path, text in window_problems(scaling)]
    return problems


def check_engines(model: ModelConfig, engines: Mapping[str, Engine] | None) -> list[str]:
    """Each profile's engine is installed here, runs on the devices asked for, and accepts its args and env."""
    if engines is None:
        return []
    problems = []
    for index, profile in enumerate(model.profiles):
        where = format_path(("profiles", index))
        name = profile.engine or model.engine
        engine = engines.get(name)
        if engine is None:
            known = ", ".join(sorted(engines)) or "none"
            problems.append(f"{where}.engine: no engine called {name!r} is installed here (there are: {known})")
            continue
        devices = tuple(getattr(engine, "devices", ("gpu",)))
        if profile.gpus > 0 and "gpu" not in devices:
            problems.append(f"{where}.gpus: engine {name} runs on CPUs only; set gpus to 0")
        if profile.gpus == 0 and "cpu" not in devices:
            problems.append(f"{where}.gpus: engine {name} needs GPUs; give the number each replica needs")
        if profile.nodes > 1 and not getattr(engine, "multi_node", False):
            able = ", ".join(sorted(n for n, e in engines.items() if getattr(e, "multi_node", False))) or "none here"
            problems.append(f"{where}.nodes: engine {name} runs a replica on one node only; set nodes to 1, "
                            f"or use an engine that spans nodes ({able})")
        for problem in engine.validate(list(profile.args), dict(profile.env)):
            problems.append(f"{where}: {problem}")
    return problems + adapters_declared.engine_problems(model, engines)  # adapters: engines that load them


_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}$")


def check_engine_version(model: ModelConfig) -> list[str]:
    """A pinned engine_version is a version, of the one engine every profile runs."""
    if not model.engine_version:
        return []
    if not _VERSION.match(model.engine_version):
        return [f"engine_version: {model.engine_version!r} is not a version (like 0.9.1): letters, digits "
                f"and . + ! _ - only"]
    names = sorted({p.engine or model.engine for p in model.profiles})
    if len(names) > 1:
        return [f"engine_version: its profiles run different engines ({', '.join(names)}); pin a version only "
                f"when they all run one"]
    return []


class Catalog:
    """The models the scheduler places, by name (aliases resolve too)."""

    def __init__(
        self,
        file_models: Sequence[ModelConfig],
        store: Store | None = None,
        engines: Mapping[str, Engine] | None = None,
        *,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.engines = engines
        self._file = {m.name: m for m in file_models}
        self._models: dict[str, CatalogModel] = {}
        self._names: dict[str, str] = {}
        self._signature: tuple = ()
        self._on_change = on_change
        #: told after each change, besides on_change (the router follows: llmgw.router.catalog_follow)
        self.listeners: list[Callable[[], None]] = []
        self._loading = asyncio.Lock()
        #: canaries and revisions to roll back to (llmgw.control.rollout_state), read with the models
        self.rollouts = Rollouts()
        #: federation: the peers of server.yaml, whose PEER/MODEL names a model may have as fallbacks
        self.federation_peers: frozenset[str] = frozenset()
        #: what a model's source may not be here, in words ("" when it may): an offline site's rule
        self.source_problem: Callable[[str], str] = lambda source: ""
        self._rebuild([])

    # -- reading ------------------------------------------------------------

    def get(self, name: str) -> CatalogModel | None:
        """A model by its name or an alias."""
        canonical = self._names.get(name)
        return self._models.get(canonical) if canonical else None

    def __contains__(self, name: str) -> bool:
        return name in self._names

    def models(self) -> list[CatalogModel]:
        """Every model, by name; invalid ones included (check `.valid`)."""
        return [self._models[n] for n in sorted(self._models)]

    def cluster_models(self) -> list[CatalogModel]:
        """The valid models that run on nodes."""
        return [m for m in self.models() if m.runs_on_cluster and m.valid]

    def names(self) -> list[str]:
        return sorted(self._models)

    # -- the store ------------------------------------------------------------

    async def load(self) -> bool:
        """Read the store's rows again; True when what the catalog holds changed."""
        if self.store is None:
            return False
        async with self._loading:  # two reads at once (reconciler, watcher) must not take up the older last
            return await self._load()

    async def _load(self) -> bool:
        entries = await self.store.list_catalog_entries()
        rollouts = await self.store.get_setting(ROLLOUTS_SETTING)
        signature = (tuple((e.name, e.kind, e.version) for e in entries), rollouts.version if rollouts else 0)
        if signature == self._signature:
            return False
        self._signature = signature
        self.rollouts = Rollouts.from_setting(rollouts.value if rollouts else None)
        self._rebuild(entries)
        if self._on_change is not None:
            self._on_change()
        for listener in list(self.listeners):
            listener()
        return True

    def _rebuild(self, entries: Sequence[Any]) -> None:
        models: dict[str, CatalogModel] = {}
        for name, config in self._file.items():
            models[name] = CatalogModel(config, "file", problems=tuple(self._problems(config)))
        for entry in entries:
            if entry.kind == "scaling":
                base = models.get(entry.name)
                if base is None or base.origin != "file":
                    log.warning("a scaling row names no model of server.yaml; ignored",
                                extra={"fields": {"model": entry.name}})
                    continue
                try:
                    scaling = parse_scaling(entry.spec, base.config.scaling, f"scaling of {entry.name}")
                except CatalogError as exc:
                    models[entry.name] = attrs.evolve(base, problems=base.problems + tuple(exc.problems))
                    continue
                config = attrs.evolve(base.config, scaling=scaling)
                models[entry.name] = attrs.evolve(
                    base, config=config, version=entry.version, scaling_from="store",
                    problems=tuple(self._problems(config)),
                )
                continue
            if entry.name in self._file:
                log.warning("a run-time model has the name of one in server.yaml; the file's wins",
                            extra={"fields": {"model": entry.name}})
                continue
            try:
                config = parse_model(entry.spec, f"model {entry.name}")
                problems = self._problems(config)
            except CatalogError as exc:
                config = ModelConfig(name=entry.name)
                problems = exc.problems
            models[entry.name] = CatalogModel(config, "store", entry.version, "store", tuple(problems))
        names: dict[str, str] = {}
        for model in models.values():
            names.setdefault(model.name, model.name)
        for model in models.values():
            for alias in model.config.aliases:
                names.setdefault(alias, model.name)
        self._models, self._names = models, names
        for model in models.values():
            if model.problems:
                log.error("model cannot run: %s", "; ".join(model.problems),
                          extra={"fields": {"model": model.name, "origin": model.origin}})

    def _problems(self, model: ModelConfig) -> list[str]:
        problems = check_scaling(model.scaling)
        return problems + check_engines(model, self.engines) + check_engine_version(model)

    # -- changing ---------------------------------------------------------------

    def check(self, spec: Mapping[str, Any] | ModelConfig) -> ModelConfig:
        """The model a spec describes, checked as `add` checks it; CatalogError otherwise."""
        model = spec if isinstance(spec, ModelConfig) else parse_model(spec)
        subject = f"model {model.name}"
        problems = []
        if model.endpoints:
            problems.append("endpoints: a model forwarded to a provider is declared in server.yaml")
        if not model.profiles:
            problems.append("profiles: give at least one, saying how the model runs on the nodes")
        if (source_problem := self.source_problem(model.source or "")):
            problems.append(f"source: {source_problem}")
        problems += self._problems(model)
        taken = self._names.get(model.name)
        if taken is not None and self._models[taken].origin == "file":
            problems.append(f"name: {model.name!r} is declared in server.yaml; change it there")
        for alias in [model.name, *model.aliases]:
            owner = self._names.get(alias)
            if owner is not None and owner != model.name:
                problems.append(f"aliases: {alias!r} already names {owner}")
        problems += adapters_declared.clashes_with(model, [m.config for m in self._models.values()])  # adapters
        for index, fallback in enumerate(model.fallbacks):
            if fallback == model.name or fallback in model.aliases:
                problems.append(f"fallbacks[{index}]: names the model itself")
            elif fallback not in self._names and fallback.split("/", 1)[0] not in self.federation_peers:
                known = ", ".join(n for n in sorted(self._names) if n != model.name) or "none"
                problems.append(f"fallbacks[{index}]: no model called {fallback!r} is in the catalog; "
                                f"there are: {known}")
        if problems:
            clash = all("declared in server.yaml" in p or "already names" in p or "already an adapter" in p
                        for p in problems)  # adapters: a name taken by one is a clash too
            raise CatalogError(subject, problems, conflict=clash)
        return model

    async def add(self, spec: Mapping[str, Any] | ModelConfig, *, actor: str, replace: bool = False,
                  audit: bool = True) -> CatalogModel:
        """Add a model (or, with `replace`, change one added at run time); kept in the store.

        `audit` False leaves the audit event to the caller (the admin API records its own)."""
        store = self._need_store()
        model = self.check(spec)
        current = self._models.get(model.name)
        if current is not None and not replace:
            raise CatalogError(f"model {model.name}", ["name: already in the catalog; remove it first, or replace it"],
                               conflict=True)
        expect = current.version if current is not None else 0
        try:
            await store.put_catalog_entry(model.name, "model", model_to_spec(model), actor=actor,
                                          expect_version=expect)
        except Conflict as exc:
            raise CatalogError(f"model {model.name}", [str(exc)], conflict=True) from None
        if audit:
            await store.append_audit(actor, "models.replace" if current else "models.add", f"model:{model.name}",
                                     {"spec": model_to_spec(model)})
        await self.load()
        return self._models[model.name]

    async def remove(self, name: str, *, actor: str, audit: bool = True) -> CatalogModel:
        """Take a run-time model out of the catalog; its replicas are stopped by the reconciler."""
        store = self._need_store()
        model = self.get(name)
        if model is None:
            raise UnknownModel(name)
        if model.origin == "file":
            raise CatalogError(f"model {model.name}", ["it is declared in server.yaml; remove it there"], conflict=True)
        try:
            await store.delete_catalog_entry(model.name, expect_version=model.version)
        except Conflict as exc:
            raise CatalogError(f"model {model.name}", [str(exc)], conflict=True) from None
        if audit:
            await store.append_audit(actor, "models.remove", f"model:{model.name}", {"version": model.version})
        await self.load()
        return model

    async def scale(
        self,
        name: str,
        *,
        actor: str,
        min: int | None = None,
        max: int | None = None,
        on_demand: bool | None = None,
        idle_timeout: dt.timedelta | str | None = None,
        audit: bool = True,
    ) -> CatalogModel:
        """Change how many replicas run. A maximum of 0 stops the model without removing it."""
        store = self._need_store()
        model = self.get(name)
        if model is None:
            raise UnknownModel(name)
        changes: dict[str, Any] = {}
        for key, value in (("min", min), ("max", max), ("on_demand", on_demand)):
            if value is not None:
                changes[key] = value
        if idle_timeout is not None:
            changes["idle_timeout"] = str(Duration.parse(idle_timeout)) if isinstance(idle_timeout, str) \
                else str(Duration.from_seconds(idle_timeout.total_seconds()))
        subject = f"scaling of {model.name}"
        scaling = parse_scaling(changes, model.config.scaling, subject)
        problems = check_scaling(scaling)
        if problems:
            raise CatalogError(subject, problems)
        try:
            if model.origin == "file":
                expect = model.version if model.scaling_from == "store" else 0
                await store.put_catalog_entry(model.name, "scaling", model_to_spec_scaling(scaling),
                                              actor=actor, expect_version=expect)
            else:
                spec = model_to_spec(attrs.evolve(model.config, scaling=scaling))
                await store.put_catalog_entry(model.name, "model", spec, actor=actor, expect_version=model.version)
        except Conflict as exc:
            raise CatalogError(subject, [str(exc)], conflict=True) from None
        if audit:
            await store.append_audit(actor, "models.scale", f"model:{model.name}", {
                "from": model_to_spec_scaling(model.config.scaling), "to": model_to_spec_scaling(scaling),
            })
        await self.load()
        return self._models[model.name]

    async def reset_scaling(self, name: str, *, actor: str) -> CatalogModel:
        """Give a server.yaml model back the scaling the file says."""
        store = self._need_store()
        model = self.get(name)
        if model is None:
            raise UnknownModel(name)
        if model.origin != "file" or model.scaling_from != "store":
            return model
        await store.delete_catalog_entry(model.name, expect_version=model.version)
        await store.append_audit(actor, "models.scale", f"model:{model.name}", {"reset": True})
        await self.load()
        return self._models[model.name]

    def _need_store(self) -> Store:
        if self.store is None:
            raise CatalogError("catalog", ["this catalog has no store; models can only come from server.yaml"])
        return self.store


__all__ = [
    "Catalog",
    "CatalogError",
    "CatalogModel",
    "UnknownModel",
    "check_engines",
    "check_scaling",
    "model_to_spec",
    "parse_model",
    "parse_scaling",
]
