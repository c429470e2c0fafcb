"""How a field of an admin API type is declared: its default and its description.

The description is kept in the field's metadata under `doc` (and a JSON name
that cannot be the attribute's, like `class`, under `key`), the same keys
server.yaml's classes use, so the OpenAPI generator reads both kinds alike
and every field in the document says what it means.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["UNSET", "Unset", "field"]


class Unset:
    """The value of a request field the caller left out (as opposed to null, which removes)."""

    _instance: Unset | None = None

    def __new__(cls) -> Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


#: Default of a request field whose absence means "leave it as it is".
UNSET: Any = Unset()


def field(
    doc: str,
    default: Any = attrs.NOTHING,
    *,
    factory: Callable[[], Any] | None = None,
    key: str | None = None,
    schema: dict[str, Any] | None = None,
) -> Any:
    """An attrs field with a one-sentence description; no default makes it required.

    `schema`: JSON Schema keywords that narrow the field (enum, minimum, maximum, pattern); the OpenAPI
    document carries them and the server refuses a request that breaks them (llmgw.admin.body_schema)."""
    metadata: dict[str, Any] = {"doc": doc}
    if key is not None:
        metadata["key"] = key
    if schema:
        metadata["schema"] = dict(schema)
    if factory is not None:
        return attrs.field(factory=factory, metadata=metadata)
    return attrs.field(default=default, metadata=metadata)
