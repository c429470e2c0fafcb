"""An engine's chat completion in the shape OpenAI's own service answers with.

Engines differ from OpenAI in small ways that strict clients notice: vLLM
names tool calls `chatcmpl-tool-…` where OpenAI's are `call_…`, and a
message may lack `refusal` (OpenAI's document requires it, null when the
model did not refuse) and `annotations` (an empty list). A whole answer is
read and written again only when it has such a gap; a stream's events are
passed on as bytes, their tool call ids renamed in place. A renamed id
keeps the engine's suffix, so every event of one call names it alike.
"""

from __future__ import annotations

from typing import Any

from llmgw.router.errors import dumps, loads

#: vLLM's and SGLang's tool call id prefix, and OpenAI's.
ENGINE_CALL_PREFIX, OPENAI_CALL_PREFIX = "chatcmpl-tool-", "call_"
_ENGINE_ID = b'"' + ENGINE_CALL_PREFIX.encode()
_OPENAI_ID = b'"' + OPENAI_CALL_PREFIX.encode()


def openai_call_id(value: Any) -> Any:
    """A tool call id as OpenAI writes it: `call_…` (an engine's own prefix replaced, its suffix kept)."""
    if isinstance(value, str) and value.startswith(ENGINE_CALL_PREFIX):
        return OPENAI_CALL_PREFIX + value[len(ENGINE_CALL_PREFIX):]
    return value


def stream_bytes(events: bytes) -> bytes:
    """Stream events with engines' tool call ids renamed; nothing else touched."""
    return events.replace(_ENGINE_ID, _OPENAI_ID) if _ENGINE_ID in events else events


def chat_answer(raw: bytes) -> bytes:
    """A whole chat completion with `refusal`, `annotations` and OpenAI's tool call ids."""
    try:
        answer = loads(raw)
    except ValueError:
        return raw
    if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list):
        return raw
    changed = False
    for choice in answer["choices"]:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        if "refusal" not in message:
            message["refusal"] = None
            changed = True
        if message.get("annotations") is None:
            message["annotations"] = []
            changed = True
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict) and openai_call_id(call.get("id")) != call.get("id"):
                call["id"] = openai_call_id(call["id"])
                changed = True
    return dumps(answer) if changed else raw


__all__ = ["chat_answer", "openai_call_id", "stream_bytes"]
