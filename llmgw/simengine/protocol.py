"""OpenAI's wire format: reading requests into plans, errors in OpenAI's shape.

Parsing checks what vLLM and OpenAI check and answers the same way: a 400
naming the parameter, a 404 for a model the engine does not serve.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs
from aiohttp import web

from llmgw.simengine.options import SimOptions
from llmgw.simengine.tokens import tokenize

try:  # a faster codec where it is installed; the standard one otherwise
    import orjson

    loads = orjson.loads

    def dumps(value: Any) -> bytes:
        return orjson.dumps(value)

except ImportError:  # pragma: no cover - depends on the environment
    loads = json.loads
    _encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))

    def dumps(value: Any) -> bytes:
        return _encoder.encode(value).encode()


JSON_CONTENT_TYPE = "application/json"


class APIError(Exception):
    """A request the engine refuses, answered as OpenAI answers it."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or ("server_error" if status >= 500 else "invalid_request_error")

    def response(self) -> web.Response:
        body = {"error": {"message": self.message, "type": self.type,
                          "param": self.param, "code": self.code}}
        return web.Response(status=self.status, body=dumps(body), content_type=JSON_CONTENT_TYPE)


def bad(param: str, message: str) -> APIError:
    return APIError(400, message, param=param)


@attrs.define(slots=True)
class Prompt:
    """One prompt as the engine sees it: its text and its tokens."""

    text: str
    tokens: list[str]


@attrs.define(slots=True)
class Plan:
    """What a generation request asks for, checked."""

    kind: str  # "chat" or "completion"
    model: str
    prompts: list[Prompt]
    n: int = 1
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False
    echo: bool = False
    # The function a chat answer calls: {"name", "parameters"}; None for text.
    tool: dict[str, Any] | None = None
    # "json_object", a JSON schema (dict) for json_schema, or None for text.
    json_format: str | dict | None = None
    # The last user message's text: what a model named echo… answers with.
    last_user: str = ""
    # Log probabilities asked for (chat's logprobs true, a completion's logprobs N), and how many
    # alternatives each token lists (top_logprobs; a completion's N).
    logprobs: bool = False
    top_logprobs: int = 0

    @property
    def prompt_tokens(self) -> int:
        return sum(len(p.tokens) for p in self.prompts)


# --- requests ---------------------------------------------------------------

