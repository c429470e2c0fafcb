"""Memory notes: `/v1/memory`, what an agent keeps for itself across conversations.

A note is a key, some text and up to 16 tags, private to the key's project
and to the agent named in `x-llmgw-agent` (`default` when it is not sent).
Off until an operator turns notes on for the project (`llmgw keys memory
PROJECT --on`). Limits: a key up to 200 bytes, a note up to 16 KiB, tags of
lower-case letters, digits, `-` and `_`, 1000 notes per agent.

    PUT    /v1/memory/{key}   {"text": "...", "tags": ["..."]}   201 new, 200 replaced
    GET    /v1/memory/{key}
    DELETE /v1/memory/{key}
    GET    /v1/memory?q=TEXT&tag=TAG&limit=N                     newest first

`remember`, `recall` and `forget` are the same operations for the MCP tools
(llmgw.router.mcp).
"""

from __future__ import annotations

from typing import Any

import attrs
from aiohttp import web

from llmgw.auth.principal import Principal
from llmgw.router.client_data import (
    authenticate,
    client_data,
    json_response,
    no_store,
    project_of,
    read_json_object,
    store_errors,
)
from llmgw.router.errors import GatewayError, bad_request
from llmgw.router.gateway import GATEWAY
from llmgw.store import Invalid, Store
from llmgw.store.client_data import MemoryNote
from llmgw.store.sql_client_data import check_agent

AGENT_HEADER = "x-llmgw-agent"
DEFAULT_AGENT = "default"
#: Notes a search returns when it does not say, and at most.
DEFAULT_LIMIT, MAX_LIMIT = 50, 1000


@attrs.frozen
class Notebook:
    """Where one request's notes are: a project's, one agent's."""

    store: Store
    project: str
    agent: str
    user_id: str | None = None  #: the key's person, who writes the notes (forgetting them deletes theirs)


def agent_of(request: web.Request) -> str:
    given = request.headers.get(AGENT_HEADER, "").strip() or DEFAULT_AGENT
    try:
        return check_agent(given)
    except Invalid:
        raise bad_request(f"{AGENT_HEADER}: an agent's name is 1 to 128 letters, digits, '-', '_', '.' or ':'",
                          code="invalid_agent") from None


async def notebook(request: web.Request, principal: Principal | None = None) -> Notebook:
    """The notes this request may use; 400 `memory_off` saying why when there are none."""
    principal = principal or await authenticate(request)
    project = project_of(principal, "memory notes")
    agent = agent_of(request)
    data = client_data(request)
    store = data.require_store("memory notes")
    with store_errors("the project's settings"):
        features = await data.features(project)
    if not features.memory:
        raise bad_request("memory notes are off for this project; an operator turns them on with "
                          "`llmgw keys memory <project> --on`", code="memory_off")
    if no_store(request.app[GATEWAY], principal):
        raise bad_request("a guardrails policy with no_store applies to this key: no notes are kept for it",
                          code="memory_off")
    return Notebook(store, project, agent, principal.user_id)


def note_json(note: MemoryNote) -> dict[str, Any]:
    return {"object": "memory.note", "key": note.key, "text": note.text, "tags": list(note.tags),
            "agent": note.agent, "created_at": note.created_at.isoformat(), "updated_at": note.updated_at.isoformat()}


# ---------------------------------------------------------------- the operations


async def remember(book: Notebook, key: str, text: Any, tags: Any = None) -> tuple[MemoryNote, bool]:
    if tags is not None and (isinstance(tags, str) or not isinstance(tags, list)):
        raise bad_request("tags: expected a list of tags like [\"preference\"]", param="tags")
    with store_errors("memory notes"):
        return await book.store.put_memory_note(book.project, book.agent, key, text, tags or (), user_id=book.user_id)


async def recall(book: Notebook, *, text: str | None = None, tag: str | None = None,
                 limit: int = DEFAULT_LIMIT) -> list[MemoryNote]:
    with store_errors("memory notes"):
        return await book.store.search_memory_notes(book.project, book.agent, text=text or None, tag=tag or None,
                                                     limit=max(1, min(limit, MAX_LIMIT)))


async def read(book: Notebook, key: str) -> MemoryNote:
    with store_errors("memory notes"):
        note = await book.store.get_memory_note(book.project, book.agent, key)
    if note is None:
        raise GatewayError(404, "note_not_found", f"agent {book.agent!r} keeps no note {key!r}")
    return note


async def forget(book: Notebook, key: str) -> None:
    with store_errors("memory notes"):
        gone = await book.store.delete_memory_note(book.project, book.agent, key)
    if not gone:
        raise GatewayError(404, "note_not_found", f"agent {book.agent!r} keeps no note {key!r}")


# ---------------------------------------------------------------- /v1/memory


async def put_note(request: web.Request) -> web.Response:
    book = await notebook(request)
    body = await read_json_object(request, "a note", "memory_note")
    if "text" not in body:
        raise bad_request("a note needs its `text`", param="text")
    text = body.get("text")
    await client_data(request).check_quota(book.project, len(text) if isinstance(text, str) else 0)
    note, created = await remember(book, request.match_info["key"], text, body.get("tags"))
    return json_response(note_json(note), status=201 if created else 200)


async def get_note(request: web.Request) -> web.Response:
    book = await notebook(request)
    return json_response(note_json(await read(book, request.match_info["key"])))


async def delete_note(request: web.Request) -> web.Response:
    book = await notebook(request)
    key = request.match_info["key"]
    await forget(book, key)
    return json_response({"object": "memory.note.deleted", "key": key, "deleted": True})


async def search_notes(request: web.Request) -> web.Response:
    book = await notebook(request)
    query = request.query
    try:
        limit = int(query.get("limit", DEFAULT_LIMIT))
    except ValueError:
        raise bad_request("limit: expected a whole number", param="limit") from None
    notes = await recall(book, text=query.get("q"), tag=query.get("tag"), limit=limit)
    return json_response({"object": "list", "data": [note_json(n) for n in notes]})


__all__ = ["AGENT_HEADER", "DEFAULT_AGENT", "Notebook", "agent_of", "delete_note", "forget", "get_note",
           "note_json", "notebook", "put_note", "read", "recall", "remember", "search_notes"]
