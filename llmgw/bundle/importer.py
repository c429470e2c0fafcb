"""`llmgw bundle import`: every file of a bundle checked against its signed manifest before any is written.

First pass, writing nothing: the manifest's signature (a trusted, unrevoked
key), every member a plain file the manifest lists with that size and
sha256, every listed file present, the release inside signed by a trusted
key and matching its SHA256SUMS, each model file matching its sidecar, and
nothing that would replace a different file already in the mirror. Any
problem: `BundleRefused` naming each one, and the mirror is as it was.

Second pass: the members are extracted into a hidden folder inside the
mirror, hashed again as they are written (the archive could have changed
since), and only then moved into place: `MODEL/VERSION/`, `wheels/`,
`_llmgw/releases/VERSION/`. Last, the mirror is marked offline
(`_llmgw/offline.json`) unless told not to.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tarfile
from pathlib import Path

import attrs

from llmgw.bundle.manifest import MANIFEST, MANIFEST_SIG, Manifest, ManifestError
from llmgw.mirror.layout import SIDECAR, LayoutError, check_model_name, is_version_name, sidecar_from_dict
from llmgw.release.checksums import SIG, SUMS, SignatureError, parse_sums, sha256_file
from llmgw.release.store import RELEASE_NAME, RELEASES
from llmgw.release.trust import TrustSet
from llmgw.release.verify import ReleaseRefused, verify_release, verify_signed_document

__all__ = ["BundleRefused", "Imported", "check_bundle", "import_bundle"]

_CHUNK = 1 << 20


class BundleRefused(Exception):
    """A bundle that must not be imported; `problems` are sentences naming each file and reason."""

    def __init__(self, where: str, problems: list[str]) -> None:
        super().__init__(f"{where}: refused: " + "; ".join(problems))
        self.where = where
        self.problems = problems


@attrs.frozen
class Imported:
    manifest: Manifest
    key_id: str
    written: list[str]  # what was put in the mirror (models' versions, wheels, the release)
    kept: list[str]  # what the mirror already held, the same
    offline: str  # the marker written, or ""


def _hash_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    h = hashlib.sha256()
    f = tar.extractfile(member)
    assert f is not None
    for block in iter(lambda: f.read(_CHUNK), b""):
        h.update(block)
    return h.hexdigest()


def _read_small(tar: tarfile.TarFile, name: str, limit: int = 64 << 20) -> bytes | None:
    try:
        member = tar.getmember(name)
    except KeyError:
        return None
    if not member.isfile() or member.size > limit:
        return None
    f = tar.extractfile(member)
    return f.read() if f is not None else None


def check_bundle(bundle: str | os.PathLike[str], trust: TrustSet, mirror_dir: str | os.PathLike[str] | None = None,
                 *, expected_sha256: str = "") -> tuple[Manifest, str, list[str]]:
    """(the manifest, the signing key's id, what the mirror already holds) after every check; writes nothing."""
    path = Path(bundle)
    where = str(path)
    if expected_sha256:
        actual = sha256_file(path)
        if actual != expected_sha256.strip().lower():
            raise BundleRefused(where, [f"its sha256 is {actual}, not the {expected_sha256} given (--sha256): "
                                        "not the bundle that was made, or damaged on the way"])
    try:
        tar = tarfile.open(path, "r:*")
    except (OSError, tarfile.TarError) as exc:
        raise BundleRefused(where, [f"not a bundle archive ({exc})"]) from None
    with tar:
        document = _read_small(tar, MANIFEST)
        if document is None:
            raise BundleRefused(where, [f"no {MANIFEST}: not a bundle made by `llmgw bundle create`"])
        kid, problems = verify_signed_document(document, _read_small(tar, MANIFEST_SIG), trust, name=MANIFEST,
                                               sig_name=MANIFEST_SIG)
        try:
            manifest = Manifest.from_bytes(document)
        except ManifestError as exc:
            raise BundleRefused(where, [*problems, str(exc)]) from None
        if problems:  # a manifest not vouched for says nothing about the files
            raise BundleRefused(where, problems)
        listed = manifest.by_path()
        seen: set[str] = set()
        for member in tar:
            name = member.name
            if name in (MANIFEST, MANIFEST_SIG):
                continue
            entry = listed.get(name)
            if entry is None:
                problems.append(f"{name}: in the archive but not in the signed manifest")
                continue
            if name in seen:
                problems.append(f"{name}: in the archive twice")
                continue
            seen.add(name)
            if not member.isfile():
                problems.append(f"{name}: not a plain file (a link or a device) in the archive")
                continue
            if member.size != entry.size:
                problems.append(f"{name}: {member.size} bytes, not the {entry.size} the manifest lists")
                continue
            digest = _hash_member(tar, member)
            if digest != entry.sha256:
                problems.append(f"{name}: its sha256 is {digest}, not the {entry.sha256} the signed manifest "
                                "lists (changed or damaged)")
        problems += [f"{p}: listed in the manifest but not in the archive" for p in sorted(set(listed) - seen)]
        if problems:
            raise BundleRefused(where, problems)
        problems += _check_release(tar, manifest, trust)
        problems += _check_models(tar, manifest)
    kept: list[str] = []
    if mirror_dir is not None:
        conflicts, kept = _conflicts(Path(mirror_dir), manifest)
        problems += conflicts
    if problems:
        raise BundleRefused(where, problems)
    return manifest, kid or "", kept


def _check_release(tar: tarfile.TarFile, manifest: Manifest, trust: TrustSet) -> list[str]:
    files = {f.path[len("release/"):]: f for f in manifest.files if f.path.startswith("release/")}
    if not manifest.release or not files:
        return ["the bundle holds no release (release/)"]
    if not RELEASE_NAME.fullmatch(manifest.release):
        return [f"{MANIFEST}: release {manifest.release!r} is not a release name"]
    sums = _read_small(tar, f"release/{SUMS}")
    if sums is None:
        return [f"release/{SUMS} is missing: the release in the bundle is not signed"]
    _, problems = verify_signed_document(sums, _read_small(tar, f"release/{SIG}"), trust, name=f"release/{SUMS}",
                                         sig_name=f"release/{SIG}")
    try:
        listed = parse_sums(sums, f"release/{SUMS}")
    except SignatureError as exc:
        return [*problems, str(exc)]
    for rel, digest in sorted(listed.items()):
        entry = files.get(rel)
        if entry is None:
            problems.append(f"release/{rel}: listed in the release's {SUMS} but not in the bundle")
        elif entry.sha256 != digest:
            problems.append(f"release/{rel}: not the file the release's {SUMS} lists")
    for rel in sorted(set(files) - set(listed) - {SUMS, SIG}):
        problems.append(f"release/{rel}: not part of the signed release")
    return problems


def _check_models(tar: tarfile.TarFile, manifest: Manifest) -> list[str]:
    problems: list[str] = []
    by_path = manifest.by_path()
    for m in manifest.models:
        try:
            check_model_name(m["name"])
            if not is_version_name(m["version"]):
                raise LayoutError(f"version {m['version']!r} is not a mirror version")
        except LayoutError as exc:
            problems.append(f"models/{m['name']}: {exc}")
            continue
        prefix = f"models/{m['name']}/{m['version']}"
        data = _read_small(tar, f"{prefix}/{SIDECAR}")
        if data is None:
            problems.append(f"{prefix}/{SIDECAR} is missing")
            continue
        try:
            sidecar = sidecar_from_dict(json.loads(data))
        except Exception as exc:  # noqa: BLE001 - any unreadable sidecar is one sentence
            problems.append(f"{prefix}/{SIDECAR}: not a sidecar ({exc})")
            continue
        for f in sidecar.files:
            entry = by_path.get(f"{prefix}/{f.path}")
            if entry is None:
                problems.append(f"{prefix}/{f.path}: its sidecar lists it, the bundle lacks it")
            elif f.sha256 and f.sha256 != entry.sha256:
                problems.append(f"{prefix}/{f.path}: not the file its sidecar recorded when it was fetched")
    return problems


def _units(manifest: Manifest) -> list[tuple[str, str, Path]]:
    """(what, bundle prefix, its place in the mirror relative to the mirror's root) for each unit moved whole."""
    units = [(f"release {manifest.release}", "release", RELEASES / manifest.release)]
    units += [(f"{m['name']}/{m['version']}", f"models/{m['name']}/{m['version']}", Path(m["name"]) / m["version"])
              for m in manifest.models]
    return units


def _conflicts(mirror: Path, manifest: Manifest) -> tuple[list[str], list[str]]:
    problems: list[str] = []
    kept: list[str] = []
    by_path = manifest.by_path()
    for what, prefix, rel in _units(manifest):
        target = mirror / rel
        if not target.exists():
            continue
        mine = {p[len(prefix) + 1:]: f.sha256 for p, f in by_path.items() if p.startswith(prefix + "/")}
        marker = SUMS if what.startswith("release ") else SIDECAR  # each names every file's sha256
        same = (target / marker).is_file() and sha256_file(target / marker) == mine.get(marker)
        if same:
            kept.append(what)
        else:
            problems.append(f"{target}: the mirror already holds a different {what}; remove it first "
                            "(`llmgw mirror remove`) or import into another mirror")
    for f in manifest.files:
        if f.path.startswith("wheels/"):
            target = mirror / f.path
            if target.exists():
                if target.is_file() and sha256_file(target) == f.sha256:
                    kept.append(f.path)
                else:
                    problems.append(f"{target}: the mirror already holds a different file of that name")
    return problems, kept


def import_bundle(bundle: str | os.PathLike[str], mirror_dir: str | os.PathLike[str], trust: TrustSet, *,
                  offline: bool = True, expected_sha256: str = "") -> Imported:
    """Check the whole bundle, then put it in the mirror; BundleRefused (and the mirror untouched) otherwise."""
    mirror = Path(mirror_dir)
    manifest, kid, kept = check_bundle(bundle, trust, mirror, expected_sha256=expected_sha256)
    mirror.mkdir(parents=True, exist_ok=True)
    staging = mirror / f".bundle-{secrets.token_hex(6)}"
    staging.mkdir()
    written: list[str] = []
    try:
        with tarfile.open(bundle, "r:*") as tar:
            by_path = manifest.by_path()
            for member in tar:
                entry = by_path.get(member.name)
                if entry is None:
                    continue
                dest = staging / entry.path
                dest.parent.mkdir(parents=True, exist_ok=True)
                h = hashlib.sha256()
                src = tar.extractfile(member)
                assert src is not None
                with open(dest, "wb") as out:
                    for block in iter(lambda: src.read(_CHUNK), b""):
                        h.update(block)
                        out.write(block)
                    out.flush()
                    os.fsync(out.fileno())
                if h.hexdigest() != entry.sha256:
                    raise BundleRefused(str(bundle), [f"{entry.path} changed while it was imported; try again"])
        verify_release(staging / "release", trust)  # once more, as it now lies on disk
        for what, prefix, rel in _units(manifest):
            if what in kept:
                continue
            target = mirror / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging / prefix, target)
            written.append(what)
        for f in manifest.files:
            if f.path.startswith("wheels/") and f.path not in kept:
                target = mirror / f.path
                target.parent.mkdir(parents=True, exist_ok=True)
                os.rename(staging / f.path, target)
                written.append(f.path)
    except ReleaseRefused as exc:
        raise BundleRefused(str(bundle), exc.problems) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    marker = ""
    if offline:
        from llmgw.mirror.offline import set_offline

        marker = str(set_offline(mirror, True, by=f"llmgw bundle import {Path(bundle).name}"))
    return Imported(manifest, kid, written, kept, marker)
