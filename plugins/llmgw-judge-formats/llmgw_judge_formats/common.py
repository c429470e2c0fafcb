"""What the formats share: the conversation as the judge is shown it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def turns(messages: Sequence[Mapping[str, Any]], role: str) -> list[dict[str, str]]:
    """The user and assistant turns to judge: up to the last user turn for input ("user"),
    up to the last answer for output ("assistant"). Other roles are left out."""
    kept = [{"role": m["role"], "content": str(m.get("content") or "")}
            for m in messages if m.get("role") in ("user", "assistant")]
    last = max((i for i, m in enumerate(kept) if m["role"] == role), default=-1)
    if last < 0:
        raise ValueError(f"there is no {role} turn to judge")
    return kept[:last + 1]


def last_of(conversation: Sequence[Mapping[str, str]], role: str) -> str:
    for m in reversed(conversation):
        if m["role"] == role:
            return m["content"]
    return ""
