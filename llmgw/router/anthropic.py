"""Anthropic's Messages API over chat completions: the request one way, the answer the other.

`to_chat(body)` turns a Messages request into a chat completion: the
system prompt (text or blocks) becomes the first message, images become
`image_url` parts, `tool_use` blocks become `tool_calls` and `tool_result`
blocks `tool` messages, tools and tool_choice are renamed, stop_sequences
become `stop`. `message_from_chat` turns the engine's whole answer into a
Message; `MessageEvents` turns its stream into Anthropic's event sequence:

    message_start, ping,
    (content_block_start, content_block_delta…, content_block_stop) per block,
    message_delta (stop_reason, usage), message_stop

What a chat completion has no room for (thinking, cache_control, citations,
server tools, container and service settings) is left out. Anthropic
counts `input_tokens` without the tokens read from a cache; those are
`cache_read_input_tokens`, so the two add up to the engine's prompt tokens.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from llmgw.router.dialects import TranslatingRelay, chunk_usage, sse_event
from llmgw.router.errors import GatewayError, bad_request, dumps, loads
from llmgw.router.sse import SSERelay

#: Anthropic's error type for each status; 503 (no replica, no room) is Anthropic's 529 overloaded_error.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
OVERLOADED = 529

#: finish_reason of a chat completion → stop_reason of a Message.
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def new_message_id() -> str:
    return "msg_" + secrets.token_hex(12)


#: Tool call id prefixes of engines and of OpenAI, renamed to Anthropic's `toolu_`.
_CALL_PREFIXES = ("chatcmpl-tool-", "call_")


def tool_use_id(value: Any) -> str:
    """A chat tool call's id as Anthropic writes a tool_use block's: `toolu_…` (the suffix kept, so the
    client's tool_result names the same call), a new one when the engine gave none."""
    if not isinstance(value, str) or not value:
        return "toolu_" + secrets.token_hex(12)
    if value.startswith("toolu_"):
        return value
    for prefix in _CALL_PREFIXES:
        if value.startswith(prefix):
            return "toolu_" + value[len(prefix):]
    return "toolu_" + value


# ---------------------------------------------------------------- errors


def error_status(status: int) -> int:
    return OVERLOADED if status == 503 else status


def error_payload(status: int, message: str) -> bytes:
    """`{"type": "error", "error": {"type", "message"}}` for a status (after `error_status`)."""
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return dumps({"type": "error", "error": {"type": kind, "message": message}})


def engine_error_message(raw: bytes) -> str:
    """The message in an engine's OpenAI-shaped error answer, else a few of its words."""
    try:
        body = loads(raw)
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(body.get("message"), str):
            return body["message"]
    return raw[:300].decode("utf-8", "replace") or "the engine refused the request"


# ---------------------------------------------------------------- the request


def to_chat(body: dict) -> dict:
    """The chat-completion body for a Messages request; a 400 for a malformed one."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise bad_request("messages: a list of messages is required", param="messages")
    chat: dict[str, Any] = {"model": body.get("model"), "messages": [*_system(body.get("system"))]}
    for i, message in enumerate(messages):
        chat["messages"].extend(_message(message, f"messages[{i}]"))
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > 0:
        chat["max_tokens"] = max_tokens
    for name in ("temperature", "top_p", "top_k"):
        if isinstance(body.get(name), (int, float)) and not isinstance(body.get(name), bool):
            chat[name] = body[name]
    stops = body.get("stop_sequences")
    if isinstance(stops, list) and stops:
        chat["stop"] = [s for s in stops if isinstance(s, str) and s]
    tools = [t for t in (_tool(t) for t in body.get("tools") or ()) if t is not None]
    if tools:
        chat["tools"] = tools
        choice, parallel = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            chat["tool_choice"] = choice
        if parallel is not None:
            chat["parallel_tool_calls"] = parallel
    if body.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str) and metadata["user_id"]:
        chat["user"] = metadata["user_id"]
    return chat


def _system(system: Any) -> list[dict]:
    if isinstance(system, str):
        return [{"role": "system", "content": system}] if system else []
    if isinstance(system, list):
        text = "\n\n".join(b["text"] for b in system
                           if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))
        return [{"role": "system", "content": text}] if text else []
    if system is None:
        return []
    raise bad_request("system: a string or a list of text blocks", param="system")


def _message(message: Any, where: str) -> list[dict]:
    """One Anthropic message as chat messages: tool results become `tool` messages first."""
    if not isinstance(message, dict):
        raise bad_request(f"{where}: a message is an object with a role and content", param=where)
    role = message.get("role")
    content = message.get("content")
    if role not in ("user", "assistant", "system"):
        raise bad_request(f"{where}.role: user or assistant, got {role!r}", param=f"{where}.role")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise bad_request(f"{where}.content: a string or a list of content blocks", param=f"{where}.content")
    if role == "assistant":
        return [_assistant(content)]
    out: list[dict] = []
    parts: list[dict] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "tool_result":
            text, images = _tool_result(block.get("content"), bool(block.get("is_error")))
            out.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id") or ""), "content": text})
            parts.extend(images)
        else:
            part = _part(block)
            if part is not None:
                parts.append(part)
    if parts:
        out.append({"role": role, "content": _content(parts)})
    return out


def _assistant(blocks: list) -> dict:
    texts, calls = [], []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append({"id": str(block.get("id") or "toolu_" + secrets.token_hex(12)), "type": "function",
                          "function": {"name": str(block.get("name") or ""),
                                       "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False)}})
        # thinking, redacted_thinking and server tool blocks have no chat equivalent
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


def _part(block: dict) -> dict | None:
    """A user content block as a chat content part; None for what has no equivalent."""
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return {"type": "text", "text": block["text"]}
    if kind == "image":
        url = _image_url(block.get("source"))
        return {"type": "image_url", "image_url": {"url": url}} if url else None
    if kind == "document":
        source = block.get("source")
        if isinstance(source, dict) and source.get("type") == "text" and isinstance(source.get("data"), str):
            return {"type": "text", "text": source["data"]}
    return None


def _image_url(source: Any) -> str | None:
    if not isinstance(source, dict):
        return None
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        return f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return source["url"]
    return None  # a file id: there are no files here


def _tool_result(content: Any, is_error: bool) -> tuple[str, list[dict]]:
    """A tool result's text; its images go to the user message after the tool messages
    (a chat `tool` message holds text only)."""
    if isinstance(content, str):
        text, images = content, []
    else:
        texts, images = [], []
        for block in content if isinstance(content, list) else ():
            part = _part(block) if isinstance(block, dict) else None
            if part is None:
                continue
            if part["type"] == "text":
                texts.append(part["text"])
            else:
                images.append(part)
        text = "\n".join(texts)
    return (f"Error: {text}" if is_error else text), images


def _content(parts: list[dict]) -> str | list[dict]:
    """Text alone as a string (every chat template reads that), else the parts."""
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _tool(tool: Any) -> dict | None:
    """A client tool as a chat function; Anthropic's own server tools (no input_schema) are left out."""
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        return None
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        return None
    function: dict[str, Any] = {"name": tool["name"], "parameters": schema}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> tuple[Any, bool | None]:
    if not isinstance(choice, dict):
        return None, None
    parallel = False if choice.get("disable_parallel_tool_use") is True else None
    kind = choice.get("type")
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", None
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    return None, parallel


# ---------------------------------------------------------------- the answer


def stop_reason(finish: Any, matched: Any, stop_sequences: list[str], called: bool) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) for a choice's finish_reason and, where the engine says it
    (vLLM's `stop_reason`), the stop string that ended it."""
    if called and finish in ("stop", "tool_calls", "function_call", None):
        return "tool_use", None
    if finish == "stop" and isinstance(matched, str) and matched in stop_sequences:
        return "stop_sequence", matched
    return STOP_REASONS.get(finish, "end_turn"), None


def usage_of(usage: Any) -> dict:
    counts = chunk_usage(usage) or (0, 0, 0)
    prompt, completion, cached = counts
    return {"input_tokens": max(0, prompt - cached), "output_tokens": completion,
            "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}


def tool_input(arguments: Any) -> dict:
    """A tool call's arguments as the object Anthropic's `input` is; {} for what is not one."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def message_from_chat(answer: dict, model: str, stop_sequences: list[str]) -> dict:
    """A Message for the engine's whole chat completion (its first choice)."""
    choices = answer.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    content: list[dict] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    calls = [c for c in message.get("tool_calls") or () if isinstance(c, dict)]
    for call in calls:
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        content.append({"type": "tool_use", "id": tool_use_id(call.get("id")),
                        "name": str(function.get("name") or ""), "input": tool_input(function.get("arguments"))})
    reason, sequence = stop_reason(choice.get("finish_reason"), choice.get("stop_reason"), stop_sequences,
                                   bool(calls))
    return {"id": new_message_id(), "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": sequence, "usage": usage_of(answer.get("usage"))}


class MessageEvents(TranslatingRelay):
    """Anthropic's stream events for a chat-completion stream.

    Blocks are written one after another: text, then each tool call, as the
    engine sends them (engines send a call's pieces in order, one call after
    another). The token counts are known only at the end, so message_start
    says 0 and message_delta carries them all.
    """

    def __init__(self, inner: SSERelay, model: str, stop_sequences: list[str]) -> None:
        super().__init__(inner)
        self.model = model
        self.stop_sequences = stop_sequences
        self.started = False
        self.index = -1  # the open block's index; -1: none open
        self.open_kind = ""  # "text" or "tool_use"
        self.tools: dict[int, int] = {}  # the chunk's tool call index → block index
        self.called = False
        self.finish_reason: Any = None
        self.matched: Any = None

    def _start(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        message = {"id": new_message_id(), "type": "message", "role": "assistant", "model": self.model,
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": 0, "output_tokens": 0}}
        return (sse_event("message_start", dumps({"type": "message_start", "message": message}))
                + sse_event("ping", b'{"type":"ping"}'))

    def _close_block(self) -> bytes:
        if self.index < 0 or not self.open_kind:
            return b""
        self.open_kind = ""
        return sse_event("content_block_stop", dumps({"type": "content_block_stop", "index": self.index}))

    def _open_block(self, kind: str, block: dict) -> bytes:
        out = self._close_block()
        self.index += 1
        self.open_kind = kind
        return out + sse_event("content_block_start", dumps(
            {"type": "content_block_start", "index": self.index, "content_block": block}))

    def _delta(self, index: int, delta: dict) -> bytes:
        return sse_event("content_block_delta", dumps({"type": "content_block_delta", "index": index,
                                                       "delta": delta}))

    def on_chunk(self, chunk: dict) -> bytes:
        out = [self._start()]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # a Message has one answer
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                if self.open_kind != "text":
                    out.append(self._open_block("text", {"type": "text", "text": ""}))
                out.append(self._delta(self.index, {"type": "text_delta", "text": text}))
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    out.append(self._tool_piece(call))
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
                self.matched = choice.get("stop_reason")
        return b"".join(out)

    def _tool_piece(self, call: dict) -> bytes:
        out = b""
        position = call.get("index", 0)
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        if position not in self.tools:
            self.called = True
            block = {"type": "tool_use", "id": tool_use_id(call.get("id")),
                     "name": str(function.get("name") or ""), "input": {}}
            out = self._open_block("tool_use", block)
            self.tools[position] = self.index
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            out += self._delta(self.tools[position], {"type": "input_json_delta", "partial_json": arguments})
        return out

    def finish(self) -> bytes:
        reason, sequence = stop_reason(self.finish_reason, self.matched, self.stop_sequences, self.called)
        usage = usage_of(self.inner.usage)
        if not usage["output_tokens"] and not self.inner.usage:
            usage["output_tokens"] = max(0, self.inner.events)  # an engine that gave no counts
        return b"".join((
            self._start(), self._close_block(),
            sse_event("message_delta", dumps({"type": "message_delta",
                                              "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                              "usage": usage})),
            sse_event("message_stop", b'{"type":"message_stop"}'),
        ))

    def on_engine_error(self, error: dict) -> bytes:
        message = error.get("message") if isinstance(error.get("message"), str) else "the engine failed"
        return self._start() + sse_event("error", error_payload(500, message))

    def error_event(self, error: GatewayError) -> bytes:
        self.finished = True
        return self._start() + sse_event("error", error_payload(error_status(error.status), error.message))
