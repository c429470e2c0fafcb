"""The mirror's directory: `<model>/<version>/<files>` and a sidecar per version.

A version is named after the UTC day it was fetched (`2025-06-01`); a second
version of the same model on the same day, different from the first, is
`2025-06-01-2`, and so on. Each version directory holds `.source.json`, the
sidecar: where every file came from, its size, sha256, upstream revision and
ETag, and whether the version is complete. Names starting with a dot are the
mirror's own (sidecars, `.partial` downloads, `.lock` files, staging
directories) and are never served or listed; `_llmgw/` holds what an offline
bundle brings and is not a model.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import AsyncIterator, Iterable

import attrs
import cattrs

SIDECAR = ".source.json"
SIDECAR_FORMAT = 1
RESERVED_PREFIX = "_"  # `_llmgw/` and anything else of the mirror's own that is served
#: The folder of Python wheels the mirror's package index serves (wheel_index.py): not a model.
WHEELS = "wheels"

_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+\-]{0,127}")
_VERSION_NAME = re.compile(r"(\d{4}-\d{2}-\d{2})(?:-(\d+))?")


class LayoutError(Exception):
    """A name or path that cannot be in the mirror, or a version that is not there."""


@attrs.define
class SourceFile:
    """One file of a version, as the sidecar records it."""

    path: str  # relative to the version directory, `/`-separated
    size: int | None = None
    sha256: str = ""  # lowercase hex; from the registry before the fetch, computed after
    url: str = ""  # where it was fetched from (no credentials)
    revision: str = ""  # the upstream revision (a commit, an ETag for a plain URL)
    etag: str = ""
    blob_id: str = ""  # the registry's git blob id, for files it gives no sha256 for


@attrs.define
class Origin:
    """Where a version came from."""

    kind: str  # registry | url | file | ollama
    registry: str = ""  # the registry's endpoint
    repo: str = ""
    revision: str = ""  # the upstream commit the files were fetched at
    requested_revision: str = ""  # what was asked for: main, a tag, a commit
    patterns: list[str] = attrs.Factory(list)
    url: str = ""
    path: str = ""  # a local file, or an Ollama model's name


@attrs.define
class Sidecar:
    """`.source.json`: one version's provenance."""

    model: str
    version: str
    origin: Origin
    files: list[SourceFile] = attrs.Factory(list)
    complete: bool = False
    created_at: str = ""
    fetched_at: str = ""
    format: int = SIDECAR_FORMAT

    def file(self, path: str) -> SourceFile | None:
        return next((f for f in self.files if f.path == path), None)

    @property
    def total_size(self) -> int:
        return sum(f.size or 0 for f in self.files)


def _converter() -> cattrs.Converter:
    # Unknown keys are ignored so an older llmgw reads a newer sidecar.
    return cattrs.Converter()


_CONVERTER = _converter()


def sidecar_to_dict(sidecar: Sidecar) -> dict:
    return _CONVERTER.unstructure(sidecar)


def sidecar_from_dict(data: dict) -> Sidecar:
    return _CONVERTER.structure(data, Sidecar)


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_day() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def check_model_name(name: str) -> str:
    if name == WHEELS:
        raise LayoutError(f"model name {WHEELS!r} is the mirror's folder of Python wheels (its package index); "
                          "choose another")
    if name == "metrics":
        raise LayoutError("model name 'metrics' is the path of the mirror's Prometheus metrics; choose another")
    if not _MODEL_NAME.fullmatch(name or ""):
        raise LayoutError(
            f"model name {name!r}: use letters, digits, '.', '_', '+' and '-', "
            "starting with a letter or digit (at most 128 characters)"
        )
    return name


def model_name_from(text: str) -> str:
    """A model name made from a repository or file name: `Qwen/Qwen3-0.6B-GGUF` → `qwen3-0.6b-gguf`."""
    base = text.rstrip("/").rsplit("/", 1)[-1]
    for suffix in (".gguf", ".safetensors", ".bin"):
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
    name = re.sub(r"[^A-Za-z0-9._+\-]+", "-", base).strip("-._").lower()
    return check_model_name(name[:128] or "model")


def is_version_name(name: str) -> bool:
    return _VERSION_NAME.fullmatch(name) is not None


def version_sort_key(name: str) -> tuple[str, int]:
    match = _VERSION_NAME.fullmatch(name)
    if not match:
        return (name, 0)
    return (match.group(1), int(match.group(2) or 1))


def check_file_path(path: str) -> str:
    """A file's path inside a version: relative, `/`-separated, no dot segments or dotfiles."""
    parts = path.split("/")
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        raise LayoutError(f"file path {path!r}: must be relative, without backslashes")
    for part in parts:
        if not part or part.startswith("."):
            raise LayoutError(f"file path {path!r}: empty or dot-named parts are not allowed")
    return path


def hidden_sibling(path: Path, suffix: str) -> Path:
    """`dir/.name<suffix>`: where the mirror keeps a file's partial download or lock."""
    return path.with_name(f".{path.name}{suffix}")