async def read_json(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = loads(raw)
    except ValueError:
        raise APIError(400, "We could not parse the JSON body of your request. The body must "
                            "be a JSON object; see https://platform.openai.com/docs/api-reference.")
    if not isinstance(body, dict):
        raise APIError(400, "The request body must be a JSON object.")
    return body


def served_model(body: dict, options: SimOptions) -> str:
    model = body.get("model")
    if model is None:  # vLLM answers with its model when none is named
        return options.models[0]
    if not isinstance(model, str):
        raise bad("model", "'model' must be a string")
    if model not in options.models:
        raise APIError(404, f"The model `{model}` does not exist.", param="model",
                       code="model_not_found")
    return model


def _int(body: dict, name: str, low: int, high: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (
            high is not None and value > high):
        limit = f"between {low} and {high}" if high is not None else f"{low} or more"
        raise bad(name, f"'{name}' must be an integer {limit}, got {value!r}")
    return value


def _common(body: dict, options: SimOptions, kind: str, prompts: list[Prompt], model: str) -> Plan:
    temperature = body.get("temperature")
    if temperature is not None and (not isinstance(temperature, (int, float)) or temperature < 0):
        raise bad("temperature", f"'temperature' must be a number, 0 or more, got {temperature!r}")
    max_tokens = _int(body, "max_completion_tokens", 0) if kind == "chat" else None
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 0)
    stop = body.get("stop")
    if stop is None:
        stop = ()
    elif isinstance(stop, str):
        stop = (stop,) if stop else ()
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stop = tuple(s for s in stop if s)
    else:
        raise bad("stop", "'stop' must be a string or a list of strings")
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise bad("seed", f"'seed' must be an integer, got {seed!r}")
    stream = bool(body.get("stream"))
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise bad("stream_options", "'stream_options' must be an object")
    if kind == "chat":
        logprobs = body.get("logprobs")
        if logprobs is not None and not isinstance(logprobs, bool):
            raise bad("logprobs", f"'logprobs' must be true or false, got {logprobs!r}")
        top = _int(body, "top_logprobs", 0, 20) or 0
        if top and not logprobs:
            raise bad("top_logprobs", "'top_logprobs' needs 'logprobs' set to true")
    else:
        top = _int(body, "logprobs", 0, 5)
        logprobs = top is not None
        top = top or 0
    return Plan(
        logprobs=bool(logprobs),
        top_logprobs=top,
        kind=kind,
        model=model,
        prompts=prompts,
        n=_int(body, "n", 1, 128) or 1,
        max_tokens=max_tokens,
        stop=stop,
        seed=seed,
        stream=stream,
        include_usage=stream and bool(stream_options.get("include_usage")),
    )


# --- chat -------------------------------------------------------------------

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def _content_text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                kind = part.get("type")
                if kind == "text":
                    parts.append(str(part.get("text", "")))
                else:  # images, audio, files: one marker token each
                    parts.append(f"<|{kind or 'part'}|>")
            else:
                raise bad(where, f"'{where}' parts must be objects")
        return " ".join(parts)
    raise bad(where, f"'{where}' must be a string or a list of parts")


def render_chat(messages: Any, tools: list | None = None) -> str:
    """The prompt a chat template would make of the messages, in our own markers."""
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "Missing required parameter: 'messages' (a non-empty list).")
    out = []
    if tools:
        out.append("<|tools|>\n" + json.dumps(tools, separators=(",", ":")) + "\n")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise bad(f"messages[{i}]", f"'messages[{i}]' must be an object")
        role = message.get("role")
        if role not in _ROLES:
            raise bad(f"messages[{i}].role",
                      f"'messages[{i}].role' must be one of {', '.join(sorted(_ROLES))}, got {role!r}")
        text = _content_text(message.get("content"), f"messages[{i}].content")
        for call in message.get("tool_calls") or ():
            function = (call.get("function") or {}) if isinstance(call, dict) else {}
            text += f" {function.get('name', '')}({function.get('arguments', '')})"
        out.append(f"<|{role}|>\n{text}\n")
    out.append("<|assistant|>\n")
    return "".join(out)


def _chosen_tool(body: dict) -> dict | None:
    tools = body.get("tools")
    if not tools:
        return None
    if not isinstance(tools, list):
        raise bad("tools", "'tools' must be a list")
    functions = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad(f"tools[{i}]", f"'tools[{i}]' must be {{\"type\": \"function\", "
                                     f"\"function\": {{\"name\": ...}}}}")
        functions.append(function)
    choice = body.get("tool_choice", "auto")
    if choice == "none":
        return None
    if choice in ("auto", "required", None):
        asked = _tool_asked_for(body.get("messages"), functions)
        if asked is not None or choice == "auto" or choice is None:
            return asked  # auto: a tool only when the user's last message asks for one, as a model would
        return functions[0]
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        for function in functions:
            if function["name"] == name:
                return function
        raise bad("tool_choice", f"'tool_choice' names the function {name!r}, which is not in 'tools'")
    raise bad("tool_choice", f"'tool_choice' must be none, auto, required or a named function, got {choice!r}")


#: Words of a tool's name that say nothing of what it does; they alone do not ask for it.
_GENERIC = frozenset({"get", "set", "run", "use", "call", "do", "make", "tool", "func", "function", "the"})
_WORD = re.compile(r"[A-Za-z][a-z]*|[0-9]+")
_ASK_ANY = re.compile(r"\b(use|call|run)\s+(a|an|the|your|one)\s+(tool|function)", re.I)


def _name_words(name: str) -> set[str]:
    words = {w.lower() for part in re.split(r"[_\-.\s]+", name) for w in _WORD.findall(part)}
    return {w for w in words if len(w) >= 3 and w not in _GENERIC}


