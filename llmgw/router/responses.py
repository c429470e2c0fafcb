"""OpenAI's Responses API over chat completions: the request one way, the answer the other.

`to_chat(body, history)` turns a Responses request into a chat completion:
`instructions` become the first (system) message; `input`, text or items,
becomes messages after the conversation it continues (`history`, the
messages kept with `previous_response_id`): message items with
input_text, input_image and output_text parts, `function_call` items
(assistant tool calls) and `function_call_output` items (tool messages).
`text.format` becomes `response_format`, function tools and `tool_choice`
are renamed, `max_output_tokens` becomes `max_tokens`.

`response_from_chat` makes the response object of a whole answer;
`ResponseEvents` makes the Responses stream events of a streamed one.
An answer cut by its length, or stopped by a content filter, is
`status: "incomplete"` with `incomplete_details.reason`
(`max_output_tokens`, `content_filter`).

What has no chat-completion equivalent (hosted tools, reasoning settings,
truncation, include, background, prompt caching keys, item references) is
left out, not refused. Instructions are not carried to a follow-up, as in
OpenAI's API: each request gives its own.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import Any

import attrs

from llmgw.router.dialects import TranslatingRelay, chunk_usage, sse_event
from llmgw.router.errors import GatewayError, bad_request, dumps
from llmgw.router.sse import SSERelay

#: finish_reason → incomplete_details.reason; any other finish completes the response.
INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _id(prefix: str) -> str:
    return prefix + secrets.token_hex(16)


# ---------------------------------------------------------------- the request


@attrs.define
class ResponseDraft:
    """What a response object repeats of its request, and its id from the start."""

    model: str
    id: str = attrs.Factory(lambda: _id("resp_"))
    created_at: int = attrs.Factory(lambda: int(time.time()))
    echo: dict[str, Any] = attrs.Factory(dict)
    store: bool = True

    def envelope(self, status: str, output: list[dict], usage: Any = None, *,
                 incomplete: str | None = None, error: dict | None = None) -> dict:
        out = {
            "id": self.id, "object": "response", "created_at": self.created_at, "status": status,
            "error": error, "incomplete_details": {"reason": incomplete} if incomplete else None,
            "model": self.model, "output": output, **self.echo,
        }
        if usage is not None:  # OpenAI's document has no null usage: left out until it is known
            out["usage"] = usage_of(usage)
        return out


def draft_from(body: dict) -> ResponseDraft:
    text = body.get("text") if isinstance(body.get("text"), dict) else {}
    echo = {
        "instructions": body.get("instructions") if isinstance(body.get("instructions"), str) else None,
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") if isinstance(body.get("metadata"), dict) else {},
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": body.get("store") is not False,
        "temperature": body.get("temperature"),
        "text": {"format": text.get("format") if isinstance(text.get("format"), dict) else {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [_echoed_tool(t) for t in body.get("tools") or ()
                  if isinstance(t, dict) and t.get("type") == "function"],
        "top_p": body.get("top_p"),
        "truncation": "disabled",
    }
    if isinstance(body.get("user"), str):  # OpenAI's document has it a string, never null: left out when not sent
        echo["user"] = body["user"]
    model = body["model"] if isinstance(body.get("model"), str) else ""
    return ResponseDraft(model=model, echo=echo, store=body.get("store") is not False)


def _echoed_tool(tool: dict) -> dict:
    """A function tool as OpenAI's Response echoes it: every field there, `strict` null when not given."""
    return {"type": "function", "name": tool.get("name"), "description": tool.get("description"),
            "parameters": tool.get("parameters"), **tool,
            "strict": tool["strict"] if isinstance(tool.get("strict"), bool) else None}


