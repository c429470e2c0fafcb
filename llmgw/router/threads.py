"""Stored conversations: `x-llmgw-thread` puts a project's conversation in front of the new turn.

A client sends the same thread id with each request and only its new
messages. Before the request is admitted, `attach` reads the thread's
turns and builds the whole conversation: this request's system messages,
then as many stored turns as fit the model's context (the newest; the
oldest are left out and `x-llmgw-thread-trimmed` says how many), then the
new messages. When the answer is whole and good, the turn (the new
messages and the answer) is added to the thread; a refused, failed or
cancelled request adds nothing.

Threads belong to a project, are off until an operator turns them on
(`llmgw keys threads PROJECT --on --retention 720h`), and a request naming
one where they are off is refused (400 `threads_off`), never answered
without its history. The turns of one thread take turns within a process:
the next one waits until the one before is kept.

For other handlers (the Responses API's `previous_response_id`):

- set `request[THREAD] = thread_id` before calling `pipeline.serve`, and the
  request is carried by that thread as if the header had been sent;
- or use `conversation(request, principal, thread_id, model)` and
  `remember_turn(...)` directly; `response_id_for(thread_id)` and
  `thread_of_response_id(response_id)` put a thread id in a response id and
  take it out again.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import secrets
import time
from typing import Any

import attrs
from aiohttp import web

from llmgw.auth.principal import Principal
from llmgw.obs import logs
from llmgw.router.client_data import (
    CLIENT_DATA,
    ClientData,
    Recorder,
    authenticate,
    client_data,
    json_response,
    no_store,
    project_of,
    store_errors,
)
from llmgw.router.errors import OK, GatewayError, bad_request, dumps, loads
from llmgw.router.gateway import GATEWAY, Gateway
from llmgw.store.client_data import MAX_THREAD_ID, ThreadTurn

log = logs.get("llmgw.router.threads")

THREAD_HEADER = "x-llmgw-thread"
TRIMMED_HEADER = "x-llmgw-thread-trimmed"
#: Set by a handler to carry its request by a thread without the header.
THREAD = web.RequestKey("llmgw_thread", str)

_THREAD_ID = re.compile(rf"[A-Za-z0-9_.:\-]{{1,{MAX_THREAD_ID}}}")
#: The context assumed for a model whose engine does not say (GET /v1/models: max_model_len).
DEFAULT_CONTEXT = 8192
#: Seconds a model's context length is trusted; an unanswered question is asked again sooner.
CONTEXT_TTL, CONTEXT_RETRY = 600.0, 60.0
#: Room kept for the answer of a request that sets no max_tokens.
DEFAULT_ANSWER_ROOM = 1024
#: Tokens a message costs besides its text (role, markers); and a margin for the estimate.
MESSAGE_OVERHEAD, MARGIN = 4, 16
_SYSTEM_ROLES = ("system", "developer")


# ---------------------------------------------------------------- counting


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """A generous count of a conversation's tokens: a token for every three bytes of text.

    Real tokenizers give about four bytes of English a token; erring high
    keeps a fitted conversation inside the context."""
    total = 0
    for message in messages:
        total += MESSAGE_OVERHEAD + len(dumps(message)) // 3
    return total


def fit(turns: list[ThreadTurn], room: int) -> tuple[list[ThreadTurn], int]:
    """The newest turns that fit in `room` tokens, oldest first, and how many older ones were left out."""
    kept: list[ThreadTurn] = []
    used = 0
    for turn in reversed(turns):
        if used + turn.tokens > room:
            break
        kept.append(turn)
        used += turn.tokens
    kept.reverse()
    return kept, len(turns) - len(kept)


async def context_length(gw: Gateway, data: ClientData, model: str) -> int:
    """The model's context in tokens, as one of its engines says; DEFAULT_CONTEXT when none does."""
    return await engine_context(gw, data.context_lengths, model) or DEFAULT_CONTEXT


