"""How API keys are hashed for the store: an HMAC with a secret of the cluster's.

The store never holds a key's secret, only a hash of it. With a plain
SHA-256 anyone holding a copy of the store's key table can test guesses
offline; with an HMAC keyed by a secret kept outside the store (a file
beside the admin token, mode 0600) the table alone is worth nothing.

Keys made before there was a secret, or by a tool that cannot read it
(``llmgw keys create --store …`` without ``--config``), are stored as plain
SHA-256; the gateway that resolves one finds it by that hash and moves it to
the keyed hash on the spot (:meth:`KeyResolver.resolve`).

Every control plane on one store must use the same secret: the store keeps
the secret's fingerprint (the reserved setting ``auth.key_hash_id``) and a
server whose secret does not match refuses to start, saying which file to
copy from where.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path
from typing import Any

import attrs

__all__ = ["FINGERPRINT_SETTING", "KeyHashError", "KeyHasher", "ensure_key_hasher", "key_hasher_of",
           "secret_path"]

#: The reserved setting holding the fingerprint of the secret keys are hashed with.
FINGERPRINT_SETTING = "auth.key_hash_id"
_FILE_NAME = "key-hash-secret"
_SECRET_BYTES = 32


class KeyHashError(Exception):
    """The key-hash secret cannot be made, read, or is not the one the store's keys use."""


@attrs.frozen
class KeyHasher:
    """Hashes key secrets; ``secret`` None is the plain SHA-256 of old stores and store-only tools."""

    secret: bytes | None = attrs.field(default=None, repr=False)

    @property
    def keyed(self) -> bool:
        return self.secret is not None

    def hash(self, key_secret: str) -> str:
        """The hash a key made now is stored under (64 lower-case hex digits)."""
        data = key_secret.encode("utf-8")
        if self.secret is None:
            return hashlib.sha256(data).hexdigest()
        return hmac.new(self.secret, data, hashlib.sha256).hexdigest()

    def fingerprint(self) -> str:
        """Names the secret without giving it away (kept in the store, shown in errors)."""
        if self.secret is None:
            return ""
        return hmac.new(self.secret, b"llmgw key hash fingerprint", hashlib.sha256).hexdigest()[:16]


def secret_path(config: Any) -> Path:
    """Where the secret is kept: ``auth.key_hash_secret_file``, else beside the admin token."""
    chosen = getattr(config.auth, "key_hash_secret_file", "") or ""
    if chosen:
        return Path(chosen)
    return Path(config.admin_token_file).parent / _FILE_NAME


def _read(path: Path) -> bytes | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyHashError(f"cannot read the key-hash secret {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        raise KeyHashError(f"{path} does not hold a key-hash secret (64 hex digits)") from None
    if len(secret) < 16:
        raise KeyHashError(f"{path} holds too short a key-hash secret: it needs at least 32 hex digits")
    return secret


def key_hasher_of(config: Any | None) -> KeyHasher:
    """The hasher of a server.yaml's secret when its file can be read, else plain SHA-256.

    For tools that make keys (the admin API, the portal, ``llmgw keys``): a
    key they make unkeyed still works and is moved to the keyed hash at first use.
    """
    if config is None:
        return KeyHasher()
    try:
        return KeyHasher(_read(secret_path(config)))
    except KeyHashError:
        return KeyHasher()


async def ensure_key_hasher(config: Any, store: Any) -> KeyHasher:
    """The server's hasher: its secret read, or made (0600) when neither the file
    nor the store knows one yet; refused when it is not the store's."""
    path = secret_path(config)
    secret = _read(path)
    stored = await store.get_setting(FINGERPRINT_SETTING)
    want = str(stored.value) if stored is not None and stored.value else ""
    if secret is None:
        if want:
            raise KeyHashError(
                f"the store's API keys are hashed with a secret this machine lacks (fingerprint {want}): "
                f"copy {_FILE_NAME} from a control plane that uses this store to {path} (mode 0600)")
        secret = _make(path)
    hasher = KeyHasher(secret)
    if want and want != hasher.fingerprint():
        raise KeyHashError(
            f"{path} is not the secret this store's API keys are hashed with (its fingerprint is "
            f"{hasher.fingerprint()}, the store's {want}): copy {_FILE_NAME} from a control plane that uses "
            "this store")
    if not want:
        await store.set_setting(FINGERPRINT_SETTING, hasher.fingerprint(), actor="llmgw server")
    return hasher


def _make(path: Path) -> bytes:
    secret = os.urandom(_SECRET_BYTES)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        found = _read(path)  # another server on this machine made it first
        if found is None:
            raise KeyHashError(f"{path} vanished while it was being made") from None
        return found
    except OSError as exc:
        raise KeyHashError(f"cannot write the key-hash secret to {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(secret.hex() + "\n")
    return secret