class Layout:
    """A mirror directory, read and written by every mirror command."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root).absolute()

    # ------------------------------------------------------------ reading

    def models(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            e.name
            for e in os.scandir(self.root)
            if e.is_dir(follow_symlinks=False)
            and not e.name.startswith((".", RESERVED_PREFIX))
            and e.name != WHEELS
            and _MODEL_NAME.fullmatch(e.name)
        )

    def model_dir(self, model: str) -> Path:
        return self.root / check_model_name(model)

    def versions(self, model: str) -> list[str]:
        directory = self.model_dir(model)
        if not directory.is_dir():
            return []
        names = [
            e.name
            for e in os.scandir(directory)
            if e.is_dir(follow_symlinks=False) and is_version_name(e.name)
        ]
        return sorted(names, key=version_sort_key)

    def version_dir(self, model: str, version: str) -> Path:
        if not is_version_name(version):
            raise LayoutError(f"version {version!r}: expected a date like 2025-06-01 or 2025-06-01-2")
        return self.model_dir(model) / version

    def read_sidecar(self, model: str, version: str) -> Sidecar | None:
        return read_sidecar_file(self.version_dir(model, version) / SIDECAR)

    def sidecars(self, model: str) -> list[Sidecar]:
        """Every version of `model` that has a sidecar, oldest first."""
        found = []
        for version in self.versions(model):
            sidecar = self.read_sidecar(model, version)
            if sidecar is not None:
                found.append(sidecar)
        return found

    def newest(self, model: str, *, complete: bool = True) -> Sidecar | None:
        for sidecar in reversed(self.sidecars(model)):
            if sidecar.complete or not complete:
                return sidecar
        return None

    def resolve(self, target: str) -> tuple[str, str | None]:
        """`MODEL` or `MODEL/VERSION` as given on a command line, checked."""
        model, _, version = target.strip("/").partition("/")
        check_model_name(model)
        if version:
            self.version_dir(model, version)
            return model, version
        return model, None

    # ------------------------------------------------------------ writing

    def write_sidecar(self, sidecar: Sidecar, directory: Path | None = None) -> None:
        directory = directory or self.version_dir(sidecar.model, sidecar.version)
        write_json_atomic(directory / SIDECAR, sidecar_to_dict(sidecar))

    def new_version_name(self, model: str, day: str | None = None) -> str:
        """The next free name for a version fetched today: the day, then `-2`, `-3`…"""
        day = day or utc_day()
        taken = set(self.versions(model))
        if day not in taken:
            return day
        n = 2
        while f"{day}-{n}" in taken:
            n += 1
        return f"{day}-{n}"

    def staging_dir(self, model: str) -> Path:
        """A fresh hidden directory beside the versions, renamed into one when whole."""
        directory = self.model_dir(model) / f".staging-{secrets.token_hex(6)}"
        directory.mkdir(parents=True)
        return directory

    def remove_version(self, model: str, version: str) -> None:
        shutil.rmtree(self.version_dir(model, version))
        self.drop_empty_model(model)

    def remove_model(self, model: str) -> None:
        shutil.rmtree(self.model_dir(model))

    def drop_empty_model(self, model: str) -> None:
        """Remove `model`'s directory when it holds no version and nothing visible."""
        directory = self.model_dir(model)
        if directory.is_dir() and not self.versions(model):
            if not any(not e.name.startswith(".") for e in os.scandir(directory)):
                shutil.rmtree(directory, ignore_errors=True)

    @contextlib.asynccontextmanager
    async def model_lock(self, model: str) -> AsyncIterator[None]:
        """Held while a version of `model` is chosen or changed, by any process."""
        directory = self.model_dir(model)
        directory.mkdir(parents=True, exist_ok=True)
        async with file_lock(directory / ".lock"):
            yield


def read_sidecar_file(path: Path) -> Sidecar | None:
    try:
        with open(path, encoding="utf-8") as f:
            return sidecar_from_dict(json.load(f))
    except FileNotFoundError:
        return None
    except (ValueError, cattrs.BaseValidationError) as exc:
        raise LayoutError(f"{path}: not a sidecar this llmgw can read ({exc})") from exc


def write_json_atomic(path: Path, value: object) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def present_bytes(directory: Path, files: Iterable[SourceFile]) -> tuple[int, int]:
    """(bytes on disk, files whole) for a version's files: whole ones and `.partial` ones."""
    done = whole = 0
    for f in files:
        path = directory / f.path
        try:
            done += path.stat().st_size
            whole += 1
            continue
        except FileNotFoundError:
            pass
        try:
            done += hidden_sibling(path, ".partial").stat().st_size
        except FileNotFoundError:
            pass
    return done, whole


def any_locked(directory: Path, files: Iterable[SourceFile]) -> bool:
    """Whether some process is downloading one of these files right now."""
    return any(is_locked(hidden_sibling(directory / f.path, ".lock")) for f in files)


# ---------------------------------------------------------------- locks


@contextlib.asynccontextmanager
async def file_lock(path: Path, poll: float = 0.05) -> AsyncIterator[None]:
    """An exclusive `flock` on `path`, waited for without blocking the event loop.

    flock locks belong to an open file, so two tasks of one process exclude
    each other as two processes do.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                await asyncio.sleep(poll)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def is_locked(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)
