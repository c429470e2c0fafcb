"""The route table, the server and the OpenAPI document agree, and the document is valid and described."""

from __future__ import annotations

import json
import pathlib

import attrs
import pytest
from aiohttp import web
from openapi_spec_validator import validate

from llmgw.admin import make_admin_app
from llmgw.admin.body_schema import operations_of
from llmgw.admin.dispatch import PREFIX
from llmgw.admin.routes import ROUTES, openapi_document, openapi_text
from llmgw.admin.settings import SETTING_KEYS
from llmgw.config.server import ServerConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "admin-api.openapi.json"
REGENERATE = "llmgw ctl openapi > docs/admin-api.openapi.json  (or: python -m llmgw.admin > docs/admin-api.openapi.json)"


def served(app: web.Application) -> set[tuple[str, str]]:
    """(method, path) of every route the app serves, HEAD aside (aiohttp adds one to each GET)."""
    return {(r.method, r.resource.canonical) for r in app.router.routes() if r.method != "HEAD"}


def table_mismatch(app: web.Application) -> tuple[set, set]:
    table = {(r.method, r.full_path) for r in ROUTES}
    return served(app) - table, table - served(app)


def test_every_route_served_is_in_the_table_and_the_other_way_round():
    app = make_admin_app(ServerConfig(), store=None, token="t")  # type: ignore[arg-type]
    extra, missing = table_mismatch(app)
    assert not extra, f"served but not in llmgw/admin/routes.py ROUTES: {sorted(extra)}"
    assert not missing, f"in ROUTES but not served: {sorted(missing)}"
    # And the check does catch a route added beside the table.
    app.router.add_get(PREFIX + "/secret-door", lambda r: web.Response())
    assert table_mismatch(app)[0] == {("GET", PREFIX + "/secret-door")}


def test_every_route_of_the_table_is_in_the_document_and_nothing_else():
    paths = openapi_document()["paths"]
    documented = {(m.upper(), p) for p, ops in paths.items() for m in ops}
    # PUT /settings/{key} is documented once per setting, each with its value's form
    assert documented == {(r.method, path) for r in ROUTES for path, _ in operations_of(r)}
    settings = [path for path, _ in operations_of(next(r for r in ROUTES if r.handler.__name__ == "set_setting"))]
    assert "/api/v1/settings/router.retries.attempts" in settings and len(settings) == len(SETTING_KEYS)


def test_the_committed_document_is_current():
    committed = COMMITTED.read_text(encoding="utf-8") if COMMITTED.exists() else ""
    assert committed == openapi_text(), f"docs/admin-api.openapi.json is stale; regenerate it: {REGENERATE}"


def test_the_document_is_valid_openapi_3_1():
    document = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert document["openapi"] == "3.1.0"
    validate(document)


def test_every_operation_field_and_parameter_is_described():
    document = openapi_document()
    ids = set()
    for path, ops in document["paths"].items():
        for method, op in ops.items():
            where = f"{method.upper()} {path}"
            assert op["summary"] and op.get("description"), f"{where}: give its handler a docstring"
            assert op["operationId"] not in ids, f"{where}: operationId {op['operationId']} is taken"
            ids.add(op["operationId"])
            for param in op["parameters"]:
                if "$ref" not in param:
                    assert param.get("description"), f"{where}: parameter {param['name']} has no description"
    for name, schema in document["components"]["schemas"].items():
        assert schema.get("description"), f"schema {name} has no description (give its class a docstring)"
        for field, prop in schema.get("properties", {}).items():
            assert prop.get("description"), f"{name}.{field} has no description (field(doc=...))"


def test_each_route_has_a_described_path_parameter_and_changes_are_audited():
    for route in ROUTES:
        assert set(route.path_params) == set(route.params), f"{route.method} {route.path}: describe its params"
        assert bool(route.action) == route.changes, f"{route.method} {route.path}: a change needs an audit action"
        for t in (route.request, route.response, route.query):
            assert t is None or attrs.has(t)


def test_the_document_is_served_as_committed(tmp_path):
    import urllib.request

    from llmgw.admin.testing import LiveAdmin

    with LiveAdmin(tmp_path) as live:
        req = urllib.request.Request(live.url + PREFIX + "/openapi.json", headers=live.headers())
        with urllib.request.urlopen(req) as resp:
            assert json.loads(resp.read()) == json.loads(COMMITTED.read_text(encoding="utf-8"))


# schemathesis against the live server: tests/admin/test_admin_fuzz.py


def test_the_admin_api_page_names_every_endpoint():
    from pathlib import Path

    from llmgw.admin.routes import ROUTES

    page = (Path(__file__).parents[2] / "docs" / "admin-api.md").read_text(encoding="utf-8")
    missing = [f"{r.method} {r.path}" for r in ROUTES if r.path not in page]
    assert not missing, f"docs/admin-api.md does not describe: {', '.join(missing)}"
