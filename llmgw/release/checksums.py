"""SHA256SUMS and its detached signature: the signed list of a release's files.

SHA256SUMS is in `sha256sum`'s own format (`<64 hex>  <path>`, one a line,
sorted by path), so `sha256sum -c SHA256SUMS` checks a release without
llmgw. SHA256SUMS.sig is a small JSON object: the signing key's id and the
Ed25519 signature over SHA256SUMS's exact bytes. The same pair of helpers
signs any document (a bundle's manifest), always over its exact bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from llmgw.release.keys import key_id

__all__ = ["SUMS", "SIG", "SignatureError", "sha256_file", "list_artifacts", "render_sums", "parse_sums",
           "make_signature", "read_signature", "check_signature", "sign_release"]

SUMS = "SHA256SUMS"
SIG = "SHA256SUMS.sig"
SIGNATURE_FORMAT = 1
_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)")


class SignatureError(Exception):
    """A checksums file or signature that cannot be read, or a release folder that cannot be signed."""


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def list_artifacts(directory: Path, *, skip: tuple[str, ...] = (SUMS, SIG)) -> list[str]:
    """Every file under `directory` (relative, `/`-separated, sorted) but `skip`; a link or odd entry is refused."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(directory):
        base = Path(dirpath)
        for name in sorted(dirnames):
            if (base / name).is_symlink():
                raise SignatureError(f"{base / name}: a symbolic link; a release holds plain files only")
        for name in filenames:
            path = base / name
            rel = path.relative_to(directory).as_posix()
            if rel in skip:
                continue
            if path.is_symlink() or not path.is_file():
                raise SignatureError(f"{path}: not a plain file (a link or a device); a release holds plain files only")
            if "\n" in rel or "\\" in rel:
                raise SignatureError(f"{path}: a name with a newline or backslash cannot be listed")
            found.append(rel)
    return sorted(found)


def render_sums(entries: dict[str, str]) -> bytes:
    return "".join(f"{digest}  {path}\n" for path, digest in sorted(entries.items())).encode()


def parse_sums(data: bytes, where: str) -> dict[str, str]:
    """path → sha256 from a SHA256SUMS file; a line it cannot read is refused, naming its number."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SignatureError(f"{where}: not UTF-8 text") from None
    entries: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _LINE.fullmatch(line)
        if not match:
            raise SignatureError(f"{where} line {n}: expected '<sha256>  <file>'")
        digest, path = match.groups()
        parts = path.split("/")
        if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise SignatureError(f"{where} line {n}: {path!r} leaves the release folder")
        if path in entries:
            raise SignatureError(f"{where} line {n}: {path} is listed twice")
        entries[path] = digest
    return entries


def make_signature(private: Ed25519PrivateKey, document: bytes) -> bytes:
    """The detached signature file's bytes for `document`."""
    body = {"format": SIGNATURE_FORMAT, "algorithm": "ed25519", "key_id": key_id(private.public_key()),
            "signature": base64.b64encode(private.sign(document)).decode()}
    return (json.dumps(body, indent=2, sort_keys=True) + "\n").encode()


def read_signature(data: bytes, where: str) -> tuple[str, bytes]:
    """(key id, signature bytes) from a signature file."""
    try:
        body = json.loads(data)
        if body.get("algorithm") != "ed25519":
            raise SignatureError(f"{where}: algorithm {body.get('algorithm')!r}; only ed25519 is accepted")
        kid, sig = str(body["key_id"]), base64.b64decode(body["signature"], validate=True)
    except SignatureError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
        raise SignatureError(f"{where}: not a signature llmgw release sign wrote") from None
    if len(sig) != 64:
        raise SignatureError(f"{where}: the signature is {len(sig)} bytes, not 64")
    return kid, sig


def check_signature(public, signature: bytes, document: bytes) -> bool:
    try:
        public.verify(signature, document)
        return True
    except InvalidSignature:
        return False


def sign_release(directory: str | os.PathLike[str], private: Ed25519PrivateKey) -> tuple[list[str], str]:
    """Write SHA256SUMS (every artifact) and SHA256SUMS.sig in `directory`; (the files listed, the key id)."""
    root = Path(directory)
    if not root.is_dir():
        raise SignatureError(f"{root}: not a folder; give the folder holding the release's files")
    files = list_artifacts(root)
    if not files:
        raise SignatureError(f"{root}: holds no files to sign")
    document = render_sums({rel: sha256_file(root / rel) for rel in files})
    signature = make_signature(private, document)
    for name, data in ((SUMS, document), (SIG, signature)):
        tmp = root / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, root / name)
    return files, key_id(private.public_key())
