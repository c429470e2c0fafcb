"""Ed25519 release keys: a pair made by `llmgw release keygen`, read back by signing and verifying.

The private key is a PEM (PKCS#8) file only its owner may read (0600); the
public key is a PEM file anyone may have. A public key can also be written
as the base64 of its 32 raw bytes, which is how server.yaml may carry one
inline. Its key id is the first 16 hex digits of the sha256 of those 32
bytes: short enough to say, and what `releases.revoked_keys` lists.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path

import attrs
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = ["KeyError_", "PublicKey", "generate", "key_id", "load_private_key", "parse_public_key",
           "PRIVATE_NAME", "PUBLIC_NAME"]

PRIVATE_NAME = "llmgw-release.key"
PUBLIC_NAME = "llmgw-release.pub"


class KeyError_(Exception):
    """A key file or value that cannot be used, said with where it came from."""


def _raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public: Ed25519PublicKey) -> str:
    """The key's short name: 16 hex digits of the sha256 of its raw bytes."""
    return hashlib.sha256(_raw(public)).hexdigest()[:16]


@attrs.frozen
class PublicKey:
    """A public release key and where it came from (a path, `server.yaml`, `built in`)."""

    key: Ed25519PublicKey = attrs.field(eq=False, repr=False)
    origin: str = ""

    @property
    def id(self) -> str:
        return key_id(self.key)

    @property
    def base64(self) -> str:
        return base64.b64encode(_raw(self.key)).decode()


def generate(out_dir: str | os.PathLike[str]) -> tuple[Path, Path, str]:
    """A new pair in `out_dir` (made if missing): (private path, public path, key id). Refuses to overwrite."""
    out = Path(out_dir)
    private_path, public_path = out / PRIVATE_NAME, out / PUBLIC_NAME
    for path in (private_path, public_path):
        if path.exists():
            raise KeyError_(f"{path} exists; keygen never writes over a key (move it away, or choose another --out)")
    if out.exists() and not out.is_dir():
        raise KeyError_(f"--out {out}: not a folder")
    out.mkdir(parents=True, exist_ok=True)
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    os.chmod(private_path, 0o600)
    public = private.public_key()
    public_pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    fd = os.open(public_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(public_pem)
    return private_path, public_path, key_id(public)


def load_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """The private key in `path`; refused when others may read it or it is not an Ed25519 PEM key."""
    p = Path(path)
    try:
        mode = p.stat().st_mode & 0o777
        data = p.read_bytes()
    except OSError as exc:
        raise KeyError_(f"--key {p}: cannot read it ({exc.strerror or exc})") from None
    if mode & 0o077:
        raise KeyError_(f"--key {p}: mode {mode:04o} lets others read the private key; chmod 600 it first")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyError_(f"--key {p}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyError_(f"--key {p}: not an Ed25519 key (llmgw release keygen makes one)")
    return key


def parse_public_key(value: str, origin: str) -> PublicKey:
    """A public key from a PEM file's path, or the base64 of its 32 raw bytes; `origin` says where it was named."""
    text = value.strip()
    if not text:
        raise KeyError_(f"{origin}: empty; give a public key file's path or a key's base64")
    path = Path(text)
    if not path.is_file():
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == 32:
            return PublicKey(Ed25519PublicKey.from_public_bytes(raw), origin)
        raise KeyError_(f"{origin} {text!r}: neither a public key file that exists nor the base64 of a "
                        "32-byte Ed25519 key")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyError_(f"{origin} {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise KeyError_(f"{origin} {path}: not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyError_(f"{origin} {path}: not an Ed25519 public key")
    return PublicKey(key, f"{origin} {path}")
