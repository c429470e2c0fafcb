"""The OpenAPI 3.1 document, generated from the route table and the attrs types it names.

Nothing in the document is written by hand: paths, methods, parameters and
bodies come from `routes.ROUTES`; schemas from the attrs classes, each
field's description from its `doc` metadata (the same that server.yaml's
classes carry, so a model definition in a request is described as the
configuration reference describes it); an operation's description from its
handler's docstring.
"""

from __future__ import annotations

import datetime as dt
import inspect
import types
import typing
from collections.abc import Sequence
from typing import Any

import attrs

from llmgw.admin import body_rules
from llmgw.admin.forms import duration_text
from llmgw.admin.convert import unstructure
from llmgw.admin.fields import Unset
from llmgw.config.fields import doc_of, yaml_key
from llmgw.config.secrets import Secret
from llmgw.config.units import ByteSize, Duration

__all__ = ["API_VERSION", "SchemaRegistry", "build_document"]

#: The API's version: it changes when a change would break a client, not with every release.
API_VERSION = "1.0.0"

_PRIMITIVES: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    dt.datetime: {"type": "string", "format": "date-time"},
    Duration: {"type": ["string", "number"], "pattern": duration_text("+-"),
               "description": "A duration like 30s, 250ms or 1h30m; a bare number is seconds."},
    ByteSize: {"type": ["string", "integer"], "minimum": 0,
               # llmgw.config.units: a number, spaces, a unit of bytes in any case (k, KB, KiB … T, TB, TiB)
               "pattern": r"^\s*[0-9]+(\.[0-9]+)?\s*([bB]|[kKmMgGtT]([iI]?[bB]?))?\s*$",
               "description": "A size like 128MiB or 1GB; a bare number is bytes."},
    Secret: {"type": "string", "description": "A secret: the value, env:NAME or file:/path."},
}


def _first_paragraph(text: str | None) -> str:
    return inspect.cleandoc(text or "").split("\n\n")[0].replace("\n", " ").strip()


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    out = dict(schema)
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"]
    elif isinstance(kind, list):
        out["type"] = [*kind, "null"]
    elif "type" not in out:
        return {"anyOf": [schema, {"type": "null"}]} if schema else {}
    return out


class SchemaRegistry:
    """The components' schemas, one per attrs class reached; `strict` ones refuse unknown fields."""

    def __init__(self) -> None:
        self.schemas: dict[str, dict[str, Any]] = {}
        self._classes: dict[str, type] = {}
        self.strict: set[type] = set()

    def ref(self, cl: type, strict: bool) -> dict[str, Any]:
        name = cl.__name__
        known = self._classes.get(name)
        if known is not None and known is not cl:
            raise ValueError(f"two schemas would be called {name}: {known.__module__} and {cl.__module__}")
        if known is None or (strict and cl not in self.strict):
            self._classes[name] = cl
            if strict:
                self.strict.add(cl)
            self.schemas[name] = {}  # placeholder: a class that refers to itself stops here
            self.schemas[name] = self._object(cl, strict)
        return {"$ref": f"#/components/schemas/{name}"}

    def _object(self, cl: type, strict: bool) -> dict[str, Any]:
        hints = typing.get_type_hints(cl)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for f in attrs.fields(cl):
            key = yaml_key(f)
            schema = dict(self.of(hints.get(f.name, f.type), strict))
            narrower = f.metadata.get("schema")
            if narrower:  # field(schema=...): documented here, enforced by llmgw.admin.body_schema
                schema.update(narrower)
                kind = schema.get("type")
                if "enum" in narrower and isinstance(kind, list) and "null" in kind:
                    schema["enum"] = [*narrower["enum"], None]
            doc = doc_of(f)
            if doc:
                schema["description"] = doc
            default = _default(f)
            if default is not _NO_DEFAULT:
                schema["default"] = default
            elif f.default is attrs.NOTHING:
                required.append(key)
            properties[key] = schema
        out: dict[str, Any] = {"type": "object", "description": _first_paragraph(cl.__doc__) or cl.__name__,
                               "properties": properties}
        if required:
            out["required"] = required
        # A rule over several fields (one of two given; one field's form when another is set), enforced alike.
        out.update(getattr(cl, "__schema__", None) or {})
        if cl.__module__.startswith("llmgw.config."):  # server.yaml's: no count or duration is negative
            out["properties"] = {k: _not_negative(v) for k, v in properties.items()}
        out = body_rules.merge(out, body_rules.rules_of(cl))  # server.yaml's rules across its fields
        if strict:
            out["additionalProperties"] = False
        return out

    def of(self, tp: Any, strict: bool) -> dict[str, Any]:
        """The schema of a field's type."""
        if tp is Any:
            return {}
        if tp in _PRIMITIVES:
            return dict(_PRIMITIVES[tp])
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (typing.Union, types.UnionType):
            rest = [a for a in args if a is not type(None)]
            inner = self.of(rest[0], strict) if len(rest) == 1 else {"anyOf": [self.of(a, strict) for a in rest]}
            return _nullable(inner) if len(rest) < len(args) else inner
        if origin is typing.Literal:
            kinds = {type(a) for a in args}
            out: dict[str, Any] = {"enum": list(args)}
            if kinds == {str}:
                out["type"] = "string"
            return out
        if origin in (list, tuple, Sequence) or tp in (list, tuple):
            item = args[0] if args else Any
            return {"type": "array", "items": self.of(item, strict)}
        if origin is dict or tp is dict:
            value = args[1] if len(args) == 2 else Any
            return {"type": "object", "additionalProperties": self.of(value, strict) if value is not Any else True}
        if attrs.has(tp):
            return self.ref(tp, strict)
        raise TypeError(f"no JSON schema for {tp!r}")


