"""Answers checked against OpenAI's published OpenAPI document (the copy beside this file, with its date).

`violations(exchanges)` reads each captured answer of an OpenAI endpoint, whole or as its stream's
events, and names every place it breaks the document's schema for it: the response schema of the
endpoint and status, each stream event against the stream's event schema.
"""

from __future__ import annotations

import functools
import json
import pathlib

import jsonschema

DOCUMENT = pathlib.Path(__file__).with_name("openai-openapi-2026-08-21.json")

#: (path, streamed) -> the schema of a 200 answer (of each event, when streamed).
SCHEMAS = {
    ("/v1/chat/completions", False): "CreateChatCompletionResponse",
    ("/v1/chat/completions", True): "CreateChatCompletionStreamResponse",
    ("/v1/completions", False): "CreateCompletionResponse",
    ("/v1/completions", True): "CreateCompletionResponse",
    ("/v1/embeddings", False): "CreateEmbeddingResponse",
    ("/v1/models", False): "ListModelsResponse",
    ("/v1/responses", False): "Response",
    ("/v1/responses", True): "ResponseStreamEvent",
}
ERROR = "ErrorResponse"


def _nullable(node):
    """OpenAPI 3.0's `nullable: true`, which the 3.1 document still uses in a few places, as JSON Schema
    says it: the schema, or null."""
    if isinstance(node, list):
        return [_nullable(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _nullable(v) for k, v in node.items() if k != "nullable"}
    return {"anyOf": [out, {"type": "null"}]} if node.get("nullable") is True else out


@functools.cache
def _document() -> dict:
    return _nullable(json.loads(DOCUMENT.read_text()))


@functools.cache
def validator(name: str) -> jsonschema.protocols.Validator:
    doc = _document()
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "components": doc["components"],
              "$ref": f"#/components/schemas/{name}"}
    return jsonschema.Draft202012Validator(schema)


def problems(name: str, value) -> list[str]:
    return [f"{name}{'.' + '.'.join(map(str, e.absolute_path)) if e.absolute_path else ''}: {e.message[:300]}"
            for e in validator(name).iter_errors(value)]


def _events(body: bytes) -> list:
    out = []
    for event in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
        if data and data != b"[DONE]":
            out.append(json.loads(data))
    return out


def violations(exchanges) -> list[str]:
    """Every schema violation in the captured answers of OpenAI endpoints ("" when none)."""
    found = []
    for ex in exchanges:
        path = ex.path.rstrip("/")
        streamed = ex.content_type.startswith("text/event-stream")
        if (path, streamed) not in SCHEMAS and (path, False) not in SCHEMAS:
            continue  # not an OpenAI endpoint (Anthropic's /v1/messages, llmgw's own)
        where = f"{ex.method} {ex.path} {ex.status}"
        if ex.status >= 400:
            found += [f"{where}: {p}" for p in problems(ERROR, json.loads(ex.body))]
            continue
        if ex.status != 200:
            continue
        name = SCHEMAS[(path, streamed)]
        values = _events(ex.body) if streamed else [json.loads(ex.body)]
        for value in values:
            if streamed and path == "/v1/chat/completions" and "error" in value:
                found.append(f"{where}: an error event in the stream: {value}")
                continue
            found += [f"{where}: {p}" for p in problems(name, value)]
    return found
