"""Redaction: findings rewritten as numbered placeholders such as `[EMAIL_1]`.

One `Numbering` lives as long as one request: the same value gets the same
placeholder in every message of the request, different values get different
numbers. It holds the original values (that is how it recognises them again),
so it stays in request memory and is never logged or stored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from llmgw.guard.normalize import normalize
from llmgw.plugins.types import Finding

__all__ = ["Numbering", "redact"]

# Separators people put in numbers: the same card or IBAN written with and
# without spaces is the same value.
_SEPARATORS = re.compile(r"[\s().\-/]+")
_NUMBERISH_KINDS = frozenset({"phone", "card", "iban", "tckn"})
_PLACEHOLDER = re.compile(r"\[([A-Z0-9_]+?)_([0-9]{1,6})\]")


class Numbering:
    """Placeholders handed out within one request."""

    def __init__(self) -> None:
        self._by_value: dict[tuple[str, str], str] = {}
        self._counts: dict[str, int] = {}

    def placeholder(self, kind: str, value: str) -> str:
        """The placeholder for `value` found as `kind`: the same value, the same placeholder."""
        label = _label(kind)
        key = (label, _canonical(kind, value))
        found = self._by_value.get(key)
        if found is None:
            n = self._counts.get(label, 0) + 1
            self._counts[label] = n
            found = self._by_value[key] = f"[{label}_{n}]"
        return found

    def __len__(self) -> int:
        return len(self._by_value)

    def reserve(self, text: str) -> None:
        """Placeholders already in `text` (a conversation redacted before, kept in a thread) are not
        handed out again: a new value gets the next number, not one an earlier value has."""
        for label, number in _PLACEHOLDER.findall(text):
            self._counts[label] = max(self._counts.get(label, 0), int(number))


def _label(kind: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", kind).strip("_").upper() or "REDACTED"


def _canonical(kind: str, value: str) -> str:
    text = normalize(value).text
    if kind in _NUMBERISH_KINDS:
        return _SEPARATORS.sub("", text).upper()
    return text.casefold() if kind == "email" else text


def redact(text: str, findings: Iterable[Finding], numbering: Numbering | None = None) -> str:
    """`text` with every finding replaced by its placeholder.

    Findings that overlap are replaced together, under the kind of the
    widest of them (an email inside a JWT becomes the JWT's placeholder).
    Pass the request's `numbering` to keep placeholders consistent across
    its messages; without one, numbering starts afresh.
    """
    if numbering is None:
        numbering = Numbering()
    spans = sorted(
        ((max(f.start, 0), min(f.end, len(text)), f.kind) for f in findings),
        key=lambda s: (s[0], -s[1]),
    )
    groups: list[list] = []  # [start, end, kind, width of the kind's finding]
    for start, end, kind in spans:
        if end <= start:
            continue
        if groups and start < groups[-1][1]:
            group = groups[-1]
            if end - start > group[3]:
                group[2], group[3] = kind, end - start
            group[1] = max(group[1], end)
        else:
            groups.append([start, end, kind, end - start])
    out: list[str] = []
    pos = 0
    for start, end, kind, _ in groups:
        out.append(text[pos:start])
        out.append(numbering.placeholder(kind, text[start:end]))
        pos = end
    out.append(text[pos:])
    return "".join(out)
