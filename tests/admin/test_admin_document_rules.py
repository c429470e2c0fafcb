"""The rules the OpenAPI document states beyond one field's type, and that the server keeps to them: a usage
export's groups each once, each setting's value in its own form (one path per setting), a models[] entry's
rules across its fields, until after since, and a whole number written 10.0 taken as the integer it is."""

from __future__ import annotations

import pytest

from llmgw.admin.body_schema import operations_of
from llmgw.admin.routes import ROUTES, openapi_document
from llmgw.admin.settings import REGISTRY

from .conftest import JSON

DOCUMENT = openapi_document()


def _param(path: str, name: str) -> dict:
    return next(p for p in DOCUMENT["paths"][path]["get"]["parameters"] if isinstance(p, dict) and p.get("name") == name)


async def test_a_usage_export_names_each_group_once_as_the_document_says(bare):
    by = _param("/api/v1/usage/export", "by")
    assert by["schema"]["type"] == "array" and by["schema"]["uniqueItems"] is True
    assert (by["style"], by["explode"]) == ("form", False)  # by=project,model
    assert by["schema"]["default"] == ["project"]
    error = await bare.refused("GET", "/usage/export?by=project,model,project", status=400)
    assert error == "by: names one of them twice; give each once"
    error = await bare.refused("GET", "/usage/export?by=project,galaxy", status=400)
    assert error.startswith("by[1]: one of org, team, project, user, key, model")
    assert (await bare.call("GET", "/usage/export?by=project,model")).startswith("period_start,project")
    assert (await bare.call("GET", "/usage/export?by=")).startswith("period_start,")


def _setting_paths() -> dict[str, dict]:
    route = next(r for r in ROUTES if r.handler.__name__ == "set_setting")
    return {path.rsplit("/", 1)[1]: op for path, op in operations_of(route)}


def _values(schema: dict) -> tuple[list, list]:
    """(values the schema allows, values it refuses) at its edges."""
    if schema.get("type") == "boolean":
        return [True, False], ["yes", 1]
    if schema.get("type") == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        good = [low, 10.0 if (low or 0) <= 10 <= (high or 10) else low] + ([high] if high is not None else [])
        return good, [low - 1, "7"] + ([high + 1] if high is not None else [])
    if "enum" in schema:
        return list(schema["enum"]), ["no-such-choice", 3]
    if "anyOf" in schema:  # a duration: seconds, or text like 90s
        number = schema["anyOf"][0]
        low, high = number["minimum"], number.get("maximum")
        good = [low, f"{low}s"] + ([high, f"{high}s"] if high is not None else [])
        return good, [low - 1, "soon"] + ([high + 1] if high is not None else [])
    return [], [7]  # the configuration's choices: GET /settings/{key} lists them


async def test_each_setting_has_a_path_whose_value_form_the_server_keeps_to(bare):
    paths = _setting_paths()
    assert set(paths) == set(REGISTRY)
    for key, op in paths.items():
        value = op["requestBody"]["content"]["application/json"]["schema"]["properties"]["value"]
        good, bad = _values(value)
        for v in good:
            await bare.call("PUT", f"/settings/{key}", {"value": v})
        for v in bad:
            error = await bare.refused("PUT", f"/settings/{key}", {"value": v}, status=400)
            assert error.startswith(f"{key}: "), (key, v, error)
    band = paths["admission.default_band"]["requestBody"]["content"]["application/json"]["schema"]
    assert band["properties"]["value"]["x-llmgw-choices-from"] == "bands"
    wait = paths["admission.max_wait"]["requestBody"]["content"]["application/json"]["schema"]
    assert wait["properties"]["value"]["anyOf"][1]["x-llmgw-seconds"] == {"minimum": 0.001, "maximum": 86400.0}


def _model_schema() -> dict:
    return DOCUMENT["components"]["schemas"]["ModelConfig"]


@pytest.mark.parametrize(("spec", "refusal"), [
    ({"name": "m", "profiles": [{"engine": "sim"}],
      "endpoints": [{"url": "https://api.example.com/v1", "api_key": "sk-live-123"}]},
     "body: a model runs on the cluster (profiles) or at a provider (endpoints), not both"),
    ({"name": "m"}, "body: profiles: give at least one, saying how the model runs on the nodes"),
    ({"name": "m", "profiles": [{"gpus": 1}]}, "profiles[0]: no engine, and the model names none either"),
    ({"name": "m", "engine": "sim", "profiles": [{"gpu_class": "h100-80gb"}]}, "profiles[0]: the profile runs on GPUs"),
    ({"name": "m", "engine": "sim", "profiles": [{"gpus": 0, "nodes": 2}]}, "profiles[0].gpus: the profile runs on GPUs"),
    ({"name": "m", "engine": "sim", "profiles": [{}], "scaling": {"on_demand": True, "min": 1}},
     "scaling.min: must be 0 for an on-demand model"),
    ({"name": "two words", "engine": "sim", "profiles": [{}]}, "name: 'two words' is not a name without spaces"),
    ({"name": "m", "engine": "sim", "profiles": [{"cores": -1}]}, "profiles[0].cores: at least 0, got -1"),
])
async def test_a_models_entry_the_document_refuses_is_refused_before_the_cluster_sees_it(admin, spec, refusal):
    error = await admin.refused("POST", "/models", spec, status=400)
    assert error.startswith(refusal), error
    assert "sk-live-123" not in error
    assert "cannot be added" not in error  # the document's refusal, not the cluster's (which says so)
    assert not [c for c in admin.cluster.calls if c[0] == "add_model"]


async def test_the_rules_a_schema_cannot_check_are_stated_in_words_and_still_refused(admin):
    assert "scaling.min is at most scaling.max" in _model_schema()["x-llmgw-rules"]
    spec = {"name": "m", "engine": "sim", "profiles": [{}], "scaling": {"min": 3, "max": 2}}
    error = await admin.refused("POST", "/models", spec, status=400)
    assert "scaling.min: 3 is more than max (2)" in error


async def test_until_is_after_since_as_its_parameter_says(bare):
    until = _param("/api/v1/usage", "until")
    assert until["x-llmgw-after"] == "since" and until["description"].endswith("Must be after since.")
    assert _param("/api/v1/usage/export", "to")["x-llmgw-after"] == "from"
    error = await bare.refused("GET", "/usage?since=2026-09-02&until=2026-09-01", status=400)
    assert "must be after since" in error


async def test_a_whole_number_written_with_a_fraction_is_that_integer(bare):
    await bare.call("PUT", "/settings/router.retries.attempts", {"value": 3.0})
    got = await bare.call("GET", "/settings/router.retries.attempts")
    assert got["value"] == 3
    error = await bare.refused("PUT", "/settings/router.retries.attempts", {"value": 2.5}, status=400)
    assert error.startswith("router.retries.attempts: expected a whole number")


async def test_a_refusal_of_a_body_does_not_quote_it_whole(admin):
    secret = {"name": "m", "engine": "sim", "endpoints": [], "profiles": [{"env": {"HF_TOKEN": "hf_abc"}}] * 1}
    secret["profiles"] = []  # minItems: jsonschema's own message would quote the list
    error = await admin.refused("POST", "/models", {**secret, "endpoints": [{"url": "http://x", "api_key": "sk-9"}]},
                                status=400, headers=JSON)
    assert "sk-9" not in error
