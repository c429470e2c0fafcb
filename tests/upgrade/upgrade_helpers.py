"""Releases for the upgrade tests: small stand-in zipapps (the fast tests) signed with a key made here."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from llmgw.release.checksums import sign_release
from llmgw.release.keys import generate, load_private_key, parse_public_key
from llmgw.release.store import add_release
from llmgw.release.trust import TrustSet


def tiny_zipapp(path: Path, version: str) -> Path:
    """A zip with the __main__.py BUILD line an llmgw zipapp has (enough for what the replacing checks)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("__main__.py", "BUILD = " + json.dumps({"version": version, "id": "test"}) + "\nprint('hi')\n")
    return path


def make_key(folder: Path) -> tuple[object, TrustSet, str]:
    """(the private key, a trust set holding only its public key, the public key file's path)."""
    private_path, public_path, _ = generate(folder)
    trust = TrustSet()
    trust.add(parse_public_key(str(public_path), "test"))
    return load_private_key(private_path), trust, str(public_path)


def release_folder(folder: Path, version: str, private, *, zipapps: dict[str, Path] | None = None) -> Path:
    """A release folder for `version` holding the given zipapps by architecture (default: tiny ones), signed."""
    folder.mkdir(parents=True, exist_ok=True)
    for arch, src in (zipapps or {}).items():
        (folder / f"llmgw-{version}-linux-{arch}.pyz").write_bytes(src.read_bytes())
    if not zipapps:
        for arch in ("x86_64", "aarch64"):
            tiny_zipapp(folder / f"llmgw-{version}-linux-{arch}.pyz", version)
    sign_release(folder, private)
    return folder


def stored_release(mirror: Path, folder: Path, trust: TrustSet) -> Path:
    return add_release(mirror, folder, trust).path
