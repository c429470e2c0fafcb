"""Reading a client's JSON body: every check a body passes before a handler sees it.

In order, each refusal a 4xx naming what to fix (the caller turns it into
its API's error shape):

1. size: at most router.max_body_bytes, else 413;
2. time: the whole body within router.clients.body_timeout, else 408;
3. Content-Type: JSON or none at all, else 415;
4. UTF-8, else 400 `invalid_encoding`;
5. JSON, nested at most router.clients.max_json_depth deep, else 400;
   its text Unicode: a lone UTF-16 surrogate written as an escape (`"\\ud800"`
   without its pair) is a 400 `invalid_encoding` naming the field, as the
   Anthropic API refuses it (such text cannot be sent on to an engine);
6. an object that fits the operation's schema (llmgw.router.request_schemas),
   else 400 with the field in `param`.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import web

from llmgw.router.errors import GatewayError, bad_request, loads
from llmgw.router.gateway import Gateway
from llmgw.router.request_schemas import problem_in

#: Content types a JSON endpoint takes (besides none at all, which curl-like clients send).
JSON_TYPES = ("application/json",)


def check_content_type(request: web.Request) -> None:
    """415 unless the request says its body is JSON (or says nothing)."""
    given = request.headers.get("Content-Type")
    if given is None or not given.strip():
        return
    kind = request.content_type.lower()
    if kind in JSON_TYPES or (kind.startswith("application/") and kind.endswith("+json")):
        return
    raise GatewayError(415, "unsupported_media_type",
                       f"this endpoint takes a JSON body: send it with Content-Type: application/json, not {kind}",
                       param=None)


async def read_bytes(request: web.Request, gw: Gateway) -> bytes:
    """The body as sent, within the size and time limits."""
    limit = int(gw.config.router.max_body_bytes)
    too_big = GatewayError(413, "request_too_large",
                           f"the request body is larger than {limit} bytes (router.max_body_bytes)")
    if request.content_length is not None and request.content_length > limit:
        raise too_big
    seconds = gw.config.router.clients.body_timeout.total_seconds()
    try:
        if request.content.is_eof():  # the whole body came with the headers: nothing to wait for, no timer
            raw = await request.read()
        else:
            async with asyncio.timeout(seconds or None):
                raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise too_big from None
    except TimeoutError:
        raise GatewayError(408, "request_timeout",
                           f"the request body did not arrive within {seconds:g} s (router.clients.body_timeout); "
                           "send it whole, without pauses") from None
    if len(raw) > limit:
        raise too_big
    return raw


def parse_json(raw: bytes, max_depth: int) -> Any:
    """UTF-8 text, then JSON nested at most `max_depth` deep."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_request(f"the request body is not UTF-8 text (byte {exc.start} is not); send JSON in UTF-8",
                          code="invalid_encoding") from None
    try:
        value = loads(text)
    except RecursionError:
        raise _too_deep(max_depth) from None
    except ValueError as exc:
        raise bad_request(f"the request body is not valid JSON ({_first_line(exc)})", code="invalid_json") from None
    if depth_over(value, max_depth):
        raise _too_deep(max_depth)
    if _SURROGATE_ESCAPE.search(text) and (where := lone_surrogate_at(value)) is not None:
        raise bad_request(f"{where or 'the body'}: the text holds a lone UTF-16 surrogate (a \\udXXX escape "
                          "without its pair), which is not Unicode; send the character itself, or both halves "
                          "of its pair", param=where or None, code="invalid_encoding")
    return value


#: A JSON escape of a UTF-16 surrogate; only a body holding one is walked for a lone one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate_at(value: Any) -> str | None:
    """The path (`messages[0].content`, `metadata.user_id`) of the first key or text holding a lone
    surrogate ('' for the body itself), or None; walked without recursion."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return path
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                where = f"{path}.{key}" if path else str(key)
                if _SURROGATE.search(key):
                    return _printable(where)
                stack.append((child, where))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]") for i, child in reversed(list(enumerate(item))))
    return None


def _printable(path: str) -> str:
    """A path that can itself be put in an answer: its surrogates as \\udXXX."""
    return path.encode("utf-8", "backslashreplace").decode("ascii", "replace") if _SURROGATE.search(path) else path


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def _too_deep(limit: int) -> GatewayError:
    return bad_request(f"the request body nests objects and arrays more than {limit} deep "
                       "(router.clients.max_json_depth)", code="json_too_deep")


def depth_over(value: Any, limit: int) -> bool:
    """Whether objects and arrays nest more than `limit` deep, walked without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


async def read_json_body(request: web.Request, gw: Gateway, operation: str | None) -> tuple[bytes, dict]:
    """The body's bytes and its object, checked against `operation`'s schema (None: any object)."""
    raw = await read_bytes(request, gw)
    check_content_type(request)
    body = parse_json(raw, gw.config.router.clients.max_json_depth)
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object", code="invalid_json")
    if operation is not None and (problem := problem_in(operation, body)) is not None:
        raise bad_request(problem.message, param=problem.param, code=problem.code)
    return raw, body


__all__ = ["JSON_TYPES", "check_content_type", "depth_over", "parse_json", "read_bytes", "read_json_body"]
