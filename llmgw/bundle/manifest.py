"""An offline bundle's manifest: every file in it with its sha256 and size, signed by a release key.

A bundle is one tar archive:

    manifest.json            what is in it (below), then
    manifest.json.sig        its Ed25519 signature (llmgw.release.checksums)
    release/...              a signed release folder, as `llmgw release sign` left it
    models/MODEL/VERSION/... model versions from a mirror, each with its .source.json
    wheels/...               Python distributions: the engines' sources and wheels

manifest.json:

    {"format": 1, "created_at": "...", "release": "1.4.0",
     "models": [{"name": "tiny", "version": "2025-06-01"}], "engines": ["llamacpp"],
     "files": [{"path": "release/SHA256SUMS", "sha256": "...", "size": 123}, ...]}
"""

from __future__ import annotations

import json
from typing import Any

import attrs

__all__ = ["MANIFEST", "MANIFEST_SIG", "FORMAT", "BundleFile", "Manifest", "ManifestError", "safe_member_path"]

MANIFEST = "manifest.json"
MANIFEST_SIG = "manifest.json.sig"
FORMAT = 1
TOP = ("release", "models", "wheels")


class ManifestError(Exception):
    """A manifest that cannot be read, or a path that cannot be in a bundle."""


def safe_member_path(path: str) -> str:
    """A path inside a bundle: relative, under one of its folders, no `..`, no empty parts."""
    parts = path.split("/")
    if (not path or path.startswith("/") or "\\" in path or "\x00" in path
            or any(p in ("", ".", "..") for p in parts) or parts[0] not in TOP or len(parts) < 2):
        raise ManifestError(f"{path!r}: not a path a bundle may hold (release/, models/ or wheels/, no '..')")
    return path


@attrs.frozen
class BundleFile:
    path: str
    sha256: str
    size: int


@attrs.define
class Manifest:
    created_at: str
    release: str
    files: list[BundleFile]
    models: list[dict[str, str]] = attrs.Factory(list)
    engines: list[str] = attrs.Factory(list)
    format: int = FORMAT

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {
            "format": self.format, "created_at": self.created_at, "release": self.release,
            "models": self.models, "engines": self.engines,
            "files": [{"path": f.path, "sha256": f.sha256, "size": f.size} for f in self.files],
        }
        return (json.dumps(body, indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        try:
            body = json.loads(data)
            if body.get("format") != FORMAT:
                raise ManifestError(f"{MANIFEST}: format {body.get('format')!r}; this llmgw reads format {FORMAT}")
            files = [BundleFile(safe_member_path(str(f["path"])), str(f["sha256"]), int(f["size"]))
                     for f in body["files"]]
            manifest = cls(created_at=str(body.get("created_at", "")), release=str(body.get("release", "")),
                           files=files, models=[{"name": str(m["name"]), "version": str(m["version"])}
                                                for m in body.get("models", [])],
                           engines=[str(e) for e in body.get("engines", [])])
        except ManifestError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ManifestError(f"{MANIFEST}: not a manifest llmgw bundle create wrote ({exc})") from None
        paths = [f.path for f in files]
        if len(set(paths)) != len(paths):
            raise ManifestError(f"{MANIFEST}: lists a file twice")
        return manifest

    def by_path(self) -> dict[str, BundleFile]:
        return {f.path: f for f in self.files}
