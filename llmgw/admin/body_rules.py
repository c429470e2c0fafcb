"""Rules across fields, and bodies whose form depends on a path parameter, as JSON Schema for the OpenAPI
document (llmgw.admin.openapi), which the server checks each request against (llmgw.admin.body_schema).

- ``CLASS_RULES``: for a class of server.yaml's carried by the API (a ``models[]`` entry of ``POST /models``),
  the rules its validation (llmgw.config.validate) applies across its fields, written with ``anyOf``,
  ``not``, ``if``/``then`` and ``dependentRequired``. What JSON Schema cannot say (one value compared with
  another, a product of two, a name unique among items, a model that must exist) is said in words under
  ``x-llmgw-rules``, and the server's refusal names it.
- ``PER_PARAMETER``: a body whose form is the path parameter's: ``PUT /settings/{key}`` is documented as
  one path per setting (``PUT /settings/router.retries.attempts``), each with that setting's value form.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from llmgw.admin import forms

# ---------------------------------------------------------------- models[] entries


def _nonempty(key: str) -> dict[str, Any]:
    """The object has `key`, a non-empty list."""
    return {"required": [key], "properties": {key: {"minItems": 1}}}


def _at_least(key: str, least: int, why: str = "") -> dict[str, Any]:
    inner: dict[str, Any] = {"minimum": least, **({"x-why": why} if why else {})}
    return {"required": [key], "properties": {key: inner}, **({"x-why": why} if why else {})}


_GPUS = "the profile runs on GPUs (a card class, several nodes or a parallel size): give gpus, at least 1"


_NO_ENGINE = "no engine, and the model names none either; give one, like llamacpp or vllm"
_NAME = {"x-form": "a name without spaces", "type": "string", "pattern": rf"^[^{forms._SPACE}]+$"}

MODEL_RULES: dict[str, Any] = {
    "properties": {"name": _NAME, "aliases": {"items": _NAME}},
    "allOf": [
        {"anyOf": [_nonempty("profiles"), _nonempty("endpoints")],
         "x-why": "neither profiles (to run it on the cluster) nor endpoints (to forward it to a provider); give one"},
        {"not": {"allOf": [_nonempty("profiles"), _nonempty("endpoints")]},
         "x-why": "a model runs on the cluster (profiles) or at a provider (endpoints), not both; declare the "
                  "provider as a second model and name it in fallbacks"},
        # no model engine: every profile names its own (a profile without one is the model's)
        {"if": {"properties": {"engine": {"const": ""}}},
         "then": {"properties": {"profiles": {"items": {
             "required": ["engine"], "properties": {"engine": {"minLength": 1, "x-why": _NO_ENGINE}},
             "x-why": _NO_ENGINE}}}}},
    ],
    "x-llmgw-rules": [
        "scaling.min is at most scaling.max",
        "in server.yaml, a model run on the cluster has scaling.max at least 1; a model added at run time "
        "(POST /models) may have 0, which stops it without removing it",
        "profile names are unique within the model",
        "every fallback names another model of the catalog, not this one",
        "the name and aliases are not another model's name or alias",
    ],
}

PROFILE_RULES: dict[str, Any] = {
    "properties": {"nodes": {"minimum": 1}, "tensor_parallel": {"minimum": 0}, "pipeline_parallel": {"minimum": 0}},
    "allOf": [
        # a card class, several nodes, or a parallel size: the profile runs on GPUs
        {"if": {"required": ["gpu_class"], "properties": {"gpu_class": {"minLength": 1}}},
         "then": _at_least("gpus", 1, _GPUS)},
        {"if": _at_least("nodes", 2), "then": _at_least("gpus", 1, _GPUS)},
        {"if": _at_least("tensor_parallel", 1), "then": _at_least("gpus", 1, _GPUS)},
        {"if": _at_least("pipeline_parallel", 1), "then": _at_least("gpus", 1, _GPUS)},
    ],
    "x-llmgw-rules": [
        "tensor_parallel × pipeline_parallel is gpus × nodes when both are given",
        "tensor_parallel or pipeline_parallel, given alone, divides gpus × nodes",
    ],
}

_ON_DEMAND = "must be 0 for an on-demand model, which starts at its first request"
_DAY = "(mon|tue|wed|thu|fri|sat|sun)"
_CASE = "".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in _DAY)  # parse_days lowers the case
_CLOCK = {"x-form": "a time of day, HH:MM such as 08:00 or 18:30",
          "pattern": rf"^[{forms._SPACE}]*([01]?[0-9]|2[0-3]):[0-5][0-9][{forms._SPACE}]*$"}
WINDOW_RULES: dict[str, Any] = {
    "properties": {
        "from": _CLOCK, "to": _CLOCK, "min": {"minimum": 0},
        "days": {"minItems": 1, "x-why": "no days: leave days out for every day, or name some (mon-fri)",
                 "items": {"x-form": "a day: mon, tue, wed, thu, fri, sat, sun or a range like mon-fri",
                           "pattern": rf"^[{forms._SPACE}]*{_CASE}(-{_CASE})?[{forms._SPACE}]*$"}}},
    "x-llmgw-rules": ["max, when given, is at least min", "from and to are different times"],
}

SCALING_RULES: dict[str, Any] = {
    "x-llmgw-rules": ["prewarm is at most 24h"],
    "properties": {"prewarm": {"maximum": 86400}},
    "allOf": [
        # an on-demand model starts at its first request
        {"if": {"required": ["on_demand"], "properties": {"on_demand": {"const": True}}},
         "then": {"required": ["min"], "properties": {"min": {"const": 0, "x-why": _ON_DEMAND}}, "x-why": _ON_DEMAND}},
    ],
}

ENDPOINT_RULES: dict[str, Any] = {
    "properties": {"url": {"x-form": "the provider's address, starting http:// or https://",
                           "pattern": r"^https?://[^/?#]+"}},
}


#: POST /models adds a model run on the cluster: a model at a provider is declared in server.yaml.
ADD_MODEL_RULES: dict[str, Any] = {
    "required": ["profiles"],
    "properties": {
        "profiles": {"minItems": 1, "x-why": "give at least one, saying how the model runs on the nodes"},
        "endpoints": {"maxItems": 0, "x-why": "a model forwarded to a provider is declared in server.yaml"}},
    "x-why": "profiles: give at least one, saying how the model runs on the nodes",
}


def request_rules(cl: type) -> dict[str, Any]:
    """What a request body of class `cl` must also be, beyond the class's own schema (which answers share)."""
    from llmgw.config.server import ModelConfig

    return ADD_MODEL_RULES if cl is ModelConfig else {}


