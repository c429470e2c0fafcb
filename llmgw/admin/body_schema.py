"""The admin API's bodies and query strings checked against the OpenAPI document's own schemas.

The document is generated from the route table's attrs classes
(llmgw.admin.openapi); checking each request against the schema the
document gives its operation, before the body is read into its class, makes
the server refuse exactly what the document says it refuses, and keeps the
two from drifting: a constraint added to a field (`field(schema=...)`) is
documented and enforced at once.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from llmgw.admin.convert import BadRequest


@functools.cache
def _document() -> dict[str, Any]:
    from llmgw.admin.routes import openapi_document

    return openapi_document()


def _operation(method: str, path: str) -> dict[str, Any]:
    return _document()["paths"][path][method.lower()]


@functools.cache
def _body_validator(method: str, path: str) -> jsonschema.protocols.Validator | None:
    body = _operation(method, path).get("requestBody")
    if body is None:
        return None
    schema = body["content"]["application/json"]["schema"]
    root = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema,
            "components": _document()["components"]}
    return jsonschema.Draft202012Validator(root)


@functools.cache
def _query_validator(method: str, path: str) -> jsonschema.protocols.Validator | None:
    params = [p for p in _operation(method, path).get("parameters", []) if isinstance(p, dict) and p.get("in") == "query"]
    if not params:
        return None
    schema = {"type": "object", "properties": {p["name"]: p.get("schema", {}) for p in params},
              "required": [p["name"] for p in params if p.get("required")]}
    return jsonschema.Draft202012Validator(schema)


_KINDS = {"integer": "an integer", "number": "a number", "boolean": "true or false", "string": "a string",
          "array": "a list", "object": "an object", "null": "null"}


_NO_INSTANCE = {
    "minItems": lambda n: f"give at least {n}",
    "maxItems": lambda n: f"give at most {n}",
    "minLength": lambda n: "must not be empty" if n == 1 else f"at least {n} characters",
    "maxLength": lambda n: f"at most {n} characters",
    "const": lambda v: f"must be {v!r}" if not isinstance(v, bool) else f"must be {str(v).lower()}",
    "not": lambda _: "does not fit the document's rules for it",
    "anyOf": lambda _: "does not fit any of the forms the document gives",
    "oneOf": lambda _: "does not fit exactly one of the forms the document gives",
    "uniqueItems": lambda _: "names one of them twice; give each once",
}


def _field(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _refusal(where: str, validator: jsonschema.protocols.Validator, value: Any) -> BadRequest | None:
    errors = list(validator.iter_errors(value))
    if not errors:
        return None
    # A value of the wrong type first: what it should be is then the first thing to fix.
    typed = [e for e in errors if e.validator == "type"]
    error = best_match(typed or errors)
    field = _field(error.absolute_path)
    want, got = error.validator_value, repr(error.instance)
    got = got if len(got) <= 60 else got[:57] + "..."
    if error.schema.get("x-why") and error.validator != "type":  # a rule across fields (body_rules), its words
        sentence = error.schema["x-why"]
    elif error.validator == "type":
        kinds = want if isinstance(want, list) else [want]
        sentence = f"expected {' or '.join(_KINDS.get(k, k) for k in kinds)}, got {got}"
    elif error.validator == "enum":
        choices = ", ".join(str(v) for v in want if v is not None)
        # the phrasing each kind of refusal already had: the store's for bodies, the handlers' for queries
        sentence = f"{got} is not one of {choices}" if where == "body" else f"one of {choices}, got {got}"
    elif error.validator in ("minimum", "maximum"):
        low, high = error.schema.get("minimum"), error.schema.get("maximum")
        if low is not None and high is not None:
            sentence = f"between {low} and {high}, got {got}"
        else:
            sentence = f"at least {low}, got {got}" if low is not None else f"at most {high}, got {got}"
    elif error.validator == "additionalProperties":
        sentence = error.message
    elif error.validator == "pattern" and error.schema.get("x-form"):  # llmgw.admin.forms: the form in words
        sentence = f"{got} is not {error.schema['x-form']}"
    elif error.validator in _NO_INSTANCE:  # their messages quote the whole value, which may hold a secret
        sentence = _NO_INSTANCE[error.validator](want)
    else:
        sentence = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return BadRequest(f"{field}: {sentence}" if field else f"{where}: {sentence}")


def documented_path(route, params: Mapping[str, str] | None = None) -> str | None:
    """The document's path of this request: the route's, or for a route documented as one path per value of
    a path parameter (PUT /settings/{key}), that value's; None for a value the document has no path for."""
    from llmgw.admin.body_rules import per_parameter

    expanded = _expanded(route.method, route.full_path)
    if expanded is None:
        return route.full_path
    value = (params or {}).get(expanded, "")
    path = route.full_path.replace("{" + expanded + "}", value)
    return path if path in _document()["paths"] and "{" not in value else None


@functools.lru_cache(maxsize=None)
def _expanded(method: str, path: str) -> str | None:
    from llmgw.admin.body_rules import per_parameter
    from llmgw.admin.routes import ROUTES

    route = next(r for r in ROUTES if r.method == method and r.full_path == path)
    found = per_parameter(route)
    return None if found is None else found[0]


_VALUE_ONLY = jsonschema.Draft202012Validator(
    {"type": "object", "properties": {"value": {}}, "required": ["value"], "additionalProperties": False})


def operations_of(route) -> list[tuple[str, dict[str, Any]]]:
    """(the document's path, its operation) for the route: one, or one per value of its path parameter."""
    expanded = _expanded(route.method, route.full_path)
    if expanded is None:
        return [(route.full_path, _operation(route.method, route.full_path))]
    prefix, _, suffix = route.full_path.partition("{" + expanded + "}")
    return [(path, ops[route.method.lower()]) for path, ops in _document()["paths"].items()
            if path.startswith(prefix) and path.endswith(suffix) and "{" not in path[len(prefix):len(path) - len(suffix) or None]
            and route.method.lower() in ops]


def check_body(route, value: Any, params: Mapping[str, str] | None = None) -> None:
    """BadRequest naming the field when `value` is not what the document says the operation takes (an
    unknown value of a path parameter the document has one path per value for is the handler's to refuse)."""
    if _expanded(route.method, route.full_path) is not None:
        # One path per setting: the body's shape here; its value is the handler's to read, by the same
        # llmgw.admin.settings.SettingSpec each path's schema is written from (so they agree), in its words.
        validator = _VALUE_ONLY
    else:
        validator = _body_validator(route.method, route.full_path)
    if validator is not None and (problem := _refusal("body", validator, value)) is not None:
        raise problem


@functools.cache
def _list_params(method: str, path: str) -> frozenset[str]:
    """The query parameters that are lists, written with commas between (style form, explode false)."""
    return frozenset(p["name"] for p in _operation(method, path).get("parameters", [])
                     if isinstance(p, dict) and p.get("in") == "query" and p.get("schema", {}).get("type") == "array")


def check_query(route, values: Mapping[str, Any]) -> None:
    """The same for the query parameters, once read into numbers and booleans (a list from its commas)."""
    validator = _query_validator(route.method, route.full_path)
    if validator is None:
        return
    values = dict(values)
    for name in _list_params(route.method, route.full_path) & set(values):
        text = values[name]
        values[name] = text.split(",") if isinstance(text, str) and text else []
    if (problem := _refusal("query", validator, values)) is not None:
        raise problem


__all__ = ["check_body", "check_query", "documented_path", "operations_of"]
