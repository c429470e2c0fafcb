"""Anthropic-shaped providers (`endpoints[].api: anthropic`): the pipeline's chat completion sent as a
Messages request, and the answer read back as a chat completion.

The pipeline speaks OpenAI's chat completions to every replica. For a
replica whose API is Anthropic's, `llmgw.router.proxy.Upstream.open` asks
this module for the request (`request`: the body translated, the path
`/messages`, the headers `x-api-key` and `anthropic-version`) and wraps the
answer (`wrap`), so what the pipeline reads is a chat completion, whole or
as a stream of chunks, whichever client API asked (a client of
`/v1/messages` then has its answer translated back by
llmgw.router.anthropic, the same as from any engine).

Request: system and developer messages become `system`; tool results
become `tool_result` blocks of a user turn; assistant tool calls become
`tool_use` blocks; image parts become image blocks; `stop` becomes
`stop_sequences`; `max_tokens` (required by Anthropic) defaults to
DEFAULT_MAX_TOKENS; a temperature above Anthropic's 1 is sent as 1.
Answer: text blocks become `content`, tool_use blocks `tool_calls` (ids
`call_…`), stop_reason a finish_reason, and the usage adds the cache's
reads and writes to the prompt tokens, as OpenAI counts them.
"""

from __future__ import annotations

import json
import time
from typing import Any

from llmgw.router.anthropic import tool_input
from llmgw.router.errors import GatewayError, dumps, error_body, loads

#: The Messages API version asked for.
ANTHROPIC_VERSION = "2023-06-01"
#: Answer tokens asked for when the chat request sets none (Anthropic requires a number).
DEFAULT_MAX_TOKENS = 4096
#: stop_reason of a Message -> finish_reason of a chat completion.
FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                  "pause_turn": "stop", "refusal": "content_filter"}
_TOOL_ID_PREFIXES = ("toolu_", "srvtoolu_")


def request_headers(api_key: Any) -> dict[str, str]:
    """The headers an Anthropic provider reads: its key and the API version."""
    headers = {"anthropic-version": ANTHROPIC_VERSION}
    if api_key is not None:
        headers["x-api-key"] = api_key.reveal()
    return headers


def request(body: bytes, path: str) -> tuple[bytes, str]:
    """The Messages request and its path for the pipeline's chat-completion `body` at `path`."""
    if path != "/chat/completions":
        raise GatewayError(400, "unsupported_endpoint",
                           f"this model is served by an Anthropic-shaped provider, which answers chat only "
                           f"(/v1/chat/completions, /v1/messages, /v1/responses), not {path}")
    return dumps(to_messages(loads(body))), "/messages"


def to_messages(chat: dict) -> dict:
    """A chat-completion body as an Anthropic Messages request."""
    system: list[str] = []
    turns: list[dict] = []
    for message in chat.get("messages") or ():
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role in ("system", "developer"):
            text = _text(message.get("content"))
            if text:
                system.append(text)
        elif role in ("tool", "function"):
            block = {"type": "tool_result", "tool_use_id": _tool_use_id(message.get("tool_call_id")),
                     "content": _text(message.get("content"))}
            _add(turns, "user", [block])
        elif role == "assistant":
            blocks = _blocks(message.get("content"))
            for call in message.get("tool_calls") or ():
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict):
                    blocks.append({"type": "tool_use", "id": _tool_use_id(call.get("id")),
                                   "name": str(function.get("name") or ""), "input": tool_input(function.get("arguments"))})
            if blocks:
                _add(turns, "assistant", blocks)
        else:
            _add(turns, "user", _blocks(message.get("content")) or [{"type": "text", "text": ""}])
    out: dict[str, Any] = {"model": chat.get("model"), "messages": turns}
    if system:
        out["system"] = "\n\n".join(system)
    limit = chat.get("max_completion_tokens") or chat.get("max_tokens")
    out["max_tokens"] = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 \
        else DEFAULT_MAX_TOKENS
    temperature = chat.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
        out["temperature"] = min(1.0, max(0.0, float(temperature)))
    for name in ("top_p", "top_k"):
        if isinstance(chat.get(name), (int, float)) and not isinstance(chat.get(name), bool):
            out[name] = chat[name]
    stop = chat.get("stop")
    stops = [stop] if isinstance(stop, str) else (
        [s for s in stop if isinstance(s, str)] if isinstance(stop, list) else [])
    if [s for s in stops if s.strip()]:
        out["stop_sequences"] = [s for s in stops if s.strip()]
    tools = [_tool(t) for t in chat.get("tools") or () if isinstance(t, dict)]
    tools = [t for t in tools if t is not None]
    if tools:
        out["tools"] = tools
        choice = _tool_choice(chat.get("tool_choice"), chat.get("parallel_tool_calls"))
        if choice is not None:
            out["tool_choice"] = choice
    if chat.get("stream") is True:
        out["stream"] = True
    if isinstance(chat.get("user"), str) and chat["user"]:
        out["metadata"] = {"user_id": chat["user"]}
    return out


