"""Plausible JSON values for a JSON schema: tool call arguments and
`response_format` answers.

Not a validator and not complete: it fills what a client is likely to
check (required properties, types, enums, bounds) and guesses a fitting
value from a property's name where it can.
"""

from __future__ import annotations

import random
from typing import Any

from llmgw.simengine.tokens import words

# A property whose name contains the key gets the value: `city`, `home_city`.
_BY_NAME = (
    ("email", "alex@example.com"),
    ("url", "https://example.com/"),
    ("uri", "https://example.com/"),
    ("city", "Paris"),
    ("location", "San Francisco, CA"),
    ("country", "France"),
    ("date", "2024-05-01"),
    ("time", "12:00:00"),
    ("phone", "+1-555-0100"),
    ("name", "Alex Morgan"),
    ("language", "en"),
    ("currency", "EUR"),
    ("unit", "celsius"),
    ("id", "item-0001"),
)

_BY_FORMAT = {
    "date": "2024-05-01",
    "date-time": "2024-05-01T12:00:00Z",
    "time": "12:00:00",
    "email": "alex@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "192.0.2.1",
}

_MAX_DEPTH = 6


def value_for(schema: Any, rng: random.Random, name: str = "", depth: int = 0) -> Any:
    """A value that fits `schema`, chosen with `rng`; `name` is the property's name."""
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return _string_for(name, {}, rng)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            typed = [o for o in options if isinstance(o, dict) and o.get("type") != "null"]
            return value_for((typed or options)[0], rng, name, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if kind == "object":
        return object_for(schema, rng, depth + 1)
    if kind == "array":
        count = max(1, min(int(schema.get("minItems", 1)), 3))
        return [value_for(schema.get("items", {}), rng, name, depth + 1) for _ in range(count)]
    if kind == "integer":
        low = int(schema.get("minimum", 1))
        high = int(schema.get("maximum", max(low, 100)))
        return rng.randint(low, max(low, high))
    if kind == "number":
        low = float(schema.get("minimum", 0.0))
        high = float(schema.get("maximum", max(low, 100.0)))
        return round(rng.uniform(low, max(low, high)), 2)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _string_for(name, schema, rng)


def object_for(schema: dict, rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """An object with the schema's required properties, or all of them when none is marked."""
    properties = schema.get("properties") or {}
    if not isinstance(properties, dict):
        return {}
    required = schema.get("required")
    names = [n for n in required if n in properties] if isinstance(required, list) else list(properties)
    if isinstance(required, list):
        names += [n for n in required if n not in properties]  # required but undescribed
    return {n: value_for(properties.get(n, {}), rng, n, depth) for n in names}


def _string_for(name: str, schema: dict, rng: random.Random) -> str:
    fmt = schema.get("format")
    if fmt in _BY_FORMAT:
        return _BY_FORMAT[fmt]
    lowered = name.lower()
    for key, value in _BY_NAME:
        if key in lowered:
            return value
    text = words(rng, rng.randint(2, 5))
    limit = schema.get("maxLength")
    return text[: int(limit)] if isinstance(limit, int) else text


def json_object_for(rng: random.Random) -> dict[str, Any]:
    """The answer to `response_format: json_object` when no schema is given."""
    return {
        "answer": words(rng, rng.randint(4, 10)),
        "confidence": round(rng.uniform(0.5, 1.0), 2),
        "tags": [words(rng, 1) for _ in range(rng.randint(1, 3))],
    }