async def engine_context(gw: Gateway, known: dict[str, tuple[int, float]], model: str) -> int | None:
    """The model's context in tokens, as one of its engines says; None when none does (a provider's API).

    GET /v1/models: `max_model_len` (vLLM, SGLang, the sim engine); for
    llama.cpp's server, which lists only the context the model was trained
    with, its /props first (the context it was started with). `known` keeps
    the answers: model -> (tokens or 0, monotonic time it expires)."""
    now = time.monotonic()
    cached = known.get(model)
    if cached is not None and now < cached[1]:
        return cached[0] or None
    found = None
    session = gw.upstream.session
    replicas = gw.replicas.replicas_for(model)[:3]
    if session is None or not replicas:
        # nobody asked (no replica yet: a cluster model being placed, as under `llmgw up`): nothing is
        # remembered, so the first replica to come is asked at the next request, not a minute later
        return None
    for replica in replicas:
        headers = {"Authorization": "Bearer " + replica.api_key.reveal()} if replica.api_key is not None else {}
        listing = await _get_json(session, replica.base_url + "/models", headers, replica.id)
        found, exact = _context_in(listing, replica.name_at_engine)
        if found and not exact:
            props = await _get_json(session, replica.base_url.removesuffix("/v1") + "/props", headers, replica.id)
            settings = props.get("default_generation_settings") if isinstance(props, dict) else None
            started = settings.get("n_ctx") if isinstance(settings, dict) else None
            found = started if isinstance(started, int) and started > 0 else found
        if found:
            break
    known[model] = (found or 0, now + (CONTEXT_TTL if found else CONTEXT_RETRY))
    return found


async def _get_json(session: Any, url: str, headers: dict[str, str], replica_id: str) -> Any:
    import aiohttp

    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=2)) as resp:
            if resp.status == 200:
                return await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:  # an engine that cannot say is asked again later
        logs.event(log, "context length not read", logging.DEBUG, replica_id=replica_id, error=repr(exc))
    return None


def _context_in(listing: Any, name: str) -> tuple[int | None, bool]:
    """The context of `name` in a /v1/models listing, and whether it is the one the engine runs with."""
    entries = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(entries, list):
        return None, False
    chosen = next((e for e in entries if isinstance(e, dict) and e.get("id") == name), None)
    if chosen is None and len(entries) == 1 and isinstance(entries[0], dict):
        chosen = entries[0]
    if chosen is None:
        return None, False
    for value in (chosen.get("max_model_len"), chosen.get("context_length")):
        if isinstance(value, int) and value > 0:
            return value, True
    meta = chosen.get("meta") if isinstance(chosen.get("meta"), dict) else {}
    trained = meta.get("n_ctx_train")
    return (trained, False) if isinstance(trained, int) and trained > 0 else (None, False)


# ---------------------------------------------------------------- the pipeline's hook


def thread_id_of(request: web.Request) -> str | None:
    """The thread a request names (a handler's THREAD, else the header), checked; None when none."""
    given = request.get(THREAD) or request.headers.get(THREAD_HEADER)
    if given is None:
        return None
    given = given.strip()
    if not _THREAD_ID.fullmatch(given):
        raise bad_request(f"{THREAD_HEADER}: a thread id is 1 to {MAX_THREAD_ID} letters, digits, '-', '_', '.' "
                          "or ':'", code="invalid_thread_id")
    return given


async def attach(gw: Gateway, call: Any, request: web.Request, body_bytes: bytes,
                 body: dict) -> tuple[bytes, dict]:
    """Put the stored conversation in front of the new turn, when the request names a thread."""
    thread_id = thread_id_of(request)
    if thread_id is None:
        return body_bytes, body
    if call.kind != "chat":
        raise bad_request(f"{THREAD_HEADER} carries chat conversations (/v1/chat/completions, /v1/messages), "
                          f"not {request.path}", code="thread_unsupported")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise bad_request("a request on a thread sends its new messages in `messages`", param="messages")
    principal = call.principal
    data = await _threads_on(gw, request, principal)
    project = principal.project_id
    await data.check_quota(project, len(body_bytes))  # the turn will be kept: refused before it is answered
    release = await data.thread_locks.acquire((project, thread_id))
    try:
        with store_errors("the thread"):
            turns = await data.store.get_thread_turns(project, thread_id)
        system = [m for m in messages if m.get("role") in _SYSTEM_ROLES]
        new = [m for m in messages if m.get("role") not in _SYSTEM_ROLES]
        context = await context_length(gw, data, call.model)
        answer_room = _answer_room(body, context)
        kept, trimmed = fit(turns, context - answer_room - estimate_tokens(messages) - MARGIN)
        history = [m for turn in kept for m in turn.messages]
        body = {**body, "messages": [*system, *history, *new]}
        if trimmed:
            call.headers[TRIMMED_HEADER] = str(trimmed)
        features = await data.features(project)
        call.hooks.append(ThreadKeeper(data, project, thread_id, new, features.thread_retention, release))
    except BaseException:
        release()
        raise
    return dumps(body), body