def _add(turns: list[dict], role: str, blocks: list[dict]) -> None:
    """Anthropic's turns alternate: consecutive ones of one role are one turn."""
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": list(blocks)})


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content
                         if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str))
    return ""


def _blocks(content: Any) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"]})
        elif part.get("type") == "image_url":
            url = part.get("image_url", {}).get("url") if isinstance(part.get("image_url"), dict) else None
            if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
                media, data = url[5:].split(";base64,", 1)
                out.append({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}})
            elif isinstance(url, str):
                out.append({"type": "image", "source": {"type": "url", "url": url}})
    return out


def _tool_use_id(value: Any) -> str:
    """A chat tool call id as a tool_use id: Anthropic takes letters, digits, _ and -."""
    text = value if isinstance(value, str) and value else "none"
    if text.startswith("call_"):
        text = "toolu_" + text[5:]
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in text)


def _tool(tool: dict) -> dict | None:
    function = tool.get("function")
    if tool.get("type") != "function" or not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return None
    schema = function.get("parameters") if isinstance(function.get("parameters"), dict) else {}
    out: dict[str, Any] = {"name": function["name"], "input_schema": {"type": "object", **schema}}
    if isinstance(function.get("description"), str):
        out["description"] = function["description"]
    return out


def _tool_choice(choice: Any, parallel: Any) -> dict | None:
    out: dict[str, Any] | None = None
    if choice == "auto":
        out = {"type": "auto"}
    elif choice == "required":
        out = {"type": "any"}
    elif choice == "none":
        return {"type": "none"}
    elif isinstance(choice, dict) and isinstance((choice.get("function") or {}).get("name"), str):
        out = {"type": "tool", "name": choice["function"]["name"]}
    if parallel is False:
        out = {**(out or {"type": "auto"}), "disable_parallel_tool_use": True}
    return out


# ---------------------------------------------------------------- the answer


def call_id(value: Any) -> str:
    """A tool_use id as an OpenAI tool call id (`call_…`, the suffix kept)."""
    text = value if isinstance(value, str) else ""
    for prefix in _TOOL_ID_PREFIXES:
        if text.startswith(prefix):
            return "call_" + text[len(prefix):]
    return "call_" + text


