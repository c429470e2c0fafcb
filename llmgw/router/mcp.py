"""`/mcp`: the memory notes as MCP tools — `remember`, `recall`, `forget`.

An MCP server over the streamable HTTP transport, answered as plain JSON:
each POST carries one JSON-RPC 2.0 message (or a list of them) and gets its
answer in the body; notifications get 202 and no body. No session is kept
(no `Mcp-Session-Id`), and there is no server-sent stream (GET is 405), so
any client of the transport works without state on our side.

The key is the bearer token, as for every other endpoint, and decides the
project; `x-llmgw-agent` keeps one agent's notes apart from another's.
A tool that cannot run (notes off for the project, a note too long) answers
with `isError` and says why, so the model reads the reason.

llmgw never puts these tools into requests by itself: an agent that is not
given the server never sees its notes.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from llmgw import __version__
from llmgw.auth.principal import Principal
from llmgw.router.body import parse_json, read_bytes
from llmgw.router.client_data import authenticate, client_data, json_response
from llmgw.router.errors import GatewayError, dumps
from llmgw.router.gateway import GATEWAY
from llmgw.router.memory import (
    Notebook,
    forget,
    note_json,
    notebook,
    read,
    recall,
    remember,
)

#: Protocol revisions answered, newest first; a client asking for another is offered the newest.
PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602

TOOLS: list[dict[str, Any]] = [
    {
        "name": "remember",
        "title": "Remember a note",
        "description": ("Keep a note for later conversations under a short key; a note under the same key is "
                        "replaced. Up to 16 KiB of text and 16 tags (lower-case letters, digits, - and _)."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "key": {"type": "string", "description": "A short name for the note, like favourite-colour."},
                "text": {"type": "string", "description": "What to remember."},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Words to find it by."},
            },
            "required": ["key", "text"],
        },
    },
    {
        "name": "recall",
        "title": "Recall notes",
        "description": ("Find notes kept earlier: by key, by words in their key or text, by tag, or the newest "
                        "when nothing is given."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "key": {"type": "string", "description": "The key of one note."},
                "query": {"type": "string", "description": "Words the note's key or text holds."},
                "tag": {"type": "string", "description": "A tag the notes carry."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "At most this many."},
            },
        },
    },
    {
        "name": "forget",
        "title": "Forget a note",
        "description": "Remove the note kept under a key.",
        "inputSchema": {
            "type": "object",
            "properties": {"key": {"type": "string", "description": "The key of the note to remove."}},
            "required": ["key"],
        },
    },
]
_TOOL_NAMES = {t["name"] for t in TOOLS}


class RPCError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _error(msg_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


async def handle(request: web.Request) -> web.StreamResponse:
    """POST /mcp: one JSON-RPC message, or a list of them."""
    principal = await authenticate(request)  # no key, no tools: 401 like every endpoint
    gw = request.app[GATEWAY]
    try:  # the size, time, UTF-8 and depth checks of every JSON body (llmgw.router.body)
        message = parse_json(await read_bytes(request, gw), gw.config.router.clients.max_json_depth)
    except GatewayError as exc:
        if exc.status != 400:
            raise
        return json_response(_error(None, PARSE_ERROR, exc.message), status=400)
    if isinstance(message, list):
        if not message:
            return json_response(_error(None, INVALID_REQUEST, "an empty list of messages"), status=400)
        answers = [a for m in message if (a := await _answer(request, principal, m)) is not None]
        return json_response(answers) if answers else web.Response(status=202)
    answer = await _answer(request, principal, message)
    return json_response(answer) if answer is not None else web.Response(status=202)


async def _answer(request: web.Request, principal: Principal, message: Any) -> dict[str, Any] | None:
    """The answer to one message; None for a notification or a client's response."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _error(message.get("id") if isinstance(message, dict) else None, INVALID_REQUEST,
                      'not a JSON-RPC 2.0 message: it needs "jsonrpc": "2.0"')
    msg_id = message.get("id")
    method = message.get("method")
    if not isinstance(method, str):
        if "result" in message or "error" in message:
            return None  # an answer to a request of ours; we send none
        return _error(msg_id, INVALID_REQUEST, "a request needs a `method`")
    if "id" not in message:
        return None  # notifications/initialized, notifications/cancelled, …: nothing to answer
    params = message.get("params") or {}
    if not isinstance(params, dict):
        return _error(msg_id, INVALID_PARAMS, "`params` must be an object")
    try:
        result = await _dispatch(request, principal, method, params)
    except RPCError as exc:
        return _error(msg_id, exc.code, exc.message)
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