async def _threads_on(gw: Gateway, request: web.Request, principal: Principal) -> ClientData:
    """The ClientData when the key's project keeps threads; a 400 saying why not otherwise."""
    project = project_of(principal, "threads")
    data = request.app.get(CLIENT_DATA)
    if data is None or data.store is None:
        raise bad_request(f"this gateway keeps no threads ({THREAD_HEADER}): it runs without a store",
                          code="threads_off")
    with store_errors("the project's settings"):
        features = await data.features(project)
    if not features.threads:
        raise bad_request(f"threads ({THREAD_HEADER}) are off for this project; an operator turns them on with "
                          "`llmgw keys threads <project> --on`", code="threads_off")
    if no_store(gw, principal):
        raise bad_request(f"a guardrails policy with no_store applies to this key: no thread ({THREAD_HEADER}) "
                          "is kept for it", code="threads_off")
    return data


def _answer_room(body: dict, context: int) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and value > 0:
            return value
    return min(DEFAULT_ANSWER_ROOM, context // 4)


class ThreadKeeper:
    """Sees the answer of a request on a thread and adds the turn once the request ended well."""

    def __init__(self, data: ClientData, project: str, thread_id: str, new: list[dict], retention,
                 release) -> None:
        self.data = data
        self.project = project
        self.thread_id = thread_id
        self.new = new
        self.retention = retention
        self.release = release
        self.answer: dict[str, Any] | None = None
        self._stream: StreamedMessage | None = None

    def wrap(self, relay: Any) -> Any:
        self._stream = StreamedMessage()
        return Recorder(relay, self._stream.feed)

    def checked(self, body: dict) -> None:
        """guard: keep the new turn as the guardrails passed it (values redacted), not as it was sent."""
        sent = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") not in _SYSTEM_ROLES]
        if len(sent) >= len(self.new):
            self.new = sent[len(sent) - len(self.new):]

    def whole(self, status: int, raw: bytes) -> None:
        if status != 200:
            return
        try:
            choice = loads(raw)["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            return
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict):
            self.answer = {k: v for k, v in message.items() if v is not None and k in _KEPT_FIELDS}
            self.answer["role"] = "assistant"

    async def end(self, call: Any) -> None:
        try:
            if self._stream is not None and self.answer is None and self._stream.finished:
                self.answer = self._stream.message()
            if call.outcome != OK or call.status != 200 or self.answer is None:
                return
            turn = [*self.new, self.answer]
            tokens = estimate_tokens(self.new) + max(call.completion_tokens, estimate_tokens([self.answer]))
            await remember_turn(self.data, self.project, self.thread_id, turn, tokens=tokens,
                                retention=self.retention, user_id=getattr(call.principal, "user_id", None))
        except Exception:
            log.exception("keeping a thread's turn failed", extra={"fields": {"request_id": call.request_id}})
        finally:
            self.release()


_KEPT_FIELDS = ("role", "content", "tool_calls", "name", "refusal")


@attrs.define
class StreamedMessage:
    """The answer message put back together from a chat completion's stream."""

    content: list[str] = attrs.Factory(list)
    tool_calls: dict[int, dict] = attrs.Factory(dict)
    finished: bool = False
    _rest: bytes = b""

    def feed(self, data: bytes) -> None:
        buf = self._rest + data
        lines = buf.split(b"\n")
        self._rest = lines.pop()
        for line in lines:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.finished = True
                continue
            try:
                chunk = loads(payload)
                choice = chunk["choices"][0] if chunk.get("choices") else None
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                continue
            if isinstance(choice, dict):
                self._take(choice)

    def _take(self, choice: dict) -> None:
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str):
            self.content.append(delta["content"])
        for call in delta.get("tool_calls") or ():
            if not isinstance(call, dict):
                continue
            slot = self.tool_calls.setdefault(int(call.get("index", 0)),
                                              {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
            if call.get("id"):
                slot["id"] = call["id"]
            function = call.get("function") or {}
            slot["function"]["name"] += function.get("name") or ""
            slot["function"]["arguments"] += function.get("arguments") or ""

    def message(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) if self.content else None}
        if self.tool_calls:
            out["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        return out


# ---------------------------------------------------------------- for other handlers


@attrs.frozen
class Conversation:
    """A thread's stored turns that fit, as chat messages, and how many older turns were left out."""

    thread_id: str
    messages: list[dict[str, Any]]
    trimmed: int


async def conversation(request: web.Request, principal: Principal, thread_id: str, model: str, *,
                       room: int | None = None) -> Conversation:
    """The stored conversation of a thread for `model`: its newest turns within `room` tokens
    (default: the model's context less DEFAULT_ANSWER_ROOM). Refused (400) where threads are off."""
    gw = request.app[GATEWAY]
    data = await _threads_on(gw, request, principal)
    if not _THREAD_ID.fullmatch(thread_id):
        raise bad_request("a thread id is 1 to 128 letters, digits, '-', '_', '.' or ':'", code="invalid_thread_id")
    with store_errors("the thread"):
        turns = await data.store.get_thread_turns(principal.project_id, thread_id)
    if room is None:
        room = await context_length(gw, data, model) - DEFAULT_ANSWER_ROOM
    kept, trimmed = fit(turns, room)
    return Conversation(thread_id, [m for t in kept for m in t.messages], trimmed)


async def remember_turn(data: ClientData, project: str, thread_id: str, messages: list[dict[str, Any]], *,
                        tokens: int | None = None, retention=None, user_id: str | None = None) -> None:
    """Add a turn (the new messages, the answer last) to a thread; `user_id`: the key's person, who wrote it."""
    store = data.require_store("threads")
    if retention is None:
        retention = (await data.features(project)).thread_retention
    await store.append_thread_turn(project, thread_id, messages,
                                   tokens=estimate_tokens(messages) if tokens is None else tokens,
                                   retention=retention, user_id=user_id)


def new_thread_id() -> str:
    return "thr-" + secrets.token_hex(16)


def response_id_for(thread_id: str) -> str:
    """A Responses API id that carries its thread: resp_<thread, base32>_<random>."""
    encoded = base64.b32encode(thread_id.encode()).decode().rstrip("=").lower()
    return f"resp_{encoded}_{secrets.token_hex(6)}"


def thread_of_response_id(response_id: str) -> str | None:
    """The thread a response id made by `response_id_for` carries; None for any other id."""
    if not response_id.startswith("resp_") or response_id.count("_") < 2:
        return None
    encoded = response_id[5:].rsplit("_", 1)[0].upper()
    try:
        thread = base64.b32decode(encoded + "=" * (-len(encoded) % 8)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return thread if _THREAD_ID.fullmatch(thread) else None


# ---------------------------------------------------------------- DELETE /v1/threads/{id}


async def delete_thread(request: web.Request) -> web.Response:
    """Forget a thread of the key's project (allowed while threads are off: forgetting always is)."""
    principal = await authenticate(request)
    project = project_of(principal, "threads")
    thread_id = request.match_info["thread_id"]
    if not _THREAD_ID.fullmatch(thread_id):
        raise bad_request("a thread id is 1 to 128 letters, digits, '-', '_', '.' or ':'", code="invalid_thread_id")
    data = client_data(request)
    store = data.require_store("threads")
    release = await data.thread_locks.acquire((project, thread_id))
    try:
        with store_errors("the thread"):
            gone = await store.delete_thread(project, thread_id)
    finally:
        release()
    if not gone:
        raise GatewayError(404, "thread_not_found", f"this project has no thread {thread_id!r}")
    return json_response({"id": thread_id, "object": "thread.deleted", "deleted": True})


__all__ = [
    "THREAD", "THREAD_HEADER", "TRIMMED_HEADER", "Conversation", "StreamedMessage", "ThreadKeeper", "attach",
    "context_length", "conversation", "delete_thread", "engine_context", "estimate_tokens", "fit", "new_thread_id",
    "remember_turn", "response_id_for", "thread_of_response_id",
]