def to_chat(body: dict, history: list[dict]) -> tuple[dict, list[dict]]:
    """The chat-completion body, and the conversation to keep (without the instructions)."""
    conversation = [*history, *input_messages(body.get("input"))]
    if not conversation:
        raise bad_request("input: give the text or the items to answer", param="input")
    instructions = body.get("instructions")
    system = [{"role": "system", "content": instructions}] if isinstance(instructions, str) and instructions else []
    chat: dict[str, Any] = {"model": body.get("model"), "messages": [*system, *conversation]}
    limit = body.get("max_output_tokens")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        chat["max_tokens"] = limit
    for name in ("temperature", "top_p"):
        if isinstance(body.get(name), (int, float)) and not isinstance(body.get(name), bool):
            chat[name] = body[name]
    tools = [_tool(t) for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"]
    tools = [t for t in tools if t is not None]
    if tools:
        chat["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            chat["tool_choice"] = choice
        if isinstance(body.get("parallel_tool_calls"), bool):
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    text = body.get("text")
    fmt = _response_format(text.get("format") if isinstance(text, dict) else None)
    if fmt is not None:
        chat["response_format"] = fmt
    if body.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    if isinstance(body.get("user"), str) and body["user"]:
        chat["user"] = body["user"]
    if isinstance(body.get("metadata"), dict) and body["metadata"]:
        chat["metadata"] = body["metadata"]  # recorded on the usage row; the engine does not get it
    return chat, conversation


def input_messages(value: Any) -> list[dict]:
    """`input` (text or items) as chat messages."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise bad_request("input: a string or a list of items", param="input")
    out: list[dict] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise bad_request(f"input[{i}]: an item is an object", param=f"input[{i}]")
        kind = item.get("type")
        if kind in (None, "message") and "role" in item:
            out.append(_message_item(item, f"input[{i}]"))
        elif kind == "function_call":
            call = {"id": str(item.get("call_id") or item.get("id") or _id("call_")), "type": "function",
                    "function": {"name": str(item.get("name") or ""), "arguments": _text(item.get("arguments"))}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)  # one assistant turn: its text and its calls
                if last["content"] == "":
                    last["content"] = None
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": str(item.get("call_id") or ""),
                        "content": _output_text(item.get("output"))})
        # reasoning, item_reference, hosted tool calls and their outputs: no chat equivalent
    return out


def _message_item(item: dict, where: str) -> dict:
    given = item.get("role")
    role = _ROLES.get(given) if isinstance(given, str) else None
    if role is None:
        raise bad_request(f"{where}.role: user, assistant, system or developer, got {item.get('role')!r}",
                          param=f"{where}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise bad_request(f"{where}.content: a string or a list of parts", param=f"{where}.content")
    parts = [p for p in (_part(part) for part in content) if p is not None]
    if role != "user":  # only user messages hold images in chat completions
        return {"role": role, "content": "".join(p["text"] for p in parts if p["type"] == "text")}
    if all(p["type"] == "text" for p in parts):
        return {"role": role, "content": "\n".join(p["text"] for p in parts)}
    return {"role": role, "content": parts}


def _part(part: Any) -> dict | None:
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return {"type": "text", "text": part["refusal"]}
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        image: dict[str, Any] = {"url": part["image_url"]}
        if part.get("detail") in ("low", "high", "auto"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    return None  # input_file, an image by file_id: there are no files here


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(p["text"] for p in (_part(x) for x in output) if p is not None and p["type"] == "text")
    return _text(output)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else json.dumps(value, ensure_ascii=False)


def _tool(tool: dict) -> dict | None:
    if not isinstance(tool.get("name"), str):
        return None
    function: dict[str, Any] = {"name": tool["name"],
                                "parameters": tool.get("parameters") if isinstance(tool.get("parameters"), dict)
                                else {"type": "object", "properties": {}}}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    if isinstance(tool.get("strict"), bool):
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    return None  # hosted tools, allowed_tools: the engine decides


def _response_format(fmt: Any) -> dict | None:
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        schema: dict[str, Any] = {"name": fmt.get("name") if isinstance(fmt.get("name"), str) else "response",
                                  "schema": fmt["schema"]}
        for name in ("strict", "description"):
            if name in fmt:
                schema[name] = fmt[name]
        return {"type": "json_schema", "json_schema": schema}
    return None


# ---------------------------------------------------------------- the answer


def usage_of(usage: Any) -> dict:
    prompt, completion, cached = chunk_usage(usage) or (0, 0, 0)
    # cache_write_tokens: engines keep their prefix cache without charging for writing it
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion}


def _message_item_out(item_id: str, text: str, status: str) -> dict:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {"id": item_id, "type": "function_call", "status": status, "call_id": call_id, "name": name,
            "arguments": arguments}


def assistant_message(text: str, calls: list[dict]) -> dict:
    """The answer as a chat message, for the conversation kept."""
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        message["tool_calls"] = [{"id": c["call_id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
    return message


def response_from_chat(answer: dict, draft: ResponseDraft) -> tuple[dict, dict]:
    """The response object for a whole chat completion, and the answer as a chat message."""
    choices = answer.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    incomplete = INCOMPLETE.get(choice.get("finish_reason"))
    status = "incomplete" if incomplete else "completed"
    output: list[dict] = []
    text = message.get("content") if isinstance(message.get("content"), str) else ""
    if text:
        output.append(_message_item_out(_id("msg_"), text, status))
    calls = []
    for call in message.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        item = _call_item(_id("fc_"), str(call.get("id") or _id("call_")), str(function.get("name") or ""),
                          _text(function.get("arguments")), "completed")
        output.append(item)
        calls.append(item)
    response = draft.envelope(status, output, answer.get("usage") or {}, incomplete=incomplete)
    return response, assistant_message(text, calls)


Done = Callable[[dict, dict], None]


class ResponseEvents(TranslatingRelay):
    """The Responses API's stream events for a chat-completion stream.

    response.created and response.in_progress first; then per output item
    output_item.added, its content (content_part.added, output_text.delta…,
    output_text.done, content_part.done for a message;
    function_call_arguments.delta…, .done for a call) and output_item.done;
    response.completed or response.incomplete last, with the whole output
    and the usage. `on_done(response, assistant_message)` hears of the end.
    """

    def __init__(self, inner: SSERelay, draft: ResponseDraft, on_done: Done | None = None) -> None:
        super().__init__(inner)
        self.draft = draft
        self.on_done = on_done
        self.sequence = 0
        self.started = False
        self.output: list[dict] = []  # items done
        self.open: dict | None = None  # the item being written: {"item", "index", "text"|"arguments"}
        self.calls: dict[int, dict] = {}  # the chunk's tool call index → its open item
        self.text = ""
        self.finish_reason: Any = None

    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return sse_event(kind, dumps(payload))

    def _start(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        response = self.draft.envelope("in_progress", [])
        return (self._event("response.created", response=response)
                + self._event("response.in_progress", response=response))

    def _close(self, status: str = "completed") -> bytes:
        entry, self.open = self.open, None
        if entry is None:
            return b""
        item, index = entry["item"], entry["index"]
        if item["type"] == "message":
            text = entry["text"]
            self.text += text
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            done = _message_item_out(item["id"], text, status)
            out = (self._event("response.output_text.done", item_id=item["id"], output_index=index,
                               content_index=0, text=text, logprobs=[])
                   + self._event("response.content_part.done", item_id=item["id"], output_index=index,
                                 content_index=0, part=part))
        else:
            done = {**item, "arguments": entry["arguments"], "status": "completed"}
            out = self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                              arguments=entry["arguments"], name=item["name"])
        self.output.append(done)
        return out + self._event("response.output_item.done", output_index=index, item=done)

    def _open(self, item: dict, **state: Any) -> bytes:
        out = self._close()
        index = len(self.output)
        self.open = {"item": item, "index": index, **state}
        return out + self._event("response.output_item.added", output_index=index, item=item)

    def on_chunk(self, chunk: dict) -> bytes:
        out = [self._start()]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                if self.open is None or self.open["item"]["type"] != "message":
                    item = {"id": _id("msg_"), "type": "message", "status": "in_progress", "role": "assistant",
                            "content": []}
                    out.append(self._open(item, text=""))
                    out.append(self._event("response.content_part.added", item_id=item["id"],
                                           output_index=self.open["index"], content_index=0,
                                           part={"type": "output_text", "text": "", "annotations": [],
                                                 "logprobs": []}))
                assert self.open is not None
                self.open["text"] += text
                out.append(self._event("response.output_text.delta", item_id=self.open["item"]["id"],
                                       output_index=self.open["index"], content_index=0, delta=text, logprobs=[]))
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    out.append(self._call_piece(call))
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
        return b"".join(out)

    def _call_piece(self, call: dict) -> bytes:
        out = b""
        position = call.get("index", 0)
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        if position not in self.calls:
            item = _call_item(_id("fc_"), str(call.get("id") or _id("call_")), str(function.get("name") or ""),
                              "", "in_progress")
            out = self._open(item, arguments="")
            self.calls[position] = self.open
        entry = self.calls[position]
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments and entry is self.open:
            entry["arguments"] += arguments
            out += self._event("response.function_call_arguments.delta", item_id=entry["item"]["id"],
                               output_index=entry["index"], delta=arguments)
        return out

    def finish(self) -> bytes:
        incomplete = INCOMPLETE.get(self.finish_reason)
        status = "incomplete" if incomplete else "completed"
        out = self._start() + self._close(status)
        response = self.draft.envelope(status, self.output, self.inner.usage or {}, incomplete=incomplete)
        if not self.inner.usage:  # an engine that gave no counts: its chunks, roughly
            response["usage"]["output_tokens"] = response["usage"]["total_tokens"] = max(0, self.inner.events)
        if self.on_done is not None:
            calls = [item for item in self.output if item["type"] == "function_call"]
            self.on_done(response, assistant_message(self.text, calls))
        return out + self._event("response.incomplete" if incomplete else "response.completed", response=response)

    def _failed(self, message: str) -> bytes:
        self.finished = True
        error = {"code": "server_error", "message": message}
        return (self._start()
                + self._event("error", code="server_error", message=message, param=None)
                + self._event("response.failed", response=self.draft.envelope("failed", self.output, error=error)))

    def on_engine_error(self, error: dict) -> bytes:
        message = error.get("message") if isinstance(error.get("message"), str) else "the engine failed"
        return self._failed(message)

    def error_event(self, error: GatewayError) -> bytes:
        return self._failed(error.message)