def _not_negative(schema: dict[str, Any]) -> dict[str, Any]:
    """A field of server.yaml's classes: numbers from 0 (llmgw.config.validate refuses any below), and a
    duration's text without a minus."""
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if not ({"integer", "number"} & set(kinds)) or "minimum" in schema:
        return schema
    out = {**schema, "minimum": 0}
    if out.get("pattern") == _PRIMITIVES[Duration]["pattern"]:
        out["pattern"] = duration_text("+")
    return out


class _NoDefault:
    pass


_NO_DEFAULT = _NoDefault()


def _default(f: attrs.Attribute) -> Any:
    default = f.default
    if default is attrs.NOTHING or isinstance(default, Unset):
        return _NO_DEFAULT
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        if default.takes_self:
            return _NO_DEFAULT
        default = default.factory()
    if attrs.has(type(default)):
        return _NO_DEFAULT  # a whole section: its own schema lists its defaults
    value = unstructure(default)
    return value


def _operation(route: Any, registry: SchemaRegistry, fixed: tuple[str, str, dict[str, Any]] | None = None,
               ) -> dict[str, Any]:
    """`fixed`: (a path parameter, its value, the body's schema) for one of the paths of a route documented
    as one path per value of that parameter (llmgw.admin.body_rules.per_parameter)."""
    from llmgw.admin.security import ACTOR_HEADER, VIA_HEADER

    params: list[dict[str, Any]] = []
    for name in route.path_params:
        if fixed is not None and name == fixed[0]:
            continue
        doc = route.params[name]  # a llmgw.admin.forms.Param carries the form the server takes
        params.append({"name": name, "in": "path", "required": True, "description": str(doc),
                       "schema": {"type": "string", "minLength": 1, **getattr(doc, "schema", {})}})
    if route.query is not None:
        hints = typing.get_type_hints(route.query)
        for f in attrs.fields(route.query):
            schema = registry.of(hints.get(f.name, f.type), strict=True)
            if "anyOf" in schema or isinstance(schema.get("type"), list):
                schema = registry.of([a for a in typing.get_args(hints[f.name]) if a is not type(None)][0], True)
            schema = {**schema, **f.metadata.get("schema", {})}  # field(schema=...), enforced by body_schema
            param = {"name": yaml_key(f), "in": "query", "description": doc_of(f), "schema": schema}
            keys = {g.name: yaml_key(g) for g in attrs.fields(route.query)}
            if after := body_rules.query_param_rules(route.query, f.name, keys).get("x-llmgw-after"):
                param["x-llmgw-after"] = after  # a relation between two values, which JSON Schema cannot say
                param["description"] = f"{doc_of(f)} Must be after {after}."
            if schema.get("type") == "array":  # a list written with commas between: by=project,model
                param.update(style="form", explode=False)
            default = _default(f)
            if f.default is attrs.NOTHING:
                param["required"] = True
            elif default is not _NO_DEFAULT and default is not None:
                if schema.get("type") == "array" and isinstance(default, str):
                    default = default.split(",") if default else []
                param["schema"] = {**schema, "default": default}
            params.append(param)
    params += [{"$ref": f"#/components/parameters/{ACTOR_HEADER}"}, {"$ref": f"#/components/parameters/{VIA_HEADER}"}]
    op: dict[str, Any] = {"operationId": route.operation_id, "summary": route.summary, "tags": [route.tag]}
    if fixed is not None:
        op["operationId"] += "__" + fixed[1].replace(".", "_")
        op["summary"] += f": {fixed[1]}"
    if route.description:
        op["description"] = inspect.cleandoc(route.description)
    op["parameters"] = params
    if fixed is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": fixed[2]}}}
    elif route.request is not None:
        schema = registry.ref(route.request, strict=True)
        if rules := body_rules.request_rules(route.request):  # what this request must also be
            schema = {"allOf": [schema, rules]}
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
    if route.response is not None:
        content = {"application/json": {"schema": registry.ref(route.response, strict=False)}}
        described = _first_paragraph(route.response.__doc__) or route.summary
    elif route.content_type == "text/csv":
        content = {"text/csv": {"schema": {"type": "string"}}}
        described = "CSV, a header row first."
    else:
        content = {route.content_type: {"schema": {"type": "object"}}}
        described = route.summary
    op["responses"] = {
        str(route.status): {"description": described, "content": content},
        "default": {"description": "A refusal: what was wrong, in a sentence.",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}},
    }
    return op


