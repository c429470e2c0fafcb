"""`llmgw bundle create`: a release, engine sources and wheels, and model versions in one signed archive.

Everything is checked on the way in: the release against its signature, each
model file against the sha256 its mirror recorded when it was fetched, and
every file hashed again as it is written, so a file that changed between
the two readings stops the bundle. The archive is written beside OUT and
renamed into place whole; its own sha256 is printed, to be carried to the
site apart from it.
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterable

import attrs

from llmgw.bundle.manifest import MANIFEST, MANIFEST_SIG, BundleFile, Manifest
from llmgw.mirror.layout import SIDECAR, Layout, LayoutError, utc_now
from llmgw.release.checksums import list_artifacts, make_signature, sha256_file
from llmgw.release.store import release_name
from llmgw.release.trust import TrustSet
from llmgw.release.verify import verify_release

__all__ = ["BundleError", "Created", "ENGINE_PROJECTS", "create_bundle", "engine_project"]

#: The Python project each engine is installed from (agent/engine_install.py): what --engines brings.
ENGINE_PROJECTS = {"llamacpp": "llama-cpp-python", "vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm"}
_ALIASES = {"llama.cpp": "llamacpp", "llama-cpp": "llamacpp"}
_DISTRIBUTIONS = (".whl", ".tar.gz", ".zip")


class BundleError(Exception):
    """A bundle that cannot be made as asked: the reason names the flag and what to do."""


@attrs.frozen
class Created:
    path: Path
    sha256: str
    size: int
    manifest: Manifest


def engine_project(name: str) -> tuple[str, str]:
    """(engine, its Python project) for an --engines name; BundleError for one llmgw does not install."""
    engine = _ALIASES.get(name.strip().lower(), name.strip().lower())
    if engine not in ENGINE_PROJECTS:
        raise BundleError(f"--engines {name!r}: not an engine nodes install; choose from llama.cpp, "
                          + ", ".join(e for e in ENGINE_PROJECTS if e != "llamacpp"))
    return engine, ENGINE_PROJECTS[engine]


def _normalized(project: str) -> str:
    from llmgw.mirror.wheel_index import normalized

    return normalized(project)


def _distributions(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(_DISTRIBUTIONS))


def _project_of(path: Path) -> str:
    from llmgw.mirror.wheel_index import project_of

    return _normalized(project_of(path.name) or "")


class _HashingReader(io.RawIOBase):
    """Reads a file for tarfile while hashing what was read."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.hash = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.hash.update(data)
        return data


def download_requirements(requirements: Path, dest: Path) -> None:
    """`pip download -r REQUIREMENTS` into `dest`: every distribution they need, with their dependencies, for
    this machine's Python and platform (the file may name an --index-url, as pip reads it)."""
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                           "--no-input", "-r", str(requirements), "-d", str(dest)], capture_output=True, text=True)
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise BundleError(f"--wheels {requirements}: pip download failed: {tail}")


def create_bundle(out: str | os.PathLike[str], *, release_dir: str | os.PathLike[str], mirror_dir: str | os.PathLike[str],
                  models: Iterable[str], engines: Iterable[str], wheels_dir: str | os.PathLike[str] | None,
                  private_key, trust: TrustSet) -> Created:
    """Check everything, then write the archive at `out`; BundleError or ReleaseRefused and nothing written.

    `wheels_dir` is a folder of distributions, or a requirements file whose distributions are downloaded first."""
    if wheels_dir and Path(wheels_dir).is_file():
        with tempfile.TemporaryDirectory(prefix="llmgw-bundle-wheels-") as tmp:
            download_requirements(Path(wheels_dir), Path(tmp))
            return _create(out, release_dir=release_dir, mirror_dir=mirror_dir, models=models, engines=engines,
                           wheels_dir=tmp, private_key=private_key, trust=trust)
    return _create(out, release_dir=release_dir, mirror_dir=mirror_dir, models=models, engines=engines,
                   wheels_dir=wheels_dir, private_key=private_key, trust=trust)


