"""Releases kept in a mirror, under `MIRROR/_llmgw/releases/<version>/`, for nodes and upgrades to fetch.

A release is verified before anything is written (`verify_release`), copied
into a hidden staging folder beside the others while each file is hashed
again, verified once more there, and only then renamed into place: a
refused release leaves the mirror exactly as it was, and a half-copied one
is never visible.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path

import attrs

from llmgw.release.checksums import SIG, SUMS, sha256_file
from llmgw.release.trust import TrustSet
from llmgw.release.verify import ReleaseRefused, VerifiedFile, verify_release

__all__ = ["RELEASES", "StoredRelease", "add_release", "list_releases", "release_name"]

RELEASES = Path("_llmgw") / "releases"
_ZIPAPP = re.compile(r"llmgw-(?P<version>[0-9A-Za-z][0-9A-Za-z.+_-]*?)-linux-(?:x86_64|aarch64|amd64|arm64)\.pyz")
RELEASE_NAME = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")


@attrs.frozen
class StoredRelease:
    name: str
    path: Path
    files: list[VerifiedFile]
    already: bool = False  # the same release was there before


def release_name(files: list[VerifiedFile], directory: Path, given: str | None = None) -> str:
    """The version the zipapps' names carry (llmgw-1.4.0-linux-x86_64.pyz), else `given`, else the folder's name."""
    name = given
    if not name:
        versions = {m.group("version") for f in files if (m := _ZIPAPP.fullmatch(f.path.rsplit("/", 1)[-1]))}
        if len(versions) > 1:
            raise ReleaseRefused(str(directory), [f"its zipapps name different versions ({', '.join(sorted(versions))}); "
                                                  "give --name"])
        name = versions.pop() if versions else directory.absolute().name
    if not RELEASE_NAME.fullmatch(name):
        raise ReleaseRefused(str(directory), [f"release name {name!r}: use letters, digits, '.', '_', '+' and '-' "
                                              "(give --name)"])
    return name


def add_release(mirror_dir: str | os.PathLike[str], source: str | os.PathLike[str], trust: TrustSet, *,
                name: str | None = None) -> StoredRelease:
    """Verify `source` and copy it into the mirror; `ReleaseRefused` (and nothing written) when it may not be."""
    src = Path(source)
    files = verify_release(src, trust)
    version = release_name(files, src, name)
    releases = Path(mirror_dir) / RELEASES
    target = releases / version
    if target.exists():
        if (target / SUMS).is_file() and (target / SUMS).read_bytes() == (src / SUMS).read_bytes():
            verify_release(target, trust)
            return StoredRelease(version, target, files, already=True)
        raise ReleaseRefused(str(src), [f"the mirror already holds a different release {version} at {target}; "
                                        "remove it first or give another --name"])
    releases.mkdir(parents=True, exist_ok=True)
    staging = releases / f".staging-{secrets.token_hex(6)}"
    staging.mkdir()
    try:
        for f in files:
            dest = staging / f.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / f.path, dest)
            if sha256_file(dest) != f.sha256:
                raise ReleaseRefused(str(src), [f"{f.path} changed while it was copied; try again"])
        for extra in (SUMS, SIG):
            shutil.copyfile(src / extra, staging / extra)
        verify_release(staging, trust)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return StoredRelease(version, target, files)


def list_releases(mirror_dir: str | os.PathLike[str]) -> list[str]:
    releases = Path(mirror_dir) / RELEASES
    if not releases.is_dir():
        return []
    return sorted(e.name for e in releases.iterdir() if e.is_dir() and not e.name.startswith("."))
