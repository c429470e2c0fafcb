"""A small JSON Schema checker for tool arguments and structured answers.

It reads the part of JSON Schema that tool `parameters` and
`response_format.json_schema` use in practice: `type` (one or a list),
`properties`, `required`, `additionalProperties`, `items`, `prefixItems`,
`enum`, `const`, `minimum`/`maximum` (and their exclusive forms),
`minLength`/`maxLength`, `pattern`, `minItems`/`maxItems`, `anyOf`,
`oneOf`, `allOf`, `not` and local `$ref`s (`#/$defs/...`,
`#/definitions/...`). Keywords it does not know are ignored, so a schema
that uses them is checked less strictly, never refused.

`problem(value, schema)` returns the first thing wrong, as a path and a
reason that never quote the value, or None when the value fits.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["problem"]

_MAX_DEPTH = 64
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool)
    or isinstance(v, float) and v.is_integer(),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def problem(value: Any, schema: Any) -> str | None:
    """The first way `value` breaks `schema` ("at $.a[2]: expected a string"), or None."""
    return _check(value, schema, "$", schema, 0)


def _resolve(ref: str, root: Any) -> Any:
    if not ref.startswith("#"):
        return {}  # a remote reference: not followed
    node = root
    for part in ref[1:].split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return {}
        node = node[part]
    return node


def _check(value: Any, schema: Any, at: str, root: Any, depth: int) -> str | None:
    if schema is True or schema is None or schema == {}:
        return None
    if schema is False:
        return f"at {at}: nothing is allowed here"
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return None
    if isinstance(schema.get("$ref"), str):
        found = _check(value, _resolve(schema["$ref"], root), at, root, depth + 1)
        if found:
            return found
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_TYPES.get(k, lambda v: True)(value) for k in kinds):
            return f"at {at}: expected {' or '.join(map(str, kinds))}"
    if "enum" in schema and isinstance(schema["enum"], list) and value not in schema["enum"]:
        return f"at {at}: not one of the allowed values"
    if "const" in schema and value != schema["const"]:
        return f"at {at}: not the required value"
    for keyword in ("allOf", "anyOf", "oneOf"):
        subs = schema.get(keyword)
        if not isinstance(subs, list) or not subs:
            continue
        fits = sum(1 for s in subs if _check(value, s, at, root, depth + 1) is None)
        if keyword == "allOf" and fits < len(subs):
            return next(p for s in subs if (p := _check(value, s, at, root, depth + 1)))
        if keyword == "anyOf" and fits == 0:
            return f"at {at}: fits none of anyOf"
        if keyword == "oneOf" and fits != 1:
            return f"at {at}: fits {fits} of oneOf, not exactly one"
    if "not" in schema and _check(value, schema["not"], at, root, depth + 1) is None:
        return f"at {at}: fits what `not` excludes"
    if isinstance(value, dict):
        return _object(value, schema, at, root, depth)
    if isinstance(value, list):
        return _array(value, schema, at, root, depth)
    if isinstance(value, str):
        return _string(value, schema, at)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _number(value, schema, at)
    return None


def _object(value: dict, schema: dict, at: str, root: Any, depth: int) -> str | None:
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    for name in schema.get("required") or ():
        if name not in value:
            return f"at {at}: missing the required property {name!r}"
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in props:
            found = _check(item, props[name], f"{at}.{name}", root, depth + 1)
        elif extra is False:
            return f"at {at}: the property {name!r} is not allowed"
        else:
            found = _check(item, extra, f"{at}.{name}", root, depth + 1) if isinstance(extra, dict) else None
        if found:
            return found
    return None


def _array(value: list, schema: dict, at: str, root: Any, depth: int) -> str | None:
    low, high = schema.get("minItems"), schema.get("maxItems")
    if isinstance(low, int) and len(value) < low:
        return f"at {at}: fewer than {low} items"
    if isinstance(high, int) and len(value) > high:
        return f"at {at}: more than {high} items"
    prefix = schema.get("prefixItems") if isinstance(schema.get("prefixItems"), list) else []
    items = schema.get("items")
    for i, item in enumerate(value):
        sub = prefix[i] if i < len(prefix) else items
        if sub is not None:
            found = _check(item, sub, f"{at}[{i}]", root, depth + 1)
            if found:
                return found
    return None


def _string(value: str, schema: dict, at: str) -> str | None:
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and len(value) < low:
        return f"at {at}: shorter than {low} characters"
    if isinstance(high, int) and len(value) > high:
        return f"at {at}: longer than {high} characters"
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            if re.search(pattern, value) is None:
                return f"at {at}: does not match the pattern"
        except re.error:
            return None
    return None


def _number(value: float, schema: dict, at: str) -> str | None:
    for keyword, fails in (("minimum", lambda b: value < b), ("maximum", lambda b: value > b),
                           ("exclusiveMinimum", lambda b: value <= b), ("exclusiveMaximum", lambda b: value >= b)):
        bound = schema.get(keyword)
        if isinstance(bound, (int, float)) and not isinstance(bound, bool) and fails(bound):
            return f"at {at}: outside the allowed range ({keyword} {bound})"
    return None
