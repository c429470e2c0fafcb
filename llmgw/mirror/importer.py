"""Files that are already on this machine, into the mirror.

`import_file` copies one local file into a new version; `import_ollama`
reads an Ollama manifest (`manifests/<host>/<namespace>/<name>/<tag>`),
copies its model blob and its vision projector from `blobs/sha256-<hex>`,
checks each against its digest, and prints the model definition to add.

Both are all or nothing: the files are copied into a hidden staging
directory beside the versions, checked there, given their sidecar, and the
whole directory is renamed into a version in one step, or removed. An
import identical to the model's newest version adds nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import attrs

from llmgw.mirror.download import CHUNK
from llmgw.mirror.layout import (
    Layout,
    LayoutError,
    Origin,
    Sidecar,
    SourceFile,
    check_file_path,
    check_model_name,
    model_name_from,
    utc_now,
)

MEDIA = "application/vnd.ollama.image."
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,127}")
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


class ImportRefused(Exception):
    """An import that was refused; nothing was added to the mirror."""


@attrs.frozen
class ImportResult:
    model: str
    version: str
    files: tuple[SourceFile, ...]
    unchanged_since: str = ""  # the newest version already held these bytes
    definition: str = ""  # a model definition for server.yaml (Ollama imports)


def default_ollama_dir() -> Path:
    return Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models")


async def import_file(layout: Layout, path: str | os.PathLike, name: str) -> ImportResult:
    """Copy a local file into `name`'s next version, with a sidecar naming where it came from."""
    source = Path(path).absolute()
    if not source.is_file():
        raise ImportRefused(f"{source}: not a file")
    model = check_model_name(name)
    filename = check_file_path(source.name)
    staging = layout.staging_dir(model)
    try:
        size, sha = await _copy_hashing(source, staging / filename)
        entry = SourceFile(path=filename, size=size, sha256=sha, url=source.as_uri())
        origin = Origin(kind="file", path=str(source))
        return await _commit(layout, model, staging, origin, [entry])
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        layout.drop_empty_model(model)


def ollama_manifest(ollama_dir: Path, ref: str) -> tuple[Path, str, str]:
    """Where `name[:tag]` (or `namespace/name`, `host/namespace/name`) has its manifest."""
    name, _, tag = ref.partition(":")
    tag = tag or "latest"
    parts = name.split("/")
    if len(parts) == 1:
        parts = ["registry.ollama.ai", "library", *parts]
    elif len(parts) == 2:
        parts = ["registry.ollama.ai", *parts]
    if len(parts) != 3 or not all(_PART.fullmatch(p) for p in [*parts, tag]):
        raise ImportRefused(f"{ref!r} is not an Ollama model like llama3.2, llama3.2:3b or namespace/name:tag")
    return ollama_dir.joinpath("manifests", *parts, tag), parts[2], tag


async def import_ollama(layout: Layout, ref: str, ollama_dir: str | os.PathLike | None = None, *,
                        name: str | None = None, base_url: str = "") -> ImportResult:
    """Import an Ollama model's weights (and projector) and say how to serve them."""
    root = Path(ollama_dir).expanduser() if ollama_dir else default_ollama_dir()
    manifest_path, short, tag = ollama_manifest(root, ref)
    try:
        raw = manifest_path.read_bytes()
        manifest = json.loads(raw)
    except FileNotFoundError:
        raise ImportRefused(f"{ref}: no manifest at {manifest_path} (`ollama list` shows what is there; "
                           "--ollama-dir names another models directory)") from None
    except (OSError, ValueError) as exc:
        raise ImportRefused(f"{manifest_path}: not a manifest ({exc})") from exc
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    if not isinstance(layers, list):
        raise ImportRefused(f"{manifest_path}: the manifest has no layers")
    kinds: dict[str, list[dict[str, Any]]] = {}
    for layer in layers:
        if isinstance(layer, dict) and isinstance(layer.get("mediaType"), str):
            kinds.setdefault(layer["mediaType"].removeprefix(MEDIA), []).append(layer)
    if kinds.get("adapter"):
        raise ImportRefused(f"{ref} carries a LoRA adapter; adapters are not imported (import the base "
                           "model and serve the adapter from its own source)")
    if kinds.get("tensor"):
        raise ImportRefused(f"{ref} keeps its weights as separate tensors; only single-file GGUF models import")
    weights, projectors = kinds.get("model", []), kinds.get("projector", [])
    if len(weights) != 1:
        raise ImportRefused(f"{ref} has {len(weights)} weight layers; only a model in one GGUF file imports")
    if len(projectors) > 1:
        raise ImportRefused(f"{ref} has {len(projectors)} vision projectors; one is expected")
    model = check_model_name(name) if name else model_name_from(short if tag == "latest" else f"{short}-{tag}")
    wanted = [(f"{model}.gguf", weights[0])] + [(f"mmproj-{model}.gguf", p) for p in projectors]
    staging = layout.staging_dir(model)
    try:
        entries = []
        for filename, layer in wanted:
            entries.append(await _copy_blob(root, layer, staging / filename, ref))
        with open(staging / entries[0].path, "rb") as f:
            if f.read(4) != b"GGUF":
                raise ImportRefused(f"{ref}: its model layer is not a GGUF file")
        origin = Origin(kind="ollama", path=ref, revision="sha256:" + hashlib.sha256(raw).hexdigest())
        result = await _commit(layout, model, staging, origin, entries)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        layout.drop_empty_model(model)
    params = _params(root, kinds.get("params", []))
    definition = model_definition(
        result.model, result.version, result.files[0].path, base_url=base_url,
        projector=result.files[1].path if len(result.files) > 1 else "",
        context=params.get("num_ctx") if isinstance(params.get("num_ctx"), int) else None,
        note=f"imported from Ollama's {ref}",
    )
    return attrs.evolve(result, definition=definition)


