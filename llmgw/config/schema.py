"""server.yaml's keys as data: each key's path, kind, doc and default, and values found by path.

The configuration reference (reference.py) prints the classes; the admin
API's `/server-config` and the console's settings tree read them through
here, so a menu says what the reference says. A path is written as in the
loader's messages: `router.timeouts.dial`, `models[1].scaling.min`,
`guard.policies["pii.strict"]`. Keys inside a list of sections are listed
once, with `[]` for the entry: `models[].scaling.min`.
"""

from __future__ import annotations

import difflib
import functools
import re
import types
import typing
from typing import Any, Literal

import attrs

from llmgw.config.errors import format_path
from llmgw.config.fields import doc_of, yaml_key
from llmgw.config.secrets import HIDDEN, Secret
from llmgw.config.units import ByteSize, Duration

__all__ = [
    "HIDDEN",
    "MISSING",
    "KeySpec",
    "PathError",
    "child_type",
    "format_path",
    "hide_secrets",
    "keys_of",
    "kind_of",
    "optional",
    "parse_path",
    "plain_at",
    "replace_at",
    "template_of",
    "type_at",
    "value_at",
]

Path = tuple[str | int, ...]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: What `value_at` and `plain_at` answer for a path that holds nothing.
MISSING: Any = _Missing()

_SCALAR_KINDS: dict[Any, str] = {
    bool: "boolean",
    int: "integer",
    float: "number",
    Duration: "duration",
    ByteSize: "size",
    Secret: "secret",
    str: "text",
}


class PathError(ValueError):
    """A path that names no key, or goes through one that holds no keys; the message says which and why."""


@attrs.frozen
class KeySpec:
    """One key of the file, as the reference describes it."""

    path: str  #: `router.retries.attempts`; `models[].name` inside a list's entries
    #: boolean, integer, number, duration, size, secret, text, choice, list, map or any; for a key holding
    #: others: section, blocks (a list of sections) or block-map (named blocks)
    kind: str
    type_name: str  #: as the reference writes it: `duration`, `list of strings`
    doc: str
    default: Any  #: as JSON; None for a section, a required key, or one whose default is none
    required: bool = False
    nullable: bool = False  #: null (or leaving it out) is allowed and means none
    choices: tuple[str, ...] = ()
    item_kind: str | None = None  #: a list's or a map's items

    @property
    def template(self) -> bool:
        """Inside a list's entries: a key of every entry, not of the file itself."""
        return "[]" in self.path

    @property
    def secret(self) -> bool:
        return self.kind == "secret"


# ---------------------------------------------------------------- types


def optional(t: Any) -> tuple[Any, bool]:
    """(X, True) for `X | None`, else (t, False)."""
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(t) if a is not type(None)]
        if len(rest) == 1:
            return rest[0], True
    return t, False


def kind_of(t: Any) -> str:
    """The kind of value a type holds, as a form would ask for it."""
    t, _ = optional(t)
    if t in _SCALAR_KINDS:
        return _SCALAR_KINDS[t]
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is Literal:
        return "choice"
    if attrs.has(t):
        return "section"
    if origin is list:
        return "blocks" if args and attrs.has(args[0]) else "list"
    if origin is dict:
        value = args[1] if len(args) == 2 else Any
        return "block-map" if typing.get_origin(value) is dict or attrs.has(value) else "map"
    return "any"