def _create(out, *, release_dir, mirror_dir, models, engines, wheels_dir, private_key, trust: TrustSet) -> Created:
    from llmgw.release.keys import PublicKey

    out_path = Path(out)
    if out_path.exists():
        raise BundleError(f"{out_path} exists; give a new path for the bundle")
    if not out_path.parent.is_dir():
        raise BundleError(f"{out_path.parent}: no such folder for the bundle")
    release = Path(release_dir)
    trust.add(PublicKey(private_key.public_key(), "--key"))  # the maker vouches for what it signs
    verified = verify_release(release, trust)
    version = release_name(verified, release)
    entries: list[tuple[str, Path]] = [(f"release/{rel}", release / rel) for rel in list_artifacts(release, skip=())]

    layout = Layout(mirror_dir)
    chosen: list[dict[str, str]] = []
    expected: dict[str, str] = {}  # bundle path -> sha256 the mirror recorded
    for target in [m for m in models if m.strip()]:
        try:
            model, version_name = layout.resolve(target.strip())
            sidecar = (layout.read_sidecar(model, version_name) if version_name else layout.newest(model))
        except LayoutError as exc:
            raise BundleError(f"--models {target}: {exc}") from None
        if sidecar is None:
            raise BundleError(f"--models {target}: not in the mirror {layout.root} (`llmgw mirror list` says what is)")
        if not sidecar.complete:
            raise BundleError(f"--models {target}: {sidecar.model}/{sidecar.version} is not complete in the mirror")
        directory = layout.version_dir(sidecar.model, sidecar.version)
        prefix = f"models/{sidecar.model}/{sidecar.version}"
        for f in sidecar.files:
            if not (directory / f.path).is_file():
                raise BundleError(f"--models {target}: {directory / f.path} is missing; `llmgw mirror verify` "
                                  f"{sidecar.model}")
            entries.append((f"{prefix}/{f.path}", directory / f.path))
            if f.sha256:
                expected[f"{prefix}/{f.path}"] = f.sha256
        entries.append((f"{prefix}/{SIDECAR}", directory / SIDECAR))
        chosen.append({"name": sidecar.model, "version": sidecar.version})

    sources = [Path(wheels_dir)] if wheels_dir else []
    if wheels_dir and not Path(wheels_dir).is_dir():
        raise BundleError(f"--wheels {wheels_dir}: neither a folder of wheels and sdists nor a requirements file")
    sources.append(layout.root / "wheels")
    wheels: dict[str, Path] = {}
    if wheels_dir:
        for p in _distributions(Path(wheels_dir)):
            wheels[p.name] = p
    engine_names: list[str] = []
    for name in [e for e in engines if e.strip()]:
        engine, project = engine_project(name)
        found = [p for folder in sources for p in _distributions(folder) if _project_of(p) == _normalized(project)]
        if not found:
            raise BundleError(f"--engines {name}: no {project} distribution in "
                              f"{' or '.join(str(s) for s in sources)}; put its sdist or wheels there "
                              f"(`pip download --no-deps --no-binary :all: {project} -d DIR` for the sdist)")
        for p in found:
            wheels.setdefault(p.name, p)
        engine_names.append(engine)
    entries += [(f"wheels/{name}", path) for name, path in sorted(wheels.items())]

    files: list[BundleFile] = []
    for member, path in entries:
        digest = sha256_file(path)
        if member in expected and expected[member] != digest:
            raise BundleError(f"{path}: its sha256 is not the one the mirror recorded when it was fetched "
                              "(damaged on disk); `llmgw mirror verify` it, then fetch it again")
        files.append(BundleFile(member, digest, path.stat().st_size))
    manifest = Manifest(created_at=utc_now(), release=version, files=files, models=chosen, engines=engine_names)
    document = manifest.to_bytes()
    signature = make_signature(private_key, document)

    tmp = out_path.with_name(f".{out_path.name}.{secrets.token_hex(4)}.partial")
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in ((MANIFEST, document), (MANIFEST_SIG, signature)):
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
            for f, (_, path) in zip(files, entries):
                info = tarfile.TarInfo(f.path)
                info.size, info.mode, info.mtime = f.size, 0o644, 0
                with open(path, "rb") as src:
                    reader = _HashingReader(src)
                    tar.addfile(info, reader)
                if reader.hash.hexdigest() != f.sha256:
                    raise BundleError(f"{path} changed while the bundle was written; make it again")
        os.replace(tmp, out_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Created(out_path, sha256_file(out_path), out_path.stat().st_size, manifest)