async def _dispatch(request: web.Request, principal: Principal, method: str, params: dict) -> dict[str, Any]:
    if method == "initialize":
        asked = params.get("protocolVersion")
        return {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "llmgw-memory", "title": "llmgw memory notes", "version": __version__},
            "instructions": ("Notes kept here last across conversations. Use `recall` to look for what you may "
                             "already know, `remember` to keep something worth knowing later, `forget` to "
                             "remove a note that is wrong or no longer wanted."),
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        name = params.get("name")
        if name not in _TOOL_NAMES:
            raise RPCError(INVALID_PARAMS, f"no tool called {name!r}; there are {', '.join(sorted(_TOOL_NAMES))}")
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise RPCError(INVALID_PARAMS, "`arguments` must be an object")
        return await _call_tool(request, principal, name, arguments)
    raise RPCError(METHOD_NOT_FOUND, f"no method {method!r} here; this server offers tools only")


async def _call_tool(request: web.Request, principal: Principal, name: str, args: dict) -> dict[str, Any]:
    try:
        book = await notebook(request, principal)
        if name == "remember":  # a note is kept: within the project's storage quota
            text_arg = args.get("text")
            await client_data(request).check_quota(book.project, len(text_arg) if isinstance(text_arg, str) else 0)
        text, structured = await _TOOLS_RUN[name](book, args)
    except GatewayError as exc:
        return {"content": [{"type": "text", "text": exc.message}], "isError": True}
    return {"content": [{"type": "text", "text": text}], "structuredContent": structured, "isError": False}


def _text_arg(args: dict, name: str, *, required: bool = False) -> str | None:
    value = args.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise GatewayError(400, "invalid_arguments", f"`{name}` must be text" + (" and is required" if required else ""))
    return value


async def _remember(book: Notebook, args: dict) -> tuple[str, dict]:
    key = _text_arg(args, "key", required=True)
    note, created = await remember(book, key, _text_arg(args, "text", required=True), args.get("tags"))
    said = "Remembered" if created else "Replaced"
    return f"{said} the note {key!r}.", {"note": note_json(note), "created": created}


async def _recall(book: Notebook, args: dict) -> tuple[str, dict]:
    key = _text_arg(args, "key")
    if key is not None:
        notes = [await read(book, key)]
    else:
        limit = args.get("limit", 20)
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise GatewayError(400, "invalid_arguments", "`limit` must be a whole number")
        notes = await recall(book, text=_text_arg(args, "query"), tag=_text_arg(args, "tag"), limit=min(limit, 100))
    found = [note_json(n) for n in notes]
    if not found:
        return "No notes found.", {"notes": []}
    return dumps([{k: n[k] for k in ("key", "text", "tags", "updated_at")} for n in found]).decode(), {"notes": found}


async def _forget(book: Notebook, args: dict) -> tuple[str, dict]:
    key = _text_arg(args, "key", required=True)
    await forget(book, key)
    return f"Forgot the note {key!r}.", {"key": key, "deleted": True}


_TOOLS_RUN = {"remember": _remember, "recall": _recall, "forget": _forget}

__all__ = ["PROTOCOL_VERSIONS", "TOOLS", "handle"]