def build_document(routes: Sequence[Any], tags: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The whole document for `routes`, deterministic: the same table gives the same bytes."""
    from llmgw.admin.api_types import ErrorBody
    from llmgw.admin.audit import VIAS
    from llmgw.admin.security import ACTOR_HEADER, ACTOR_PATTERN, VIA_HEADER

    registry = SchemaRegistry()
    registry.ref(ErrorBody, strict=False)
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        expanded = body_rules.per_parameter(route)
        if expanded is None:
            paths.setdefault(route.full_path, {})[route.method.lower()] = _operation(route, registry)
            continue
        name, bodies = expanded  # one path per value, each with its own body (PUT /settings/{key})
        for value, body in bodies.items():
            path = route.full_path.replace("{" + name + "}", value)
            paths.setdefault(path, {})[route.method.lower()] = _operation(route, registry, (name, value, body))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "llmgw admin API",
            "version": API_VERSION,
            "summary": "Steer an llmgw cluster: nodes, models, replicas, quotas, usage, settings, people, audit.",
            "description": (
                "Served on the control plane's admin listener (admin_listen, 127.0.0.1:9090 by default). "
                "Every request needs the admin token as a bearer token. Refused before any handler: a DNS "
                "name rather than an address in Host, a cross-site Origin or Sec-Fetch-Site, and a change "
                "(POST, PUT, PATCH, DELETE) whose Content-Type is not application/json. Every change is "
                "recorded in the audit log with the actor named in X-Llmgw-Actor. See docs/admin-api.md."
            ),
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "servers": [{"url": "http://127.0.0.1:9090", "description": "the admin listener's default address"}],
        "security": [{"adminToken": []}],
        "tags": [{"name": name, "description": text} for name, text in tags],
        "paths": paths,
        "components": {
            "securitySchemes": {"adminToken": {
                "type": "http", "scheme": "bearer",
                "description": "The token in the server's admin_token_file (written 0600 at first start)."}},
            "parameters": {
                ACTOR_HEADER: {
                    "name": ACTOR_HEADER, "in": "header", "required": False,
                    "description": "Who makes the change, for the audit log: letters, digits and ._-@, at "
                                   "most 64; unknown when absent.",
                    "schema": {"type": "string", "pattern": ACTOR_PATTERN, "maxLength": 64}},
                VIA_HEADER: {
                    "name": VIA_HEADER, "in": "header", "required": False,
                    "description": "Through what the change is made, for the audit log; api when absent.",
                    "schema": {"type": "string", "enum": list(VIAS)}},
            },
            "schemas": dict(sorted(registry.schemas.items())),
        },
    }
