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


def _field(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _refusal(where: str, validator: jsonschema.protocols.Validator, value: Any) -> BadRequest | None:
    error = best_match(validator.iter_errors(value))
    if error is None:
        return None
    field = _field(error.absolute_path)
    want, got = error.validator_value, repr(error.instance)
    got = got if len(got) <= 60 else got[:57] + "..."
    if error.validator == "type":
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
    else:
        sentence = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return BadRequest(f"{field}: {sentence}" if field else f"{where}: {sentence}")


def check_body(route, value: Any) -> None:
    """BadRequest naming the field when `value` is not what the document says the operation takes."""
    validator = _body_validator(route.method, route.full_path)
    if validator is not None and (problem := _refusal("body", validator, value)) is not None:
        raise problem


def check_query(route, values: Mapping[str, Any]) -> None:
    """The same for the query parameters, once read into numbers and booleans."""
    validator = _query_validator(route.method, route.full_path)
    if validator is not None and (problem := _refusal("query", validator, dict(values))) is not None:
        raise problem


__all__ = ["check_body", "check_query"]
