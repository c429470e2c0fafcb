"""The release keys a cluster trusts: built into this file, named in server.yaml, or given with --trust.

A key revoked (its id in server.yaml's `releases.revoked_keys`, or
`--revoke`) is distrusted wherever else it is named, the built-in keys
included: revoking is how an operator stops a leaked key at once, before
a new build without it reaches every machine.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path
from typing import Iterable

import attrs

from llmgw.release.keys import KeyError_, PublicKey, parse_public_key

__all__ = ["TrustSet", "builtin_keys", "trust_from", "KEY_ID"]

KEY_ID = re.compile(r"[0-9a-f]{16}")
BUILTIN_FOLDER = "trusted_keys"


@attrs.define
class TrustSet:
    """Trusted keys by id, and the ids revoked (with where each was revoked)."""

    keys: dict[str, PublicKey] = attrs.Factory(dict)
    revoked: dict[str, str] = attrs.Factory(dict)

    def add(self, key: PublicKey) -> None:
        self.keys.setdefault(key.id, key)

    def revoke(self, kid: str, origin: str) -> None:
        kid = kid.strip().lower()
        if not KEY_ID.fullmatch(kid):
            raise KeyError_(f"{origin} {kid!r}: a key id is 16 hex digits, as `llmgw release keygen` printed it")
        self.revoked.setdefault(kid, origin)

    def usable(self) -> list[PublicKey]:
        return [k for kid, k in sorted(self.keys.items()) if kid not in self.revoked]

    def describe(self) -> list[dict[str, str]]:
        rows = [{"key_id": kid, "from": k.origin, "state": "revoked" if kid in self.revoked else "trusted"}
                for kid, k in sorted(self.keys.items())]
        rows += [{"key_id": kid, "from": origin, "state": "revoked"}
                 for kid, origin in sorted(self.revoked.items()) if kid not in self.keys]
        return rows


def builtin_keys() -> list[PublicKey]:
    """The *.pub files in llmgw/release/trusted_keys/ of this build."""
    found: list[PublicKey] = []
    try:
        folder = resources.files("llmgw.release").joinpath(BUILTIN_FOLDER)
        entries = sorted(folder.iterdir(), key=lambda e: e.name) if folder.is_dir() else []
    except (FileNotFoundError, NotADirectoryError):
        entries = []
    for entry in entries:
        if entry.name.endswith(".pub"):
            with resources.as_file(entry) as path:
                found.append(parse_public_key(str(path), "built in"))
    return found


def trust_from(*, trusted: Iterable[str] = (), revoked: Iterable[str] = (), config_path: str | os.PathLike[str] | None = None,
               config_trusted: Iterable[str] = (), config_revoked: Iterable[str] = (),
               builtin: bool = True) -> TrustSet:
    """The set from the built-in keys, server.yaml's `releases` (paths relative to its folder) and flags."""
    trust = TrustSet()
    if builtin:
        for key in builtin_keys():
            trust.add(key)
    base = Path(config_path).parent if config_path else None
    where = f"{config_path}: releases" if config_path else "releases"
    for i, value in enumerate(config_trusted):
        text = value.strip()
        if base is not None and not Path(text).is_absolute() and (base / text).is_file():
            text = str(base / text)
        trust.add(parse_public_key(text, f"{where}.trusted_keys[{i}]"))
    for i, kid in enumerate(config_revoked):
        trust.revoke(kid, f"{where}.revoked_keys[{i}]")
    for value in trusted:
        trust.add(parse_public_key(value, "--trust"))
    for kid in revoked:
        trust.revoke(kid, "--revoke")
    return trust


def trust_for_config(config_path: str | os.PathLike[str] | None, *, trusted: Iterable[str] = (),
                     revoked: Iterable[str] = ()) -> TrustSet:
    """The set for a command given `--config server.yaml` (or none) and flags."""
    if not config_path:
        return trust_from(trusted=trusted, revoked=revoked)
    from llmgw.config import load_server_config

    config = load_server_config(config_path)
    return trust_from(trusted=trusted, revoked=revoked, config_path=config_path,
                      config_trusted=config.releases.trusted_keys, config_revoked=config.releases.revoked_keys)
