"""Canaries: a share of a model's sessions sent to its newer revision, `MODEL-canary`.

The split comes from the control plane's catalog (`control.rollouts`, read
with the run-time models by every control plane: llmgw.router.catalog_follow
sets it here), so every gateway splits a model's sessions the same way.

Which side a request goes to is a hash of its session: the key it came with
and the first of `x-llmgw-session`, `x-session-id`, `x-llmgw-thread` and the
body's `user` it carries. The same session lands on the same side every
time, on every gateway; a request with none of them (and no key) is drawn at
random. `x-llmgw-variant: canary` or `stable` picks the side itself.
"""

from __future__ import annotations

import hashlib
import random

__all__ = ["SESSION_HEADERS", "VARIANT_HEADER", "CanarySplit", "session_key"]

VARIANT_HEADER = "x-llmgw-variant"
VARIANTS = ("canary", "stable")
SESSION_HEADERS = ("x-llmgw-session", "x-session-id", "x-llmgw-thread")


def session_key(key_id: str, headers, user: str | None) -> str:
    """What a request's side is drawn from: its key and its session; "" when it has neither."""
    session = next((headers.get(h) for h in SESSION_HEADERS if headers.get(h)), None) or user or ""
    if not key_id and not session:
        return ""
    return f"{key_id}\x1f{session}"


def bucket(model: str, key: str) -> float:
    """Where a session falls in [0, 100) for `model`: the same key, the same place."""
    digest = hashlib.blake2b(f"{model}\x1e{key}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * 100.0


class CanarySplit:
    """model -> (its canary's name, the percent of its sessions the canary takes)."""

    def __init__(self) -> None:
        self.split: dict[str, tuple[str, float]] = {}
        self._rng = random.Random()

    def set(self, split: dict[str, tuple[str, float]]) -> None:
        self.split = dict(split)

    def canary_of(self, model: str) -> str | None:
        entry = self.split.get(model)
        return entry[0] if entry else None

    def side(self, model: str, key: str, variant: str | None) -> str | None:
        """The canary's name when this request goes to it, else None (the model itself)."""
        entry = self.split.get(model)
        if entry is None:
            return None
        name, weight = entry
        asked = (variant or "").strip().lower()
        if asked in VARIANTS:
            return name if asked == "canary" else None
        if weight <= 0:
            return None
        at = bucket(model, key) if key else self._rng.random() * 100.0
        return name if at < weight else None