def _class_rules() -> dict[type, dict[str, Any]]:
    from llmgw.config.server import Endpoint, ModelConfig, Profile, Scaling, ScalingWindow

    return {ModelConfig: MODEL_RULES, Profile: PROFILE_RULES, Scaling: SCALING_RULES, Endpoint: ENDPOINT_RULES,
            ScalingWindow: WINDOW_RULES}


def rules_of(cl: type) -> dict[str, Any]:
    """The rules across `cl`'s fields (empty for most classes), to lay over its generated schema."""
    return _class_rules().get(cl, {})


def merge(schema: dict[str, Any], rules: dict[str, Any]) -> dict[str, Any]:
    """`schema` with `rules` laid over it: their properties' keywords added to its properties, the rest set."""
    out = dict(schema)
    for key, value in rules.items():
        if key == "properties":
            props = dict(out.get("properties", {}))
            for name, extra in value.items():
                if name in props:
                    props[name] = _merge_property(props[name], extra)
            out["properties"] = props
        else:
            out[key] = value
    return out


def _merge_property(schema: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    if "items" in extra and "items" in schema:
        merged = {**schema, **{k: v for k, v in extra.items() if k != "items"}}
        merged["items"] = {**schema["items"], **extra["items"]}
        return merged
    if "properties" in extra:  # a section: keywords for its own fields, beside its $ref
        return {"allOf": [schema, {"properties": extra["properties"]}]}
    return {**schema, **extra}


# ---------------------------------------------------------------- query strings

#: Query classes whose `until` must come after their `since` (the usage report and export refuse a span
#: that ends before it begins). JSON Schema cannot compare two values: ``x-llmgw-after`` names the other.
AFTER_SINCE = frozenset({"UsageQuery", "UsageExportQuery"})


def query_param_rules(query: type, name: str, params: dict[str, str]) -> dict[str, Any]:
    """What to add to the query parameter of field `name` of `query` (`params`: field name -> its key)."""
    if query.__name__ in AFTER_SINCE and name == "until" and "since" in params:
        return {"x-llmgw-after": params["since"]}
    return {}


# ---------------------------------------------------------------- a setting's value




def _duration(spec: Any) -> dict[str, Any]:
    low = spec.minimum if spec.minimum is not None else 0.0
    high = spec.maximum
    number: dict[str, Any] = {"type": "number", "minimum": low}
    if high is not None:
        number["maximum"] = high
    text: dict[str, Any] = {"type": "string", "pattern": forms.duration_text("+"),
                            "x-form": "a duration like 30s, 90m, 24h or 1h30m"}
    bounds = {"minimum": low, **({"maximum": high} if high is not None else {})}
    text["x-llmgw-seconds"] = bounds  # what the text adds up to; JSON Schema cannot add it up
    return {"anyOf": [number, text]}


def setting_value(spec: Any) -> dict[str, Any]:
    """The JSON Schema of a value of the setting `spec` (llmgw.admin.settings.SettingSpec)."""
    if spec.kind == "boolean":
        return {"type": "boolean"}
    if spec.kind == "integer":
        out: dict[str, Any] = {"type": "integer"}
        if spec.minimum is not None:
            out["minimum"] = int(math.ceil(spec.minimum))
        if spec.maximum is not None:
            out["maximum"] = int(math.floor(spec.maximum))
        return out
    if spec.kind == "duration":
        return _duration(spec)
    if spec.fixed_choices:
        return {"type": "string", "enum": list(spec.fixed_choices)}
    # the choices come from the running configuration (admission.bands): its GET /settings/{key} lists them
    return {"type": "string", "x-form": "one of the choices GET /settings/{key} lists",
            "x-llmgw-choices-from": spec.choices_from or ""}


def setting_bodies() -> dict[str, dict[str, Any]]:
    """For each setting, the schema of `PUT /settings/{key}`'s body."""
    from llmgw.admin.settings import REGISTRY

    bodies = {}
    for key, spec in sorted(REGISTRY.items()):
        value = {**setting_value(spec), "description": f"The new value of {key}: {spec.doc}"}
        bodies[key] = {"type": "object", "description": f"A new value for {key}.",
                       "properties": {"value": value}, "required": ["value"], "additionalProperties": False}
    return bodies


def _per_parameter() -> dict[type, tuple[str, Callable[[], dict[str, dict[str, Any]]]]]:
    from llmgw.admin.api_types import SettingValue

    return {SettingValue: ("key", setting_bodies)}


def per_parameter(route: Any) -> tuple[str, dict[str, dict[str, Any]]] | None:
    """(the path parameter, {its value: the body's schema}) for a route documented as one path per value."""
    found = _per_parameter().get(route.request) if route.request is not None else None
    if found is None:
        return None
    name, bodies = found
    return name, bodies()


__all__ = ["merge", "per_parameter", "query_param_rules", "request_rules", "rules_of", "setting_bodies",
           "setting_value"]
