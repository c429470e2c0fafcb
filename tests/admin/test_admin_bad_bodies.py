"""Every admin operation that takes a body refuses one the document refuses, with a 400, and audits it.

The route table generates the OpenAPI document and reads the bodies, so the
two agree; these tests walk every operation and send what no client should:
bytes that are not UTF-8, JSON nested past any sense, a body that is not an
object, and a field of the wrong type where the document names one.
"""

from __future__ import annotations

import re

import pytest

from llmgw.admin.body_schema import operations_of
from llmgw.admin.routes import ROUTES, openapi_document

from .conftest import AUTH

WITH_BODY = [r for r in ROUTES if r.request is not None]


def _path(route) -> str:
    return re.sub(r"\{\w+\}", "x", route.path)


def _ids(routes):
    return [f"{r.method} {r.path}" for r in routes]


def test_there_are_operations_with_bodies():
    assert len(WITH_BODY) >= 20


async def test_a_body_that_is_not_utf8_is_a_400_on_every_operation_and_refused_changes_are_audited(admin):
    before = len((await admin.call("GET", "/audit?limit=1000&action=*"))["events"])
    for route in WITH_BODY:
        resp = await admin.client.request(route.method, "/api/v1" + _path(route), data=b'{"name": "caf\xe9"}',
                                          headers={**AUTH, "Content-Type": "application/json"})
        answer = await resp.json()
        assert resp.status == 400 and "UTF-8" in answer["error"], (route.method, route.path, answer)
    events = (await admin.call("GET", "/audit?limit=1000&action=*"))["events"]
    refused = [e for e in events[: len(events) - before] if e["detail"].get("status") == 400]
    assert len(refused) == len([r for r in WITH_BODY if r.action]), "every refused change is in the audit log"


@pytest.mark.parametrize("route", WITH_BODY, ids=_ids(WITH_BODY))
async def test_a_body_the_document_refuses_the_server_refuses(admin, route):
    document = openapi_document()
    full, operation = operations_of(route)[0]  # PUT /settings/{key}: the first setting's own path
    path = re.sub(r"\{\w+\}", "x", full.removeprefix("/api/v1"))
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    bad_bodies = [b"[1, 2]", b"\"text\"", b"[" * 3000 + b"]" * 3000]
    for name, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type")
        if kind in ("string", ["string"]):
            bad_bodies.append(f'{{"{name}": {{"not": "a string"}}}}'.encode())
        elif kind in ("integer", "number", "boolean"):
            bad_bodies.append(f'{{"{name}": "not a {kind}"}}'.encode())
        elif kind == "array":
            bad_bodies.append(f'{{"{name}": 7}}'.encode())
        if "enum" in prop:
            bad_bodies.append(f'{{"{name}": "no-such-choice"}}'.encode())
        if "minimum" in prop:
            bad_bodies.append(f'{{"{name}": {prop["minimum"] - 1}}}'.encode())
        if prop.get("minLength"):
            bad_bodies.append(f'{{"{name}": ""}}'.encode())
        if prop.get("pattern", "").startswith("^(org|"):
            bad_bodies.append(f'{{"{name}": "galaxy:far-away"}}'.encode())
    if schema.get("additionalProperties") is False:
        bad_bodies.append(b'{"no_such_field_anywhere": 1}')
    for raw in bad_bodies:
        resp = await admin.client.request(route.method, "/api/v1" + path, data=raw,
                                          headers={**AUTH, "Content-Type": "application/json"})
        answer = await resp.json()
        assert resp.status == 400, (raw[:60], resp.status, answer)
        assert set(answer) <= {"error", "problems"}, answer


QUERY_NARROWED = [(r, p) for r in ROUTES for _, op in operations_of(r)[:1] for p in op.get("parameters", []) if isinstance(p, dict) and p.get("in") == "query"
                  and ("enum" in p["schema"] or "minimum" in p["schema"] or "maximum" in p["schema"])]


def test_narrowed_query_parameters_are_there():
    assert len(QUERY_NARROWED) >= 5


@pytest.mark.parametrize(("route", "param"), QUERY_NARROWED,
                         ids=[f"{r.method} {r.path} ?{p['name']}" for r, p in QUERY_NARROWED])
async def test_a_query_value_the_document_refuses_the_server_refuses(admin, route, param):
    schema = param["schema"]
    bad = "no-such-choice" if "enum" in schema else (
        schema["minimum"] - 1 if "minimum" in schema else schema["maximum"] + 1)
    headers = {**AUTH, "Content-Type": "application/json"} if route.changes else AUTH  # a change says JSON
    others = {p["name"]: "acme" for p in operations_of(route)[0][1]["parameters"] if isinstance(p, dict) and p.get("in") == "query" and p.get("required")}
    resp = await admin.client.request(route.method, "/api/v1" + _path(route),
                                      params={**others, param["name"]: str(bad)}, headers=headers)
    answer = await resp.json()
    assert resp.status == 400 and answer["error"].startswith(param["name"] + ":"), answer


async def test_a_refused_change_whose_path_holds_a_newline_is_still_audited(admin):
    resp = await admin.client.request("POST", "/api/v1/users/ann%0Aroot/role", json={"role": "admin"},
                                      headers={**AUTH, "Content-Type": "application/json"})
    assert 400 <= resp.status < 500
    events = (await admin.call("GET", "/audit?limit=5"))["events"]
    assert any("ann\\x0aroot" in e["target"] and e["outcome"] == "refused" for e in events), events
