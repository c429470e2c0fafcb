"""SCIM filters (RFC 7644 section 3.4.2.2): parsed once, then tried on rendered resources.

Operators: eq ne co sw ew pr gt ge lt le, joined with and/or, negated with
not (...), grouped with parentheses, and value filters on multi-valued
attributes (``emails[type eq "work"]``). Attribute names are matched without
regard to case, and may carry their schema's URN. Text compares without
regard to case, as every attribute this server publishes is caseExact false
(``id`` included: ids here are lower case).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["FilterError", "parse_filter", "resolve"]

Predicate = Callable[[Mapping[str, Any]], bool]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>"(?:[^"\\]|\\.)*")
      | (?P<lpar>\() | (?P<rpar>\)) | (?P<lbr>\[) | (?P<rbr>\])
      | (?P<word>[A-Za-z0-9_:.$\-]+)
    )""",
    re.VERBOSE,
)
_OPS = {"eq", "ne", "co", "sw", "ew", "gt", "ge", "lt", "le"}


class FilterError(ValueError):
    """A filter that cannot be read; the message says where."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise FilterError(f"cannot read the filter at {text[pos:pos + 20]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def strip_urn(path: str) -> str:
    """``urn:...:User:userName`` is ``userName``."""
    if path.lower().startswith("urn:"):
        return path.rsplit(":", 1)[-1]
    return path


def resolve(resource: Mapping[str, Any], path: str) -> list[Any]:
    """The values at ``path`` (a.b), flattened over multi-valued attributes."""
    values: list[Any] = [resource]
    for part in strip_urn(path).split("."):
        found: list[Any] = []
        for value in values:
            if isinstance(value, Mapping):
                for key, inner in value.items():
                    if key.lower() == part.lower():
                        found.extend(inner if isinstance(inner, list) else [inner])
        values = found
    return [v for v in values if v is not None]


def _compare(op: str, have: Any, want: Any) -> bool:
    if isinstance(have, bool) or isinstance(want, bool):
        if op == "eq":
            return have is want or (isinstance(have, bool) and isinstance(want, bool) and have == want)
        if op == "ne":
            return have != want
        return False
    if isinstance(have, (int, float)) and isinstance(want, (int, float)):
        return {"eq": have == want, "ne": have != want, "gt": have > want, "ge": have >= want,
                "lt": have < want, "le": have <= want}.get(op, False)
    if not isinstance(have, str) or not isinstance(want, str):
        return op == "ne"
    a, b = have.lower(), want.lower()
    return {"eq": a == b, "ne": a != b, "co": b in a, "sw": a.startswith(b), "ew": a.endswith(b),
            "gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b}[op]


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, kind: str | None = None, word: str | None = None, *, label: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise FilterError(f"the filter ends where {label or word or 'more'} was expected")
        if kind is not None and token[0] != kind:
            raise FilterError(f"expected {label or word or kind} in the filter, found {token[1]!r}")
        if word is not None and token[1].lower() != word:
            raise FilterError(f"expected {word!r} in the filter, found {token[1]!r}")
        self.i += 1
        return token

    def is_word(self, word: str) -> bool:
        token = self.peek()
        return token is not None and token[0] == "word" and token[1].lower() == word

    def parse(self) -> Predicate:
        predicate = self.expr()
        if self.peek() is not None:
            raise FilterError(f"unexpected {self.peek()[1]!r} in the filter")  # type: ignore[index]
        return predicate

    def expr(self) -> Predicate:
        left = self.term()
        while self.is_word("or"):
            self.take()
            right = self.term()
            left = (lambda a, b: lambda r: a(r) or b(r))(left, right)
        return left

    def term(self) -> Predicate:
        left = self.factor()
        while self.is_word("and"):
            self.take()
            right = self.factor()
            left = (lambda a, b: lambda r: a(r) and b(r))(left, right)
        return left

    def factor(self) -> Predicate:
        if self.is_word("not"):
            self.take()
            self.take("lpar", label="(")
            inner = self.expr()
            self.take("rpar", label=")")
            return lambda r: not inner(r)
        if self.peek() is not None and self.peek()[0] == "lpar":  # type: ignore[index]
            self.take()
            inner = self.expr()
            self.take("rpar", label=")")
            return inner
        return self.comparison()

    def comparison(self) -> Predicate:
        _, path = self.take("word", label="an attribute name")
        if self.peek() is not None and self.peek()[0] == "lbr":  # type: ignore[index]
            self.take()
            inner = self.expr()
            self.take("rbr", label="]")
            sub = None
            if self.peek() is not None and self.peek()[0] == "word" and self.peek()[1].startswith("."):  # type: ignore[index]
                sub = self.take()[1][1:]
            if sub is not None:
                raise FilterError("a value filter followed by a sub-attribute is not supported here")
            return lambda r: any(isinstance(v, Mapping) and inner(v) for v in resolve(r, path))
        _, op = self.take("word", label="an operator")
        op = op.lower()
        if op == "pr":
            return lambda r: any(v not in ("", [], {}) for v in resolve(r, path))
        if op not in _OPS:
            raise FilterError(f"{op!r} is not a SCIM filter operator (eq ne co sw ew pr gt ge lt le)")
        value = self.value()
        return lambda r: (_compare(op, None, value) if not resolve(r, path) and op == "ne"
                          else any(_compare(op, v, value) for v in resolve(r, path)))

    def value(self) -> Any:
        kind, text = self.take()
        if kind == "str":
            return json.loads(text)
        if kind == "word":
            low = text.lower()
            if low in ("true", "false"):
                return low == "true"
            if low == "null":
                return None
            try:
                return float(text) if "." in text else int(text)
            except ValueError:
                pass
        raise FilterError(f"expected a value (\"text\", a number, true, false or null), found {text!r}")


def parse_filter(text: str) -> Predicate:
    """A predicate over rendered resources; FilterError naming what is wrong."""
    if not text or not text.strip():
        raise FilterError("the filter is empty")
    if len(text) > 2000:
        raise FilterError("the filter is longer than 2000 characters")
    return _Parser(text).parse()