def _tool_asked_for(messages: Any, functions: list[dict]) -> dict | None:
    """The tool the user's last message asks for: one it names (`get_weather`, or a word of its name,
    like "weather"), else the first when it asks for a tool at all ("use a tool"); None for neither,
    or when the last message is not the user's (a tool's result: the model answers it in words)."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return None
    if messages[-1].get("role") != "user":
        return None
    earlier = [m for m in messages if isinstance(m, dict) and m.get("role") != "user"]
    if earlier and earlier[-1].get("role") in ("tool", "function"):
        return None  # a tool's result came back (the user's turn only adds notes to it): answered in words
    try:
        text = _content_text(messages[-1].get("content"), "messages")
    except APIError:
        return None
    lowered = text.lower()
    said = {w.lower() for w in _WORD.findall(text)}
    said |= {w[:-1] for w in said if w.endswith("s")}  # "files" asks for read_file
    for function in functions:
        if function["name"].lower() in lowered:
            return function
    for function in functions:
        if _name_words(function["name"]) & said:
            return function
    return functions[0] if _ASK_ANY.search(text) else None


def _json_format(body: dict) -> str | dict | None:
    fmt = body.get("response_format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise bad("response_format", "'response_format' must be an object")
    kind = fmt.get("type")
    if kind in ("text", None):
        return None
    if kind == "json_object":
        return "json_object"
    if kind == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        return schema if isinstance(schema, dict) else "json_object"
    raise bad("response_format.type",
              f"'response_format.type' must be text, json_object or json_schema, got {kind!r}")


def parse_chat(body: dict, options: SimOptions) -> Plan:
    model = served_model(body, options)
    tools = body.get("tools") or None
    tool = _chosen_tool(body)
    text = render_chat(body.get("messages"), tools)
    plan = _common(body, options, "chat", [Prompt(text, tokenize(text))], model)
    plan.tool = tool
    plan.json_format = None if tool else _json_format(body)
    plan.last_user = _last_user(body.get("messages"))
    return plan


def _last_user(messages: list) -> str:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], dict) and messages[i].get("role") == "user":
            return _content_text(messages[i].get("content"), f"messages[{i}].content")
    return ""


# --- completions ------------------------------------------------------------

def _prompt_list(value: Any, param: str) -> list[Prompt]:
    """A prompt as OpenAI allows it: text, token ids, or a list of either."""
    if isinstance(value, str):
        return [Prompt(value, tokenize(value))]
    if isinstance(value, list) and value:
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [_ids_prompt(value)]
        if all(isinstance(v, str) for v in value):
            return [Prompt(v, tokenize(v)) for v in value]
        if all(isinstance(v, list) and all(isinstance(i, int) for i in v) for v in value):
            return [_ids_prompt(v) for v in value]
    raise bad(param, f"'{param}' must be a string, a list of strings, a list of token ids "
                     f"or a list of lists of token ids")


def _ids_prompt(ids: list[int]) -> Prompt:
    tokens = [f"<{i}>" for i in ids]
    return Prompt(" ".join(tokens), tokens)


def parse_completion(body: dict, options: SimOptions) -> Plan:
    model = served_model(body, options)
    if "prompt" not in body:
        raise bad("prompt", "Missing required parameter: 'prompt'.")
    plan = _common(body, options, "completion", _prompt_list(body["prompt"], "prompt"), model)
    plan.echo = bool(body.get("echo"))
    return plan


# --- embeddings and tokenize --------------------------------------------------

@attrs.define(slots=True)
class EmbeddingPlan:
    model: str
    prompts: list[Prompt]
    encoding_format: str = "float"
    dimensions: int | None = None


def parse_embedding(body: dict, options: SimOptions) -> EmbeddingPlan:
    model = served_model(body, options)
    if "input" not in body:
        raise bad("input", "Missing required parameter: 'input'.")
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise bad("encoding_format", f"'encoding_format' must be float or base64, got {fmt!r}")
    return EmbeddingPlan(
        model=model,
        prompts=_prompt_list(body["input"], "input"),
        encoding_format=fmt,
        dimensions=_int(body, "dimensions", 1, options.embedding_dim),
    )


def parse_tokenize(body: dict, options: SimOptions) -> tuple[str, list[str]]:
    """vLLM's /tokenize: a `prompt`, or chat `messages` rendered as chat requests are."""
    model = served_model(body, options)
    if "messages" in body:
        return model, tokenize(render_chat(body["messages"], body.get("tools")))
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise bad("prompt", "'prompt' (a string) or 'messages' is required")
    return model, tokenize(prompt)
