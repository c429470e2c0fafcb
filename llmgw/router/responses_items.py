"""`GET /v1/responses/{id}/input_items`: the items a kept response answered, as OpenAI lists them.

A kept response holds its conversation as chat messages, the turns of the
responses it continued (`previous_response_id`) first and its answer last.
Its input items are the messages between the two: those it was sent itself
(when the response it continued is gone, the whole conversation before the
answer). They come back as Responses items: `message` items (text as
`input_text`, images as `input_image`, an assistant's text as
`output_text`), `function_call` and `function_call_output`, each with an id
that stays the same on every read, so `after` pages through them.

    GET /v1/responses/{id}/input_items[?order=desc|asc&limit=1..100&after=ITEM_ID]

Only the project (else the key) that made the response reads it; anyone
else gets the same 404 as for a response that does not exist.
"""

from __future__ import annotations

import hashlib
from typing import Any

from aiohttp import web

from llmgw.router.errors import JSON, bad_request, dumps
from llmgw.router.handlers_responses import _RESPONSE_ID, _kept, _not_found

DEFAULT_LIMIT, MAX_LIMIT = 20, 100


def _item_id(prefix: str, response_id: str, index: int, part: int = 0) -> str:
    digest = hashlib.blake2b(f"{response_id}/{index}/{part}".encode(), digest_size=12).hexdigest()
    return f"{prefix}_{digest}"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _input_parts(content: Any) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    parts: list[dict] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "input_text", "text": part["text"]})
        elif part.get("type") == "image_url" and isinstance(part.get("image_url"), dict):
            image = part["image_url"]
            parts.append({"type": "input_image", "image_url": image.get("url"),
                          "detail": image.get("detail") or "auto", "file_id": None})
    return parts


def items_of(response_id: str, messages: list[dict]) -> list[dict]:
    """Chat messages as Responses input items, in the order they were given."""
    items: list[dict] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "tool":
            items.append({"type": "function_call_output", "id": _item_id("fco", response_id, i),
                          "call_id": str(message.get("tool_call_id") or ""), "output": _text(message.get("content")),
                          "status": "completed"})
            continue
        if role == "assistant":
            text = _text(message.get("content"))
            if text:
                items.append({"type": "message", "id": _item_id("msg", response_id, i), "role": "assistant",
                              "status": "completed",
                              "content": [{"type": "output_text", "text": text, "annotations": []}]})
            for k, call in enumerate(message.get("tool_calls") or ()):
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict):
                    continue
                items.append({"type": "function_call", "id": _item_id("fc", response_id, i, k + 1),
                              "call_id": str(call.get("id") or ""), "name": str(function.get("name") or ""),
                              "arguments": str(function.get("arguments") or ""), "status": "completed"})
            continue
        if role in ("user", "system", "developer"):
            items.append({"type": "message", "id": _item_id("msg", response_id, i), "role": role,
                          "status": "completed", "content": _input_parts(message.get("content"))})
    return items


def _page_args(query) -> tuple[int, str, str | None]:
    raw = query.get("limit")
    limit = DEFAULT_LIMIT
    if raw is not None:
        try:
            limit = int(raw)
        except ValueError:
            raise bad_request(f"limit: expected a whole number from 1 to {MAX_LIMIT}, got {raw!r}",
                              param="limit") from None
        if not 1 <= limit <= MAX_LIMIT:
            raise bad_request(f"limit: from 1 to {MAX_LIMIT}, got {limit}", param="limit")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise bad_request(f"order: asc or desc, got {order!r}", param="order")
    return limit, order, query.get("after") or None


async def list_input_items(request: web.Request) -> web.Response:
    responses, response_id, scope = await _kept(request)
    limit, order, after = _page_args(request.query)
    found = await responses.find(response_id, scope) if _RESPONSE_ID.fullmatch(response_id) else None
    if found is None:
        raise _not_found(response_id)
    given = list(found.messages[:-1])  # the last message is the answer
    previous = found.response.get("previous_response_id") if isinstance(found.response, dict) else None
    if isinstance(previous, str) and _RESPONSE_ID.fullmatch(previous):
        earlier = await responses.find(previous, scope)
        if earlier is not None and given[:len(earlier.messages)] == earlier.messages:
            given = given[len(earlier.messages):]
    items = items_of(response_id, given)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise bad_request(f"after: {after!r} is not an item of response {response_id}", param="after")
        items = items[ids.index(after) + 1:]
    page = items[:limit]
    body = {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit}
    return web.Response(body=dumps(body), content_type=JSON)


__all__ = ["items_of", "list_input_items"]
