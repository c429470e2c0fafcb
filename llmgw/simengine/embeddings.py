"""Deterministic embeddings: unit vectors that behave a little like real ones.

A vector is mostly a hashed bag of the text's tokens (texts sharing words
point the same way, texts sharing none are near orthogonal) plus a small
part drawn from the whole text, so a reordering still moves it a little.
"""

from __future__ import annotations

import hashlib
import math
import struct
from functools import lru_cache

_FEATURES_PER_TOKEN = 4
_WHOLE_TEXT_WEIGHT = 0.3


@lru_cache(maxsize=65536)
def _token_features(token: str, dim: int) -> tuple[tuple[int, float], ...]:
    h = hashlib.blake2b(token.encode(), digest_size=4 * _FEATURES_PER_TOKEN).digest()
    out = []
    for i in range(_FEATURES_PER_TOKEN):
        word = int.from_bytes(h[4 * i : 4 * i + 4], "little")
        out.append((word % dim, 1.0 if word & 0x80000000 else -1.0))
    return tuple(out)


def _unit(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vec))
    if norm == 0.0:
        return vec
    return [x / norm for x in vec]


def embed(text: str, tokens: list[str], dim: int, dimensions: int | None = None) -> list[float]:
    """A unit vector of `dimensions` (default `dim`) numbers for the text."""
    size = dimensions or dim
    bag = [0.0] * dim
    for token in tokens:
        for index, sign in _token_features(token, dim):
            bag[index] += sign
    whole = struct.unpack(f"<{dim}b", hashlib.shake_256(text.encode()).digest(dim))
    bag = _unit(bag[:size])
    whole = _unit([float(x) for x in whole[:size]])
    vec = _unit([b + _WHOLE_TEXT_WEIGHT * w for b, w in zip(bag, whole)])
    if not any(vec):  # nothing to go on at all
        vec = [1.0] + [0.0] * (size - 1)
    return vec
