"""What the mirror holds and what uses it: list, unused, remove, verify, update checks.

"Use" comes from a catalog file (`--catalog`): either `server.yaml` itself
(its `models:` list of `name`/`source`), or a plain map of model name to
source (or list of sources), in YAML or JSON:

    chat: http://models.internal:8081/qwen3-4b/2025-06-01/qwen3-4b-q4_k_m.gguf
    judge: [qwen3guard-0.6b/2025-05-20]
    embed: Qwen/Qwen3-Embedding-0.6B-GGUF

A source uses a version when its path (a URL's path, a path under the
mirror directory, or `model/version/...`) names it; naming only `model`
uses that model's newest whole version, and so does naming the registry
repository a model was fetched from.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import unquote, urlsplit

import attrs

from llmgw.mirror.download import sha256_file
from llmgw.mirror.fetch import select_files
from llmgw.mirror.layout import (
    SIDECAR,
    Layout,
    LayoutError,
    Sidecar,
    any_locked,
    is_version_name,
    present_bytes,
)
from llmgw.mirror.registry import Registry

VersionKey = tuple[str, str]


class CatalogError(Exception):
    """A catalog file that cannot be read as model names and sources."""


class InUse(Exception):
    """A version some catalog model uses; removing it needs --force."""

    def __init__(self, target: str, users: dict[VersionKey, list[str]]) -> None:
        self.users = users
        names = sorted({name for names in users.values() for name in names})
        super().__init__(f"{target} is used by {', '.join(names)}; --force removes it anyway")


# ---------------------------------------------------------------- catalog


@attrs.frozen
class Catalog:
    """Model names and the sources they name."""

    sources: dict[str, tuple[str, ...]] = attrs.Factory(dict)

    @classmethod
    def load(cls, path: str | os.PathLike | None) -> Catalog:
        if not path:
            return cls()
        from ruamel.yaml import YAML  # YAML is a superset of JSON: one reader for both

        try:
            with open(path, encoding="utf-8") as f:
                data = YAML(typ="safe").load(f)
        except OSError as exc:
            raise CatalogError(f"{path}: {exc.strerror}") from exc
        except Exception as exc:  # ruamel's many error classes
            raise CatalogError(f"{path}: not YAML or JSON ({str(exc).splitlines()[0]})") from exc
        return cls(_sources_from(data, str(path)))

    def usage(self, layout: Layout) -> dict[VersionKey, list[str]]:
        """Which catalog models use each version."""
        newest: dict[str, Sidecar | None] = {m: layout.newest(m) for m in layout.models()}
        by_repo: dict[str, list[str]] = {}
        for model, sidecar in newest.items():
            if sidecar is not None and sidecar.origin.repo:
                by_repo.setdefault(sidecar.origin.repo.lower(), []).append(model)
        used: dict[VersionKey, list[str]] = {}
        for name, sources in sorted(self.sources.items()):
            for source in sources:
                for key in _versions_named(layout, source, newest, by_repo):
                    users = used.setdefault(key, [])
                    if name not in users:
                        users.append(name)
        return used


def _sources_from(data: Any, where: str) -> dict[str, tuple[str, ...]]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise CatalogError(f"{where}: expected a map of model names to sources, or server.yaml's models: list")
    models = data.get("models", data) if "models" in data else data
    result: dict[str, tuple[str, ...]] = {}
    if isinstance(models, list):
        for i, entry in enumerate(models):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise CatalogError(f"{where}: models[{i}] has no name")
            source = entry.get("source", "")
            result[entry["name"]] = tuple(s for s in _as_list(source, f"{where}: models[{i}].source") if s)
        return result
    if isinstance(models, dict):
        for name, source in models.items():
            result[str(name)] = tuple(s for s in _as_list(source, f"{where}: {name}") if s)
        return result
    raise CatalogError(f"{where}: models must be a list or a map")


def _as_list(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    if value is None:
        return []
    raise CatalogError(f"{where}: expected a source (text) or a list of them")


def _versions_named(layout: Layout, source: str, newest: dict[str, Sidecar | None],
                    by_repo: dict[str, list[str]]) -> list[VersionKey]:
    text = source.strip()
    if text.startswith(("http://", "https://")):
        text = unquote(urlsplit(text).path)
    elif text.startswith("/"):
        try:
            text = str(Path(text).relative_to(layout.root))
        except ValueError:
            return []
    parts = [p for p in text.split("/") if p]
    if parts and parts[0] in newest:
        if len(parts) >= 2 and is_version_name(parts[1]):
            return [(parts[0], parts[1])]
        if len(parts) == 1 and newest[parts[0]] is not None:
            return [(parts[0], newest[parts[0]].version)]
        return []
    repo = text.split("@", 1)[0].lower()
    return [(m, newest[m].version) for m in by_repo.get(repo, []) if newest[m] is not None]


# ---------------------------------------------------------------- list


@attrs.frozen
class VersionRow:
    model: str
    version: str
    state: str  # complete | downloading | incomplete | no sidecar
    files: int
    size: int | None  # what the whole version is (None: not known yet)
    present: int  # bytes on disk, whole files and partial downloads
    origin: str
    revision: str
    fetched_at: str
    used_by: tuple[str, ...]

    @property
    def percent(self) -> int | None:
        if self.state == "complete":
            return 100
        if self.state == "no sidecar" or not self.size:
            return None
        return int(100 * self.present / self.size)

    def to_json(self) -> dict[str, Any]:
        value = attrs.asdict(self)
        value["used_by"] = list(self.used_by)
        value["percent"] = self.percent
        return value


def describe_origin(sidecar: Sidecar) -> str:
    o = sidecar.origin
    if o.kind == "registry":
        return f"{o.repo}@{o.requested_revision or o.revision}"
    return o.url or o.path or o.kind


def list_versions(layout: Layout, catalog: Catalog | None = None, model: str | None = None) -> list[VersionRow]:
    usage = (catalog or Catalog()).usage(layout)
    rows = []
    for m in [model] if model else layout.models():
        for version in layout.versions(m):
            directory = layout.version_dir(m, version)
            users = tuple(usage.get((m, version), ()))
            try:
                sidecar = layout.read_sidecar(m, version)
            except LayoutError:
                sidecar = None
            if sidecar is None:
                size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.name.startswith("."))
                rows.append(VersionRow(m, version, "no sidecar", 0, size, size, "", "", "", users))
                continue
            present, _ = present_bytes(directory, sidecar.files)
            if sidecar.complete:
                state = "complete"
            else:
                state = "downloading" if any_locked(directory, sidecar.files) else "incomplete"
            known = all(f.size is not None for f in sidecar.files)
            rows.append(VersionRow(
                m, version, state, len(sidecar.files), sidecar.total_size if known else None, present,
                describe_origin(sidecar), sidecar.origin.revision, sidecar.fetched_at, users,
            ))
    return rows


def unused_versions(layout: Layout, catalog: Catalog) -> list[VersionRow]:
    """Versions no catalog model uses, downloads in progress aside."""
    return [r for r in list_versions(layout, catalog) if not r.used_by and r.state != "downloading"]


# ---------------------------------------------------------------- remove


def remove(layout: Layout, target: str, catalog: Catalog | None = None, *, force: bool = False) -> list[VersionKey]:
    """Remove `MODEL` (every version) or `MODEL/VERSION`; refuses one in use unless forced."""
    model, version = layout.resolve(target)
    versions = [version] if version else layout.versions(model)
    if version and version not in layout.versions(model):
        raise LayoutError(f"{target}: no such version (mirror list shows what there is)")
    if not version and not layout.model_dir(model).is_dir():
        raise LayoutError(f"{target}: no such model (mirror list shows what there is)")
    usage = (catalog or Catalog()).usage(layout)
    users = {(model, v): usage[(model, v)] for v in versions if (model, v) in usage}
    if users and not force:
        raise InUse(target, users)
    busy = [v for v in versions if _downloading(layout, model, v)]
    if busy and not force:
        raise LayoutError(f"{model}/{busy[0]} is being downloaded now; --force removes it anyway")
    if version:
        layout.remove_version(model, version)
    else:
        layout.remove_model(model)
    return [(model, v) for v in versions]


def _downloading(layout: Layout, model: str, version: str) -> bool:
    try:
        sidecar = layout.read_sidecar(model, version)
    except LayoutError:
        return False
    return bool(sidecar and not sidecar.complete and any_locked(layout.version_dir(model, version), sidecar.files))


# ---------------------------------------------------------------- verify


@attrs.frozen
class VerifyResult:
    model: str
    version: str
    checked: int
    problems: tuple[str, ...]  # each one makes `mirror verify` exit 1
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "version": self.version, "checked": self.checked,
                "problems": list(self.problems), "notes": list(self.notes)}


async def verify(layout: Layout, target: str | None = None, *, parallel: int = 2) -> list[VerifyResult]:
    """Re-hash every file against its sidecar."""
    keys: list[VersionKey] = []
    if target:
        model, version = layout.resolve(target)
        keys = [(model, v) for v in ([version] if version else layout.versions(model))]
        if not keys:
            raise LayoutError(f"{target}: no such model or version")
    else:
        keys = [(m, v) for m in layout.models() for v in layout.versions(m)]
    limit = asyncio.Semaphore(parallel)
    return list(await asyncio.gather(*(_verify_one(layout, m, v, limit) for m, v in keys)))


async def _verify_one(layout: Layout, model: str, version: str, limit: asyncio.Semaphore) -> VerifyResult:
    directory = layout.version_dir(model, version)
    try:
        sidecar = layout.read_sidecar(model, version)
    except LayoutError as exc:
        return VerifyResult(model, version, 0, (str(exc),))
    if sidecar is None:
        return VerifyResult(model, version, 0, (f"no {SIDECAR}: nothing to check the files against",))
    problems, notes = [], []
    checked = 0
    loop = asyncio.get_running_loop()
    for f in sidecar.files:
        path = directory / f.path
        if not path.is_file():
            (problems if sidecar.complete else notes).append(f"{f.path}: missing" if sidecar.complete
                                                             else f"{f.path}: not fetched yet")
            continue
        size = path.stat().st_size
        if f.size is not None and size != f.size:
            problems.append(f"{f.path}: {size} bytes, the sidecar says {f.size}")
            continue
        if not f.sha256:
            notes.append(f"{f.path}: no sha256 recorded, size only")
            checked += 1
            continue
        async with limit:
            got = await loop.run_in_executor(None, sha256_file, path)
        checked += 1
        if got != f.sha256:
            problems.append(f"{f.path}: sha256 {got}, the sidecar says {f.sha256}")
    listed = {f.path for f in sidecar.files}
    for path in sorted(_visible_files(directory)):
        if path not in listed:
            notes.append(f"{path}: not in the sidecar (not served in the index)")
    if not sidecar.complete:
        notes.append("incomplete: `mirror add` again resumes it")
    return VerifyResult(model, version, checked, tuple(problems), tuple(notes))


def _visible_files(directory: Path) -> Iterable[str]:
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if not name.startswith("."):
                yield str(Path(root, name).relative_to(directory).as_posix())


# ---------------------------------------------------------------- updates


@attrs.frozen
class UpdateStatus:
    model: str
    version: str
    repo: str
    requested: str
    local_revision: str
    upstream_revision: str = ""
    status: str = ""  # up to date | newer revision | newer files | pinned | error
    changed: tuple[str, ...] = ()
    error: str = ""

    @property
    def update_available(self) -> bool:
        return self.status == "newer files"

    def to_json(self) -> dict[str, Any]:
        value = attrs.asdict(self)
        value["changed"] = list(self.changed)
        value["update_available"] = self.update_available
        return value


async def check_updates(layout: Layout, registry: Registry, model: str | None = None) -> list[UpdateStatus]:
    """For each model fetched from a registry, whether the registry has moved on from its newest version."""
    models = [model] if model else layout.models()
    results = []
    for m in models:
        sidecar = layout.newest(m)
        if sidecar is None or sidecar.origin.kind != "registry":
            if model:
                raise LayoutError(f"{m}: no whole version fetched from a registry to compare")
            continue
        results.append(await _check_one(registry, sidecar))
    return results


async def _check_one(registry: Registry, sidecar: Sidecar) -> UpdateStatus:
    o = sidecar.origin
    requested = o.requested_revision or "main"
    base = UpdateStatus(sidecar.model, sidecar.version, o.repo, requested, o.revision)
    if requested == o.revision:
        return attrs.evolve(base, upstream_revision=o.revision, status="pinned")
    try:
        upstream = await registry.revision(o.repo, requested)
        wanted = select_files(upstream.files, o.patterns, o.repo)
    except Exception as exc:  # noqa: BLE001 - one model's failure is its row's, not the run's
        return attrs.evolve(base, status="error", error=str(exc))
    have = {f.path: f for f in sidecar.files}
    changed = []
    for f in wanted:
        h = have.pop(f.path, None)
        if h is None or h.size != f.size or (f.sha256 and h.sha256 != f.sha256) or (
                not f.sha256 and f.blob_id and h.blob_id != f.blob_id):
            changed.append(f.path)
    changed.extend(f"{path} (gone upstream)" for path in have)
    if upstream.commit == o.revision:
        status = "up to date"
    else:
        status = "newer files" if changed else "newer revision"
    return attrs.evolve(base, upstream_revision=upstream.commit, status=status, changed=tuple(changed))
