"""One JSON Schema per client operation: what the gateway refuses before it spends anything.

The bounds are the ones OpenAI's and Anthropic's own APIs refuse past
(temperature 0..2 for OpenAI and 0..1 for Anthropic, max_tokens at least 1,
Anthropic's max_tokens required, the Responses API's max_output_tokens at
least 16, booleans that are booleans, well-formed tools), so a request the
real API would turn away is turned away here too, with the field named,
instead of reaching an engine that guesses. Fields the schemas do not name
are let through: engines take options of their own (vLLM's `top_k`,
`guided_json`, …).

`problem_in(operation, body)` answers the first problem found, or None.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import attrs
import fastjsonschema
import jsonschema
from jsonschema.exceptions import best_match

_INT = {"type": "integer"}
_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_OBJ = {"type": "object"}
_NUM = {"type": "number"}


def _between(low: float, high: float) -> dict[str, Any]:
    return {"type": "number", "minimum": low, "maximum": high}


def _at_least(low: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": low}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


_MODEL = {"type": "string", "minLength": 1}
_METADATA = _nullable({"type": "object", "maxProperties": 16,
                       "propertyNames": {"maxLength": 64}})
_STOP = _nullable({"anyOf": [_STR, {"type": "array", "items": _STR, "maxItems": 4}]})
_OPENAI_TOOLS = {"type": "array", "items": {
    "type": "object", "required": ["type"],
    "properties": {"type": _STR,
                   "function": {"type": "object", "required": ["name"],
                                "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 64},
                                               "description": _STR, "parameters": _OBJ, "strict": _BOOL}}}}}
_STREAM_OPTIONS = _nullable({"type": "object", "properties": {"include_usage": _BOOL}})
_SAMPLING = {
    "temperature": _nullable(_between(0, 2)),
    "top_p": _nullable(_between(0, 1)),
    "presence_penalty": _nullable(_between(-2, 2)),
    "frequency_penalty": _nullable(_between(-2, 2)),
    "n": _nullable({"type": "integer", "minimum": 1, "maximum": 128}),
    "seed": _nullable(_INT),
    "stop": _STOP,
    "stream": _nullable(_BOOL),
    "stream_options": _STREAM_OPTIONS,
    "user": _STR,
    "metadata": _METADATA,
    "logit_bias": _nullable(_OBJ),
}

CHAT = {
    "type": "object", "required": ["model", "messages"],
    "properties": {
        **_SAMPLING, "model": _MODEL,
        "messages": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["role"],
            "properties": {"role": {"enum": ["system", "developer", "user", "assistant", "tool", "function"]},
                           "name": _STR, "tool_call_id": _STR, "tool_calls": _nullable({"type": "array"})}}},
        "max_tokens": _nullable(_at_least(1)),
        "max_completion_tokens": _nullable(_at_least(1)),
        "logprobs": _nullable(_BOOL),
        "top_logprobs": _nullable({"type": "integer", "minimum": 0, "maximum": 20}),
        "tools": _OPENAI_TOOLS,
        "tool_choice": {"anyOf": [{"enum": ["none", "auto", "required"]}, _OBJ]},
        "parallel_tool_calls": _BOOL,
        "response_format": {"type": "object", "required": ["type"], "properties": {"type": _STR}},
        "store": _nullable(_BOOL),
    },
}

COMPLETION = {
    "type": "object", "required": ["model", "prompt"],
    "properties": {
        **_SAMPLING, "model": _MODEL,
        "prompt": {"anyOf": [_STR, {"type": "array", "minItems": 1}]},
        "max_tokens": _nullable(_at_least(0)),
        "best_of": _nullable({"type": "integer", "minimum": 1, "maximum": 20}),
        "echo": _nullable(_BOOL),
        "logprobs": _nullable({"type": "integer", "minimum": 0, "maximum": 5}),
        "suffix": _nullable(_STR),
    },
}

EMBEDDING = {
    "type": "object", "required": ["model", "input"],
    "properties": {
        "model": _MODEL,
        "input": {"anyOf": [_STR, {"type": "array", "minItems": 1, "maxItems": 2048}]},
        "encoding_format": {"enum": ["float", "base64"]},
        "dimensions": _at_least(1),
        "user": _STR,
        "metadata": _METADATA,
    },
}

_ANTHROPIC_BLOCK = {"type": "object", "required": ["type"], "properties": {"type": _STR}}
_ANTHROPIC_CONTENT = {"anyOf": [_STR, {"type": "array", "items": _ANTHROPIC_BLOCK}]}
#: A custom tool (no `type`, or type "custom") needs a name and an input_schema; Anthropic's own
#: server tools (web search and the rest) carry a `type` of their own and a name.
_ANTHROPIC_TOOL = {
    "type": "object", "required": ["name"],
    "properties": {"name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,128}$"},
                   "description": _STR, "type": _STR,
                   "input_schema": {"type": "object", "properties": {"type": {"const": "object"}}}},
    "if": {"anyOf": [{"not": {"required": ["type"]}}, {"properties": {"type": {"const": "custom"}}}]},
    "then": {"required": ["name", "input_schema"]},
}
_ANTHROPIC_COMMON = {
    "model": _MODEL,
    "messages": {"type": "array", "items": {
        "type": "object", "required": ["role", "content"],
        # system: Claude Code puts system turns among its messages (after the first), as Anthropic's API takes
        "properties": {"role": {"enum": ["user", "assistant", "system"]}, "content": _ANTHROPIC_CONTENT}}},
    "system": {"anyOf": [_STR, {"type": "array", "items": _ANTHROPIC_BLOCK}]},
    "tools": {"type": "array", "items": _ANTHROPIC_TOOL},
    "tool_choice": {"type": "object", "required": ["type"],
                    "properties": {"type": {"enum": ["auto", "any", "tool", "none"]}, "name": _STR}},
}

MESSAGES = {
    "type": "object", "required": ["model", "messages", "max_tokens"],
    "properties": {
        **_ANTHROPIC_COMMON,
        "max_tokens": _at_least(1),
        "temperature": _between(0, 1),
        "top_p": _between(0, 1),
        "top_k": _at_least(0),
        "stream": _BOOL,
        "stop_sequences": {"type": "array", "items": _STR},
        "metadata": {"type": "object", "properties": {"user_id": _nullable(_STR)}},
    },
}

COUNT_TOKENS = {"type": "object", "required": ["model", "messages"], "properties": dict(_ANTHROPIC_COMMON)}

RESPONSES = {
    "type": "object", "required": ["model"],
    "properties": {
        "model": _MODEL,
        "input": {"anyOf": [_STR, {"type": "array", "items": {"anyOf": [_STR, _OBJ]}}]},
        "instructions": _nullable(_STR),
        "max_output_tokens": _nullable(_at_least(16)),
        "temperature": _nullable(_between(0, 2)),
        "top_p": _nullable(_between(0, 1)),
        "stream": _nullable(_BOOL),
        "store": _nullable(_BOOL),
        "previous_response_id": _nullable(_STR),
        "tools": {"type": "array", "items": {"type": "object", "required": ["type"], "properties": {"type": _STR}}},
        "parallel_tool_calls": _nullable(_BOOL),
        "metadata": _METADATA,
        "user": _STR,
    },
}

BATCH = {
    "type": "object", "required": ["input_file_id", "endpoint", "completion_window"],
    "properties": {
        "input_file_id": {"type": "string", "minLength": 1},
        "endpoint": _STR,
        "completion_window": _STR,
        "metadata": _nullable({"type": "object", "maxProperties": 16, "propertyNames": {"maxLength": 64},
                               "additionalProperties": {"type": "string", "maxLength": 512}}),
    },
}

_TEXTS = {"anyOf": [_STR, {"type": "array", "minItems": 1, "maxItems": 2048, "items": _STR}]}
#: /v1/rerank, as vLLM and llama-server take it: documents are texts (or {"text": ...}, as Cohere's).
RERANK = {
    "type": "object", "required": ["model", "query", "documents"],
    "properties": {
        "model": _MODEL, "query": _STR,
        "documents": {"type": "array", "minItems": 1, "maxItems": 2048, "items": {"anyOf": [
            _STR, {"type": "object", "required": ["text"], "properties": {"text": _STR}}]}},
        "top_n": _nullable(_at_least(0)),
        "return_documents": _nullable(_BOOL),
        "user": _STR,
    },
}
#: /v1/score, as vLLM takes it: text_1 scored against each of text_2 (or pair by pair).
SCORE = {
    "type": "object", "required": ["model", "text_1", "text_2"],
    "properties": {"model": _MODEL, "text_1": _TEXTS, "text_2": _TEXTS, "user": _STR},
}
#: /v1/moderations: text (or OpenAI's parts, of which the text is read); the model is optional.
MODERATION = {
    "type": "object", "required": ["input"],
    "properties": {
        "model": _MODEL,
        "input": {"anyOf": [_STR, {"type": "array", "minItems": 1, "maxItems": 256, "items": {"anyOf": [
            _STR, {"type": "object", "required": ["type"], "properties": {"type": _STR, "text": _STR}}]}}]},
    },
}
#: /v1/audio/transcriptions and /translations: the form's fields other than the file, as text
#: (numbers and booleans read from it).
AUDIO = {
    "type": "object", "required": ["model"],
    "properties": {
        "model": _MODEL, "language": _STR, "prompt": _STR,
        "response_format": {"enum": ["json", "text", "srt", "verbose_json", "vtt"]},
        "temperature": _between(0, 1),
        "stream": _BOOL,
    },
}

MEMORY_NOTE = {
    "type": "object", "required": ["text"],
    "properties": {"text": _STR, "tags": _nullable({"type": "array", "items": _STR})},
}

#: operation -> its schema; the names are the ones `read_json_body` is called with.
SCHEMAS: dict[str, dict[str, Any]] = {
    "chat": CHAT, "completion": COMPLETION, "embedding": EMBEDDING,
    "messages": MESSAGES, "count_tokens": COUNT_TOKENS, "responses": RESPONSES,
    "batch": BATCH, "memory_note": MEMORY_NOTE,
    "rerank": RERANK, "score": SCORE, "moderation": MODERATION, "audio": AUDIO,
}


@attrs.frozen
class Problem:
    """What is wrong with a body: a sentence, the field (dotted, with [i] for items) and a code."""

    message: str
    param: str | None
    code: str = "invalid_request"


@functools.cache
def _validator(operation: str) -> jsonschema.protocols.Validator:
    schema = SCHEMAS[operation]
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


@functools.cache
def _fits(operation: str) -> Callable[[dict[str, Any]], bool]:
    """Whether a body fits `operation`'s schema, by the schema compiled to Python (fastjsonschema): some 30
    times faster than walking it, which a body that fits (nearly every one) is all that is asked of. A body
    it refuses is walked by jsonschema all the same, whose error names the field, so a refusal reads as it
    did; only a body both find fitting skips the walk (tests/router/test_request_schemas_fast.py compares
    them on bodies of every operation)."""
    validate = fastjsonschema.compile(SCHEMAS[operation])

    def fits(body: dict[str, Any]) -> bool:
        try:
            validate(body)
        except fastjsonschema.JsonSchemaException:
            return False
        return True

    return fits


def _field(path) -> str | None:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def problem_in(operation: str, body: dict[str, Any]) -> Problem | None:
    """The first problem `body` has as a request of `operation`, or None when it fits."""
    if _fits(operation)(body):
        return None
    error = best_match(_validator(operation).iter_errors(body))
    if error is None:
        return None
    field = _field(error.absolute_path)
    kind, want = error.validator, error.validator_value
    if kind == "required":
        missing = next((name for name in want if isinstance(error.instance, dict) and name not in error.instance),
                       want[0])
        field = f"{field}.{missing}" if field else missing
        if field == "model":
            return Problem("name a model in `model`; GET /v1/models lists the ones your key may use", field,
                           "missing_model")
        return Problem(f"{field}: required; the request must give it", field, "missing_required_parameter")
    got = _shown(error.instance)
    if kind == "type":
        types = want if isinstance(want, list) else [want]
        sentence = f"expected {' or '.join(types)}, got {got}"
    elif kind == "minimum":
        sentence = f"must be at least {want}, got {got}"
    elif kind == "maximum":
        sentence = f"must be at most {want}, got {got}"
    elif kind == "enum":
        sentence = f"must be one of {', '.join(repr(v) for v in want)}, got {got}"
    elif kind in ("minItems", "minLength"):
        sentence = "must not be empty" if want == 1 else f"needs at least {want} items, got {got}"
    elif kind in ("maxItems", "maxProperties"):
        sentence = f"has more than {want} items"
    elif kind == "maxLength":
        sentence = f"is longer than {want} characters"
    elif kind == "pattern":
        sentence = f"{got} does not match {want}"
    else:  # anyOf, const and the rest: jsonschema's own sentence, shortened
        sentence = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return Problem(f"{field or 'body'}: {sentence}", field, "invalid_value")


__all__ = ["SCHEMAS", "Problem", "problem_in"]
