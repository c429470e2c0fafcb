"""Answers of Anthropic's endpoints checked against the anthropic SDK's own models, strictly.

Anthropic publishes no OpenAPI document of its API; its SDK's types are generated from the one it
keeps, so a Message, each stream event and each error must validate as those types in pydantic's
strict mode (no coercion: a string where a number belongs is a violation), and with no field the
types do not know of.
"""

from __future__ import annotations

import functools
import json

import pydantic
from anthropic import types


@functools.cache
def _adapter(kind: object) -> pydantic.TypeAdapter:
    return pydantic.TypeAdapter(kind)


def _problems(kind: object, name: str, value) -> list[str]:
    try:
        parsed = _adapter(kind).validate_python(value, strict=True)
    except pydantic.ValidationError as exc:
        return [f"{name}: {e['loc']}: {e['msg']}" for e in exc.errors()[:5]]
    extra = _unknown(parsed)
    return [f"{name}: fields the SDK's types do not know: {sorted(extra)}"] if extra else []


def _unknown(model) -> set[str]:
    found: set[str] = set()
    if isinstance(model, pydantic.BaseModel):
        found |= {k for k in (model.model_extra or {})}
        for value in model.__dict__.values():
            found |= _unknown(value)
    elif isinstance(model, list):
        for value in model:
            found |= _unknown(value)
    return found


def _events(body: bytes) -> list:
    out = []
    for event in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
        if data:
            out.append(json.loads(data))
    return out


def violations(exchanges) -> list[str]:
    found = []
    for ex in exchanges:
        if ex.path.rstrip("/") != "/v1/messages":
            continue
        where = f"{ex.method} {ex.path} {ex.status}"
        if ex.status >= 400:
            found += [f"{where}: {p}" for p in _problems(types.ErrorResponse, "ErrorResponse", json.loads(ex.body))]
        elif ex.content_type.startswith("text/event-stream"):
            for event in _events(ex.body):
                kind = types.RawMessageStreamEvent if event.get("type") != "ping" else dict
                found += [f"{where}: {p}" for p in _problems(kind, event.get("type", "event"), event)]
        else:
            found += [f"{where}: {p}" for p in _problems(types.Message, "Message", json.loads(ex.body))]
    return found