def usage_of(usage: Any) -> dict:
    """A Message's usage as OpenAI's: the prompt counts the cache's reads and writes too."""
    usage = usage if isinstance(usage, dict) else {}
    count = {k: v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0 for k, v in usage.items()}
    read, written = count.get("cache_read_input_tokens", 0), count.get("cache_creation_input_tokens", 0)
    prompt = count.get("input_tokens", 0) + read + written
    completion = count.get("output_tokens", 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": read}}


def chat_from_message(message: dict) -> dict:
    """A whole Message as a chat completion."""
    texts, calls = [], []
    for block in message.get("content") or ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append({"id": call_id(block.get("id")), "type": "function",
                          "function": {"name": str(block.get("name") or ""),
                                       "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False)}})
    chat_message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None,
                                    "refusal": None, "annotations": []}
    if calls:
        chat_message["tool_calls"] = calls
    return {"id": "chatcmpl-" + str(message.get("id") or "").removeprefix("msg_"), "object": "chat.completion",
            "created": int(time.time()), "model": message.get("model") or "",
            "choices": [{"index": 0, "message": chat_message, "logprobs": None,
                         "finish_reason": FINISH_REASONS.get(message.get("stop_reason"), "stop")}],
            "usage": usage_of(message.get("usage"))}


def error_from_anthropic(status: int, raw: bytes) -> bytes:
    """An Anthropic error answer in OpenAI's shape (the provider's message kept)."""
    try:
        body = loads(raw)
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) and isinstance(error.get("message"), str) else (
        raw[:300].decode("utf-8", "replace") or f"the provider answered {status}")
    kind = error.get("type") if isinstance(error, dict) and isinstance(error.get("type"), str) else None
    return error_body(message, kind or "invalid_request_error", kind)


class ChunkWriter:
    """Anthropic's stream events in, chat-completion chunks (server-sent events) out."""

    def __init__(self) -> None:
        self.id = "chatcmpl-stream"
        self.model = ""
        self.created = int(time.time())
        self.usage: dict[str, int] = {}
        self.blocks: dict[int, int] = {}  # content block index -> tool call index
        self.finish: str | None = None
        self.done = False

    def _chunk(self, delta: dict, finish: str | None = None) -> bytes:
        return b"data: " + dumps({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                                  "model": self.model, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                                    "finish_reason": finish}]}) + b"\n\n"

    def event(self, event: dict) -> bytes:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") if isinstance(event.get("message"), dict) else {}
            self.id = "chatcmpl-" + str(message.get("id") or "").removeprefix("msg_")
            self.model = str(message.get("model") or "")
            self.usage.update({k: v for k, v in (message.get("usage") or {}).items() if isinstance(v, int)})
            return self._chunk({"role": "assistant", "content": ""})
        if kind == "content_block_start":
            block = event.get("content_block") if isinstance(event.get("content_block"), dict) else {}
            if block.get("type") == "tool_use":
                position = self.blocks[event.get("index", 0)] = len(self.blocks)
                return self._chunk({"tool_calls": [{"index": position, "id": call_id(block.get("id")),
                                                    "type": "function", "function": {
                                                        "name": str(block.get("name") or ""), "arguments": ""}}]})
            return b""
        if kind == "content_block_delta":
            delta = event.get("delta") if isinstance(event.get("delta"), dict) else {}
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                return self._chunk({"content": delta["text"]})
            if delta.get("type") == "input_json_delta" and event.get("index", 0) in self.blocks:
                return self._chunk({"tool_calls": [{"index": self.blocks[event.get("index", 0)], "function": {
                    "arguments": str(delta.get("partial_json") or "")}}]})
            return b""
        if kind == "message_delta":
            delta = event.get("delta") if isinstance(event.get("delta"), dict) else {}
            self.finish = FINISH_REASONS.get(delta.get("stop_reason"), "stop")
            self.usage.update({k: v for k, v in (event.get("usage") or {}).items() if isinstance(v, int)})
            return b""
        if kind == "message_stop":
            return self.end()
        if kind == "error":
            self.done = True
            error = event.get("error") if isinstance(event.get("error"), dict) else {}
            return b"data: " + dumps({"error": {"message": str(error.get("message") or "the provider failed"),
                                                "type": str(error.get("type") or "api_error")}}) + b"\n\n"
        return b""  # ping, and events of kinds to come

    def end(self) -> bytes:
        if self.done:
            return b""
        self.done = True
        usage = usage_of(self.usage)
        return (self._chunk({}, self.finish or "stop")
                + b"data: " + dumps({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                                     "model": self.model, "choices": [], "usage": usage}) + b"\n\n"
                + b"data: [DONE]\n\n")


class _TranslatedContent:
    """What the pipeline reads of the answer (`readany`, `read`): chat-completion bytes."""

    def __init__(self, resp: Any, stream: bool) -> None:
        self.resp = resp
        self.stream = stream and resp.status == 200
        self.writer = ChunkWriter()
        self.rest = b""
        self.ended = False

    async def readany(self) -> bytes:
        if not self.stream:
            return await self.read()
        while not self.ended:
            data = await self.resp.content.readany()
            if not data:
                self.ended = True
                return self.writer.end()  # a stream that stopped without message_stop still ends
            out = self._events(data)
            if out:
                return out
        return b""

    def _events(self, data: bytes) -> bytes:
        buf = (self.rest + data).replace(b"\r\n", b"\n")
        *whole, self.rest = buf.split(b"\n\n")
        out = []
        for event in whole:
            payload = b"\n".join(line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:"))
            try:
                value = loads(payload) if payload else None
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(self.writer.event(value))
        if self.writer.done:
            self.ended = True
        return b"".join(out)

    async def read(self, n: int = -1) -> bytes:
        if self.ended:
            return b""
        self.ended = True
        raw = await self.resp.content.read(n)
        if self.resp.status >= 400:
            return error_from_anthropic(self.resp.status, raw)
        try:
            message = loads(raw)
        except ValueError:
            return error_body("the provider's answer was not JSON", "server_error", "upstream_error")
        return dumps(chat_from_message(message)) if isinstance(message, dict) else raw


class TranslatedResponse:
    """An Anthropic provider's answer as the pipeline reads an engine's: status, headers, content."""

    def __init__(self, resp: Any, stream: bool) -> None:
        self._resp = resp
        self.status = resp.status
        self.content = _TranslatedContent(resp, stream)
        kind = "text/event-stream" if self.content.stream else "application/json"
        self.headers = {"Content-Type": kind}

    def release(self) -> None:
        self._resp.release()

    def close(self) -> None:
        self._resp.close()


def wrap(resp: Any, stream: bool) -> TranslatedResponse:
    return TranslatedResponse(resp, stream)


__all__ = ["ANTHROPIC_VERSION", "ChunkWriter", "TranslatedResponse", "chat_from_message", "error_from_anthropic",
           "request", "request_headers", "to_messages", "usage_of", "wrap"]
