"""From a route of the table to an aiohttp handler: read, call, record, answer.

A route's handler is `async def h(call: Call) -> answer`: it finds the query
and the body already read into the route's attrs types (`call.query`,
`call.body`) and returns an instance of the route's response type, which is
turned into JSON here. A change (any route with an `action`) is recorded in
the audit log when it ends, done or refused.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
from aiohttp import web

from llmgw.admin import audit
from llmgw.admin.body_schema import check_body, check_query
from llmgw.admin.convert import BadRequest, structure, unstructure
from llmgw.admin.errors import error_response, refusal_of
from llmgw.admin.state import ADMIN, Admin
from llmgw.config.fields import yaml_key

PREFIX = "/api/v1"
ACTOR = web.RequestKey("llmgw_actor", str) if hasattr(web, "RequestKey") else "llmgw_actor"
VIA = web.RequestKey("llmgw_via", str) if hasattr(web, "RequestKey") else "llmgw_via"

Handler = Callable[["Call"], Awaitable[Any]]
_PARAM = re.compile(r"\{(\w+)\}")


@attrs.frozen(kw_only=True)
class Route:
    """One endpoint: everything the server and the OpenAPI document know of it."""

    method: str
    path: str  #: under /api/v1, with {params}
    handler: Handler
    summary: str
    tag: str
    response: type | None  #: attrs class answered; None for a non-JSON answer (content_type)
    request: type | None = None  #: attrs class of the JSON body
    query: type | None = None  #: attrs class whose fields are the query parameters
    params: Mapping[str, str] = attrs.field(factory=dict)  #: path parameter -> its description
    action: str | None = None  #: the audit log's action for a change, like models.scale
    target: str = ""  #: the audit target, with {params}: model:{name}
    raw_body: bool = False  #: the handler gets the JSON object as sent (the request type documents it)
    status: int = 200
    content_type: str = "application/json"

    @property
    def full_path(self) -> str:
        return PREFIX + self.path

    @property
    def path_params(self) -> list[str]:
        return _PARAM.findall(self.path)

    @property
    def operation_id(self) -> str:
        return self.handler.__name__

    @property
    def description(self) -> str:
        return (self.handler.__doc__ or "").strip()

    @property
    def changes(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH", "DELETE")


@attrs.define(kw_only=True)
class Call:
    """One request to one route, read."""

    request: web.Request
    admin: Admin
    route: Route
    actor: str
    via: str
    params: dict[str, str]
    query: Any = None
    body: Any = None
    #: what the change is done to, for the audit log (the route's template, filled)
    target: str = ""
    #: the fields given, for the audit log (body, path and query parameters)
    fields: dict[str, Any] = attrs.Factory(dict)
    #: set when a lower layer (Tenancy) wrote the change's audit event itself
    audited_by: audit.AuditedStore | None = None

    @property
    def store(self):
        return self.admin.store

    def tenancy(self):
        """A Tenancy acting for this call's actor, whose events carry this call's via and fields."""
        audited = audit.AuditedStore(self.admin.store, via=self.via, fields=self.fields)
        self.audited_by = audited
        return self.admin.tenancy(audited, self.actor)


def make_endpoint(route: Route) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def endpoint(request: web.Request) -> web.StreamResponse:
        admin = request.app[ADMIN]
        params = dict(request.match_info)
        call = Call(request=request, admin=admin, route=route, actor=request.get(ACTOR, "unknown"),
                    via=request.get(VIA, "api"), params=params, target=_fill(route.target, params))
        call.fields = {**params, **{k: v for k, v in request.query.items()}}
        try:
            call.query = read_query(request.query, route.query, route)
            if route.request is not None:
                raw = await read_json(request)
                if isinstance(raw, dict):
                    call.fields.update(raw)
                if route.raw_body and not isinstance(raw, dict):
                    raise BadRequest(f"body: expected a JSON object, got {type(raw).__name__}")
                call.body = raw if route.raw_body else structure(raw, route.request)
                check_body(route, raw, params)  # and what the OpenAPI document refuses besides, the server refuses
            call.target = _fill(route.target, call.fields)
            result = await route.handler(call)
        except Exception as exc:  # noqa: BLE001 - every failure is answered as a refusal
            err = refusal_of(exc)
            if route.action:
                await audit.record(admin.store, actor=call.actor, via=call.via, action=route.action,
                                   target=call.target, fields=call.fields, outcome="refused",
                                   reason=err.message, status=err.status)
            return error_response(err)
        if route.action and not (call.audited_by and call.audited_by.written):
            await audit.record(admin.store, actor=call.actor, via=call.via, action=route.action,
                               target=call.target, fields=call.fields, outcome="ok")
        if isinstance(result, web.StreamResponse):
            return result
        if route.response is not None and not isinstance(result, route.response):
            raise TypeError(f"{route.operation_id} answered {type(result).__name__}, not {route.response.__name__}")
        return web.json_response(unstructure(result), status=route.status, dumps=_dumps)

    endpoint.route = route  # type: ignore[attr-defined]  # the middleware reads it to audit early refusals
    endpoint.__name__ = route.operation_id
    return endpoint


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _fill(template: str, fields: Mapping[str, Any]) -> str:
    """The audit target: the route's template with the request's fields, or the template when one is missing."""
    try:
        return template.format_map({k: v for k, v in fields.items() if isinstance(v, (str, int))})
    except (KeyError, IndexError, ValueError):
        return template


async def read_json(request: web.Request) -> Any:
    if not request.body_exists:
        return {}
    raw = await request.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"body: not UTF-8 text (byte {exc.start} is not); send JSON in UTF-8") from None
    if not text.strip():
        return {}
    try:
        return json.loads(text, parse_float=_number)
    except RecursionError:
        raise BadRequest("body: objects and arrays nest too deep") from None
    except ValueError as exc:
        raise BadRequest(f"body: not JSON ({exc})") from None


def _number(text: str) -> int | float:
    """A JSON number with a fraction or exponent: a whole one (10.0, 1e3) is the integer it is, as JSON
    Schema counts it (the document's integer fields take 10.0), else a float."""
    value = float(text)
    if value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def read_query(query: Mapping[str, str], cl: type | None, route: Route | None = None) -> Any:
    """The query string as an instance of `cl`; unknown or repeated parameters are refused."""
    if cl is None:
        if query:
            raise BadRequest(f"query: this endpoint takes no parameters, got {', '.join(sorted(set(query)))}")
        return None
    fields = {yaml_key(f): f for f in attrs.fields(cl)}
    hints = typing.get_type_hints(cl)
    values: dict[str, Any] = {}
    for name in set(query.keys()):
        if name not in fields:
            raise BadRequest(f"query: unknown parameter {name!r}; known: {', '.join(fields)}")
        got = query.getall(name) if hasattr(query, "getall") else [query[name]]
        if len(got) > 1:
            raise BadRequest(f"query: {name} given {len(got)} times; give it once")
        values[name] = _query_value(got[0], hints[fields[name].name], name)
    read = structure(values, cl, "query")
    if route is not None:
        check_query(route, values)  # and what the OpenAPI document refuses besides
    return read


def _query_value(text: str, tp: Any, name: str) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)] or [tp]
    base = args[0] if len(args) == 1 else str
    if base is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise BadRequest(f"query: {name}: expected true or false, got {text!r}")
    if base is int:
        try:
            return int(text)
        except ValueError:
            raise BadRequest(f"query: {name}: expected a whole number, got {text!r}") from None
    return text