def child_type(t: Any, part: str | int, where: Path = ()) -> Any:
    """The type found at `part` inside a value of type `t`; PathError when there is no such key."""
    t, _ = optional(t)
    origin = typing.get_origin(t)
    if t is Any:
        return Any
    if attrs.has(t):
        if isinstance(part, str):
            for f in attrs.fields(t):
                if yaml_key(f) == part:
                    return f.type
        known = [yaml_key(f) for f in attrs.fields(t)]
        close = difflib.get_close_matches(str(part), known, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else f"the keys here are {', '.join(known)}"
        raise PathError(f"{format_path((*where, part))}: unknown key ({hint})")
    if origin is list:
        if not isinstance(part, int):
            raise PathError(f"{format_path(where)}: a list; give an entry's index, like {format_path((*where, 0))}")
        args = typing.get_args(t)
        return args[0] if args else Any
    if origin is dict:
        if not isinstance(part, str):
            raise PathError(f"{format_path(where)}: a mapping; give an entry's name, not an index")
        args = typing.get_args(t)
        return args[1] if len(args) == 2 else Any
    raise PathError(f"{format_path(where)}: a {kind_of(t)} holds no keys; set it as a whole")


def type_at(cl: type, path: Path) -> Any:
    """The type of the key at `path` in class `cl`; PathError naming the first part that is not a key."""
    t: Any = cl
    for i, part in enumerate(path):
        t = child_type(t, part, path[:i])
    return t


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_BRACKET = re.compile(r"""\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]""")


def parse_path(text: str) -> Path:
    """`models[1].scaling.min` as ("models", 1, "scaling", "min"); PathError for text that is not a path."""
    text = text.strip()
    parts: list[str | int] = []
    pos = 0
    while pos < len(text):
        if text[pos] == "[" and parts:
            m = _BRACKET.match(text, pos)
            if m is None:
                break
            parts.append(int(m.group(1)) if m.group(1) is not None else re.sub(r"\\(.)", r"\1", m.group(2)))
        else:
            start = pos
            if parts:
                if text[pos] != ".":
                    break
                start += 1
            m = _NAME.match(text, start)
            if m is None:
                break
            parts.append(m.group(0))
        pos = m.end()
    if pos < len(text) or not parts:
        raise PathError(f"{text[:200]!r} is not a key's path; write it like router.timeouts.dial, "
                        "models[0].scaling.min or guard.policies[\"a.b\"]")
    return tuple(parts)


def template_of(path: Path) -> str:
    """The path with each list index as `[]`: the KeySpec that describes it."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += "[]"
        else:
            out += f".{part}" if out else part
    return out


# ---------------------------------------------------------------- the keys


def _json_default(value: Any) -> Any:
    from llmgw.config.load import make_converter

    if isinstance(value, Secret):
        return value.reveal()  # a default in the code is not a secret (the reference prints it too)
    return make_converter().unstructure(value)


def _default_of(field: attrs.Attribute) -> tuple[Any, bool]:
    if field.default is attrs.NOTHING:
        return None, True
    default: Any = field.default
    value = default.factory() if isinstance(default, attrs.Factory) else default  # type: ignore[arg-type]
    if attrs.has(type(value)):
        return None, False
    return _json_default(value), False


def _spec(path: str, field: attrs.Attribute) -> KeySpec:
    from llmgw.config.reference import type_name

    inner, nullable = optional(field.type)
    kind = kind_of(inner)
    default, required = _default_of(field)
    choices: tuple[str, ...] = ()
    if kind == "choice":
        choices = tuple(str(a) for a in typing.get_args(inner))
    item_kind = None
    if kind in ("list", "map"):
        args = typing.get_args(inner)
        item_kind = kind_of(args[-1]) if args else "any"
    return KeySpec(path=path, kind=kind, type_name=type_name(field.type), doc=doc_of(field), default=default,
                   required=required, nullable=nullable, choices=choices, item_kind=item_kind)


def _walk(cl: type, prefix: str) -> list[KeySpec]:
    out = []
    for field in attrs.fields(cl):
        path = f"{prefix}.{yaml_key(field)}" if prefix else yaml_key(field)
        spec = _spec(path, field)
        out.append(spec)
        inner, _ = optional(field.type)
        if spec.kind == "section":
            out += _walk(inner, path)
        elif spec.kind == "blocks":
            out += _walk(typing.get_args(inner)[0], path + "[]")
    return out


@functools.cache
def keys_of(cl: type) -> tuple[KeySpec, ...]:
    """Every key of `cl`'s file, sections before their keys, in the order the classes declare them."""
    return tuple(_walk(cl, ""))


# ---------------------------------------------------------------- values


def value_at(config: Any, path: Path) -> Any:
    """What a loaded configuration holds at `path`, or MISSING."""
    node = config
    for part in path:
        if node is None:
            return MISSING
        if attrs.has(type(node)) and isinstance(part, str):
            attr = next((f.name for f in attrs.fields(type(node)) if yaml_key(f) == part), None)
            if attr is None:
                return MISSING
            node = getattr(node, attr)
        elif isinstance(node, list) and isinstance(part, int):
            if part >= len(node):
                return MISSING
            node = node[part]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return MISSING
    return node


def plain_at(document: Any, path: Path) -> Any:
    """What a file (read as plain maps and lists, or round-trip) sets at `path`, or MISSING."""
    node = document
    for part in path:
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                return MISSING
        elif not hasattr(node, "keys") or part not in node:
            return MISSING
        node = node[part]
    return node


def replace_at(config: Any, path: Path, value: Any) -> Any:
    """`config` with the key at `path` (through sections only) replaced by `value`."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    attr = next(f.name for f in attrs.fields(type(config)) if yaml_key(f) == head)
    return attrs.evolve(config, **{attr: replace_at(getattr(config, attr), rest, value)})


def hide_secrets(value: Any, t: Any) -> Any:
    """Plain data of type `t` with every secret that is set shown as *** (never its value, nor where it is read)."""
    if value is None:
        return None
    inner, _ = optional(t)
    if inner is Secret:
        return HIDDEN
    if attrs.has(inner) and isinstance(value, dict):
        out = dict(value)
        for f in attrs.fields(inner):
            key = yaml_key(f)
            if key in out:
                out[key] = hide_secrets(out[key], f.type)
        return out
    origin, args = typing.get_origin(inner), typing.get_args(inner)
    if origin is list and args and isinstance(value, list):
        return [hide_secrets(v, args[0]) for v in value]
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return {k: hide_secrets(v, args[1]) for k, v in value.items()}
    return value
