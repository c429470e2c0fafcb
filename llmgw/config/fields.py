"""How a configuration key is declared: its default, its YAML name and its doc.

Every key of server.yaml and agent.yaml is an attrs field made by `setting()`
or `section()`, so the reference (docs/reference.md) and the loader read the
same declaration and cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs

__all__ = ["setting", "section", "yaml_key", "doc_of"]


def setting(
    default: Any = attrs.NOTHING,
    *,
    doc: str,
    factory: Callable[[], Any] | None = None,
    key: str | None = None,
) -> Any:
    """A key with a default (or none: then the key is required) and a one-sentence doc.

    `key` is the name in YAML when it cannot be the attribute's (`class`).
    Mutable defaults go through `factory`, never `default`.
    """
    metadata: dict[str, Any] = {"doc": doc}
    if key is not None:
        metadata["key"] = key
    if factory is not None:
        return attrs.field(factory=factory, metadata=metadata)
    return attrs.field(default=default, metadata=metadata)


def section(factory: Callable[[], Any], *, doc: str) -> Any:
    """A nested section, present with its own defaults when the file leaves it out."""
    return attrs.field(factory=factory, metadata={"doc": doc})


def yaml_key(field: attrs.Attribute) -> str:
    """The name an operator writes for this field."""
    return field.metadata.get("key", field.name)


def doc_of(field: attrs.Attribute) -> str:
    return field.metadata.get("doc", "")
