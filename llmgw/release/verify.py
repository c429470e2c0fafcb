"""Verifying a release folder: signed by a trusted, unrevoked key, every file listed and matching, nothing extra.

    from llmgw.release.verify import verify_release, ReleaseRefused
    files = verify_release("/tmp/llmgw-1.4.0", trust)   # [VerifiedFile(path, sha256, size), ...]

Every problem is found and said, not only the first: a release refused for
a bad signature and a changed file says both.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from llmgw.release.checksums import (SIG, SUMS, SignatureError, check_signature, list_artifacts, parse_sums,
                                     read_signature, sha256_file)
from llmgw.release.trust import TrustSet

__all__ = ["ReleaseRefused", "VerifiedFile", "verify_release", "verify_signed_document"]


class ReleaseRefused(Exception):
    """A release (or a signed document) that must not be used; `problems` are sentences, one per reason."""

    def __init__(self, where: str, problems: list[str]) -> None:
        super().__init__(f"{where}: refused: " + "; ".join(problems))
        self.where = where
        self.problems = problems


@attrs.frozen
class VerifiedFile:
    path: str  # relative to the release folder, `/`-separated
    sha256: str
    size: int


def verify_signed_document(document: bytes, signature: bytes | None, trust: TrustSet, *, name: str,
                           sig_name: str) -> tuple[str | None, list[str]]:
    """(the signing key's id when the signature is good, the problems) for `document` and its signature file."""
    if signature is None:
        return None, [f"unsigned: {sig_name} is missing (sign it with `llmgw release sign --key KEY`)"]
    try:
        kid, sig = read_signature(signature, sig_name)
    except SignatureError as exc:
        return None, [str(exc)]
    if kid in trust.revoked:
        return None, [f"signed by key {kid}, which is revoked ({trust.revoked[kid]})"]
    key = trust.keys.get(kid)
    if key is None:
        known = ", ".join(k.id for k in trust.usable()) or "none"
        return None, [f"signed by key {kid}, which is not trusted here (trusted: {known}; add its public key to "
                      "releases.trusted_keys in server.yaml, or give --trust)"]
    if not check_signature(key.key, sig, document):
        return None, [f"the signature in {sig_name} does not match {name}: {name} was changed after it was "
                      f"signed, or the signature is not key {kid}'s"]
    return kid, []


def verify_release(directory: str | os.PathLike[str], trust: TrustSet) -> list[VerifiedFile]:
    """The release's files, each checked; `ReleaseRefused` naming every problem otherwise."""
    root = Path(directory)
    where = str(root)
    if not root.is_dir():
        raise ReleaseRefused(where, ["not a folder"])
    try:
        document = (root / SUMS).read_bytes()
    except FileNotFoundError:
        raise ReleaseRefused(where, [f"no {SUMS}: not a release signed by `llmgw release sign`"]) from None
    try:
        signature: bytes | None = (root / SIG).read_bytes()
    except FileNotFoundError:
        signature = None
    _, problems = verify_signed_document(document, signature, trust, name=SUMS, sig_name=SIG)
    try:
        listed = parse_sums(document, SUMS)
        present = list_artifacts(root)
    except SignatureError as exc:
        raise ReleaseRefused(where, [*problems, str(exc)]) from None
    verified: list[VerifiedFile] = []
    for rel, digest in sorted(listed.items()):
        path = root / rel
        if not path.is_file() or path.is_symlink():
            problems.append(f"{rel}: listed in {SUMS} but missing")
            continue
        actual = sha256_file(path)
        if actual != digest:
            problems.append(f"{rel}: its sha256 is {actual}, not the {digest} {SUMS} lists (changed or damaged)")
            continue
        verified.append(VerifiedFile(rel, digest, path.stat().st_size))
    for rel in present:
        if rel not in listed:
            problems.append(f"{rel}: present but not listed in {SUMS} (not part of the signed release)")
    if not listed:
        problems.append(f"{SUMS} lists no files")
    if problems:
        raise ReleaseRefused(where, problems)
    return verified
