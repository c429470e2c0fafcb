"""docs/reference.md, written from the configuration classes themselves.

Every section and key of server.yaml and agent.yaml, with its type, default
and doc, in the order the classes declare them. The output depends on
nothing but the classes, so a test can compare it with the committed file.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

import attrs

from llmgw.config.agent import AgentConfig
from llmgw.config.fields import doc_of, yaml_key
from llmgw.config.secrets import Secret
from llmgw.config.server import ServerConfig
from llmgw.config.units import ByteSize, Duration

__all__ = ["reference_markdown", "type_name"]

_INTRO = """\
# Configuration reference

Every key of `server.yaml` (a control plane) and `agent.yaml` (a node), with
its type, its default and what it does. A key left out of a file has its
default; a key the file misspells is an error, found by `llmgw config check`.
How to write durations, sizes and secrets: [configuration.md](configuration.md).

This page is generated from the code by `llmgw config reference`; edit the
classes in `llmgw/config/`, not this page.
"""

_SCALARS = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "true/false",
    Duration: "duration",
    ByteSize: "size",
    Secret: "secret",
    Any: "any",
}


def type_name(t: Any) -> str:
    """How a key's type is called in the reference: `duration`, `list of strings`."""
    if t in _SCALARS:
        return _SCALARS[t]
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return " or ".join(type_name(a) for a in rest) if rest else "nothing"
    if origin is list:
        inner = type_name(args[0]) if args else "any"
        return f"list of {_plural(inner)}"
    if origin is dict:
        key, value = (type_name(a) for a in args) if args else ("any", "any")
        if value.startswith("mapping of"):
            value = "mapping"
        return f"mapping of {_plural(key)} to {_plural(value)}"
    if attrs.has(t):
        return "section"
    return getattr(t, "__name__", str(t))


def _plural(name: str) -> str:
    if name.startswith(("list of", "mapping of", "one of")):
        return name
    return {"any": "anything", "true/false": "true/false values", "mapping": "mappings"}.get(name, name + "s")


def _optional(t: Any) -> Any:
    """`X` for `X | None`, else `t` itself."""
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(t) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return t


def _item_type(t: Any) -> Any:
    """The section class a key holds, directly or as a list's items, else None."""
    t = _optional(t)
    if attrs.has(t):
        return t
    if typing.get_origin(t) is list:
        (inner,) = typing.get_args(t) or (None,)
        if inner is not None and attrs.has(inner):
            return inner
    return None


def _flow(value: Any) -> str:
    """A default as a reader would write it in YAML, on one line."""
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Secret):
        return value.reveal()  # a default in the code is not a secret
    if isinstance(value, (Duration, ByteSize)):
        return str(value)
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if attrs.has(type(value)):
        parts = [
            f"{yaml_key(f)}: {_flow(getattr(value, f.name))}"
            for f in attrs.fields(type(value))
            if getattr(value, f.name) is not None
        ]
        return "{" + ", ".join(parts) + "}"
    return str(value)


def _default(field: attrs.Attribute, instance: Any) -> str:
    if instance is not None:
        value = getattr(instance, field.name)
    elif field.default is attrs.NOTHING:
        return "required"
    elif isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
        value = field.default.factory()
    else:
        value = field.default
    if attrs.has(type(value)):
        return "—"
    return f"`{_flow(value)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _section(title: str, path: str, cl: type, instance: Any, doc: str) -> list[str]:
    """One heading and table for a class, then one for each class inside it."""
    lines = [f"### {title}", ""]
    # The class says what the section is; the row above it in its parent's
    # table says what it is for there (agent_tls and tls share a class).
    text = (cl.__doc__ or "").strip() or doc
    if text:
        lines += [text, ""]
    lines += ["| key | type | default | what it does |", "|---|---|---|---|"]
    nested: list[tuple[str, str, type, Any, str]] = []
    # A module written with `from __future__ import annotations` leaves its types as text until something
    # resolves them (cattrs does, at the first parse): resolved here, so the page never depends on that.
    attrs.resolve_types(cl)
    for field in attrs.fields(cl):
        key = f"{path}.{yaml_key(field)}" if path else yaml_key(field)
        lines.append(
            f"| `{key}` | {type_name(field.type)} | {_cell(_default(field, instance))} | {_cell(doc_of(field))} |"
        )
        inner = _item_type(field.type)
        if inner is None:
            continue
        if attrs.has(_optional(field.type)):
            value = getattr(instance, field.name) if instance is not None else None
            if value is None and isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
                value = field.default.factory()
            nested.append((f"`{key}`", key, inner, value, doc_of(field)))
        else:
            nested.append((f"`{key}[]`: each item", f"{key}[]", inner, None, doc_of(field)))
    lines.append("")
    for title, inner_path, inner, value, inner_doc in nested:
        lines += _section(title, inner_path, inner, value, inner_doc)
    return lines


def reference_markdown() -> str:
    """The whole of docs/reference.md."""
    lines = [_INTRO]
    for filename, cl in (("server.yaml", ServerConfig), ("agent.yaml", AgentConfig)):
        lines += [f"## {filename}", ""]
        lines += _section("Top level", "", cl, cl(), "")
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(reference_markdown(), end="")