def model_definition(model: str, version: str, filename: str, *, base_url: str = "", projector: str = "",
                     context: int | None = None, note: str = "") -> str:
    """A catalog entry serving a mirrored GGUF with llama.cpp, as YAML text."""
    path = f"{model}/{version}/{filename}"
    source = f"{base_url.rstrip('/')}/{path}" if base_url else path
    lines = []
    if note:
        lines.append(f"# {note}")
    lines += ["# Add under models: in server.yaml, or give it to `llmgw ctl model add`.", f"- name: {model}",
              f"  source: {source}"]
    if projector:
        lines.append(f"  # its vision projector, {projector}, is fetched beside it and loaded with it")
    lines += ["  engine: llamacpp", "  profiles:", "    - name: default", "      gpus: 1  # 0 runs it on CPUs"]
    if context:
        lines.append(f'      args: ["--ctx-size", "{context}"]')
    return "\n".join(lines) + "\n"


async def _copy_blob(root: Path, layer: dict[str, Any], dest: Path, ref: str) -> SourceFile:
    digest = str(layer.get("digest", ""))
    match = _DIGEST.fullmatch(digest)
    if not match:
        raise ImportRefused(f"{ref}: layer digest {digest!r} is not sha256:<64 hex digits>")
    blob = root / "blobs" / f"sha256-{match.group(1)}"
    if not blob.is_file():
        raise ImportRefused(f"{ref}: blob {blob.name} is missing from {blob.parent}")
    size, sha = await _copy_hashing(blob, dest)
    if sha != match.group(1):
        raise ImportRefused(f"{ref}: blob {blob.name} has sha256 {sha}: it is damaged; nothing was imported")
    if isinstance(layer.get("size"), int) and layer["size"] != size:
        raise ImportRefused(f"{ref}: blob {blob.name} is {size} bytes, the manifest says {layer['size']}")
    return SourceFile(path=dest.name, size=size, sha256=sha, revision=digest)


def _params(root: Path, layers: list[dict[str, Any]]) -> dict[str, Any]:
    for layer in layers:
        match = _DIGEST.fullmatch(str(layer.get("digest", "")))
        if match and int(layer.get("size") or 0) < 1 << 20:
            try:
                value = json.loads((root / "blobs" / f"sha256-{match.group(1)}").read_text())
            except (OSError, ValueError):
                return {}
            return value if isinstance(value, dict) else {}
    return {}


async def _commit(layout: Layout, model: str, staging: Path, origin: Origin, files: list[SourceFile]) -> ImportResult:
    async with layout.model_lock(model):
        newest = layout.newest(model)
        if newest is not None and _digests(newest.files) == _digests(files):
            return ImportResult(model, newest.version, tuple(newest.files), unchanged_since=newest.version)
        version = layout.new_version_name(model)
        now = utc_now()
        sidecar = Sidecar(model=model, version=version, origin=origin, files=files, complete=True,
                          created_at=now, fetched_at=now)
        layout.write_sidecar(sidecar, staging)
        target = layout.version_dir(model, version)
        if target.exists():
            raise LayoutError(f"{target} appeared while importing; try again")
        os.rename(staging, target)
    return ImportResult(model, version, tuple(files))


def _digests(files: list[SourceFile]) -> list[tuple[str, str]]:
    return sorted((f.path, f.sha256) for f in files)


async def _copy_hashing(source: Path, dest: Path) -> tuple[int, str]:
    return await asyncio.get_running_loop().run_in_executor(None, _copy_hashing_blocking, source, dest)


def _copy_hashing_blocking(source: Path, dest: Path) -> tuple[int, str]:
    hasher = hashlib.sha256()
    size = 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(source, "rb") as src, open(dest, "wb") as out:
        while chunk := src.read(CHUNK * 4):
            out.write(chunk)
            hasher.update(chunk)
            size += len(chunk)
        out.flush()
        os.fsync(out.fileno())
    return size, hasher.hexdigest()
