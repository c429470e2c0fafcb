"""SCIM PATCH (RFC 7644 section 3.5.2) applied to a resource as JSON.

The resource is rendered, the operations change that rendering, and the
result is applied as a PUT would be: one way in for every change. Paths:
``attr``, ``attr.sub``, ``attr[filter]`` and ``attr[filter].sub``; an
operation without a path carries an object of attributes. Operation names
are read without regard to case (Entra ID writes ``Replace``), and the text
``"True"``/``"False"`` is read as a boolean where one is wanted.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from llmgw.scim.filters import FilterError, parse_filter, strip_urn

__all__ = ["PatchError", "apply_patch"]

_PATH = re.compile(r"^(?P<attr>[A-Za-z0-9_$:.\-]+?)(?:\[(?P<filter>.+)\])?(?:\.(?P<sub>[A-Za-z0-9_$]+))?$")


class PatchError(ValueError):
    """A PATCH that cannot be applied; ``scim_type`` is the SCIM error type."""

    def __init__(self, message: str, scim_type: str = "invalidValue") -> None:
        super().__init__(message)
        self.scim_type = scim_type


def _key(resource: Mapping[str, Any], name: str) -> str:
    """The key ``name`` has in ``resource`` (any case), or ``name`` itself."""
    for key in resource:
        if key.lower() == name.lower():
            return key
    return name


def _split(path: str) -> tuple[str, str | None, str | None]:
    path = path.strip()
    if ":" in path.split("[", 1)[0]:
        head, _, tail = path.split("[", 1)[0].rpartition(":")
        path = path[len(head) + 1:]
    m = _PATH.match(path)
    if m is None:
        raise PatchError(f"cannot read the path {path!r}", "invalidPath")
    attr, filt, sub = m.group("attr"), m.group("filter"), m.group("sub")
    if filt is None and "." in attr:
        attr, sub = attr.split(".", 1)
    return strip_urn(attr), filt, sub


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Mapping) and isinstance(b, Mapping) and "value" in a and "value" in b:
        return str(a["value"]).lower() == str(b["value"]).lower()
    return a == b


def apply_patch(resource: dict[str, Any], operations: Any, multi_valued: set[str]) -> dict[str, Any]:
    """``resource`` with ``operations`` applied (a new dict); PatchError naming the operation at fault."""
    if not isinstance(operations, list) or not operations:
        raise PatchError("Operations: expected a list of operations", "invalidSyntax")
    out = copy.deepcopy(resource)
    multi = {m.lower() for m in multi_valued}
    for index, operation in enumerate(operations):
        where = f"Operations[{index}]"
        if not isinstance(operation, Mapping):
            raise PatchError(f"{where}: expected an object", "invalidSyntax")
        op = str(operation.get("op", "")).lower()
        if op not in ("add", "replace", "remove"):
            raise PatchError(f"{where}.op: expected add, replace or remove, got {operation.get('op')!r}",
                             "invalidSyntax")
        path = operation.get("path")
        value = operation.get("value")
        try:
            if path in (None, ""):
                if op == "remove":
                    raise PatchError(f"{where}: remove needs a path", "noTarget")
                if not isinstance(value, Mapping):
                    raise PatchError(f"{where}.value: without a path, expected an object of attributes")
                for name, inner in value.items():
                    _apply(out, op, strip_urn(name), None, None, inner, multi)
            else:
                attr, filt, sub = _split(str(path))
                _apply(out, op, attr, filt, sub, value, multi)
        except FilterError as exc:
            raise PatchError(f"{where}.path: {exc}", "invalidPath") from None
        except PatchError as exc:
            if str(exc).startswith("Operations["):
                raise
            raise PatchError(f"{where}: {exc}", exc.scim_type) from None
    return out


def _apply(out: dict[str, Any], op: str, attr: str, filt: str | None, sub: str | None, value: Any,
           multi: set[str]) -> None:
    key = _key(out, attr)
    is_multi = attr.lower() in multi
    if filt is not None:
        if not is_multi:
            raise PatchError(f"{attr} is not multi-valued, so it takes no filter", "invalidFilter")
        matches = parse_filter(filt)
        items = out.get(key) or []
        hit = [i for i, item in enumerate(items) if isinstance(item, Mapping) and matches(item)]
        if op == "remove":
            if sub is None:
                out[key] = [item for i, item in enumerate(items) if i not in hit]
            else:
                for i in hit:
                    items[i].pop(_key(items[i], sub), None)
            return
        if not hit:
            raise PatchError(f"nothing in {attr} matches [{filt}]", "noTarget")
        for i in hit:
            if sub is None:
                if not isinstance(value, Mapping):
                    raise PatchError(f"{attr}[{filt}]: expected an object")
                items[i] = {**items[i], **value} if op == "add" else dict(value)
            else:
                items[i][_key(items[i], sub)] = value
        return
    if sub is not None:
        if is_multi:
            raise PatchError(f"{attr}.{sub}: name the item with a filter, like {attr}[value eq \"...\"].{sub}",
                             "invalidPath")
        inner = out.get(key)
        if op == "remove":
            if isinstance(inner, dict):
                inner.pop(_key(inner, sub), None)
            return
        if not isinstance(inner, dict):
            inner = out[key] = {}
        inner[_key(inner, sub)] = value
        return
    if op == "remove":
        if is_multi and value is not None:
            # Entra ID and others: remove members listed in value.
            gone = value if isinstance(value, list) else [value]
            out[key] = [item for item in out.get(key) or [] if not any(_same(item, g) for g in gone)]
        else:
            out.pop(key, None)
        return
    if is_multi:
        items = value if isinstance(value, list) else [value]
        if op == "add":
            have = list(out.get(key) or [])
            have += [item for item in items if not any(_same(item, h) for h in have)]
            out[key] = have
        else:
            out[key] = items
        return
    out[key] = value
