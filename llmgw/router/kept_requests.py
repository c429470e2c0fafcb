"""Kept requests: a key's or a project's requests and answers kept in the store for N days, and replayed.

Opt-in only (`llmgw keys requests SCOPE --keep 7d`, `PUT /api/v1/kept-requests`):
with no rule nothing is kept. A key's own rule wins over its project's;
a gateway takes a change up within `RULES_TTL` seconds (one read a key
at a time, made ahead of that: llmgw.router.read_ahead), and an admin API
change on this server at once.

What is kept is what the policies allow, as the model saw it and the
client got it: the chat or completion body sent to the engine (after the
guardrails' input check, so a redacted prompt is kept redacted, with a
thread's stored turns in it) and the answer after the output check (a
streamed one assembled from the pieces released to the client into one
chat completion). A request the guardrails block is never kept (nothing
of it reached a model); a key under a guardrails policy with `no_store`
is never kept, whatever its rule. Answers from the answer cache,
embeddings, rerank and audio are not kept, nor anything larger than
`MAX_KEPT_BYTES`. The text is written to the store only: never to a log.

Kept requests expire after their rule's time (the sweep removes them with
the client data janitor, `ClientData.forget_expired`), and go with their
person (`llmgw users forget`). `replay` sends one again, to another model,
through the whole pipeline as the key that made it (its limits, budget,
residency and guardrails), tagged `replay_of=ID` in its usage row.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import weakref
from typing import Any

from aiohttp import web

from llmgw.auth.principal import ANONYMOUS
from llmgw.obs import logs
from llmgw.router.client_data import CLIENT_DATA, ClientData, Recorder, no_store
from llmgw.router.read_ahead import ReadAhead
from llmgw.store import StoreError

log = logs.get("llmgw.router.kept_requests")

#: Seconds a key's rules are trusted before they are read again.
RULES_TTL = 30.0
#: The kinds of requests kept: text generated from a prompt.
KEPT_KINDS = frozenset({"chat", "completion"})
#: A request and its answer larger than this together are not kept (bytes).
MAX_KEPT_BYTES = 4 * 1024 * 1024
#: The usage tag a replayed request carries, with the kept request's id.
REPLAY_TAG = "replay_of"
#: Set on a replayed request: it is not kept again.
REPLAYING = web.RequestKey("llmgw_replaying", str)
#: The admin app's way to the gateway it runs beside (set by llmgw.control.wiring): replay needs it.
GATEWAY_APP = web.AppKey("llmgw_kept_gateway_app", web.Application)


class KeptRules:
    """What each key's requests are kept for, read from the store and kept `RULES_TTL` seconds (read ahead:
    llmgw.router.read_ahead)."""

    def __init__(self, data: ClientData, clock=time.monotonic) -> None:
        self.data = data
        self._rules = ReadAhead(self._read, RULES_TTL, clock=clock)

    async def keep_for(self, key_id: str, project_id: str | None) -> dt.timedelta | None:
        """How long this key's requests are kept; None: not kept."""
        return await self._rules.get((key_id, project_id or ""))

    async def _read(self, which: tuple[str, str]) -> dt.timedelta | None:
        key_id, project_id = which
        rules = await self.data.store.keep_rules_of(key_id, project_id or None)
        rule = rules.get("key") or rules.get("project")
        return rule.keep if rule is not None else None

    def forget(self) -> None:
        """Read every rule again on next use."""
        self._rules.forget()


_RULES: weakref.WeakKeyDictionary[ClientData, KeptRules] = weakref.WeakKeyDictionary()


def rules_of(data: ClientData) -> KeptRules:
    rules = _RULES.get(data)
    if rules is None:
        rules = _RULES[data] = KeptRules(data)
    return rules


def forget_rules(gateway_app: web.Application | None) -> None:
    """After a rule changed on this server: the gateway beside it reads them again at once."""
    data = gateway_app.get(CLIENT_DATA) if gateway_app is not None else None
    if data is not None:
        rules_of(data).forget()


# ---------------------------------------------------------------- in the pipeline


async def begin(gw: Any, call: Any, request: web.Request, body: dict) -> None:
    """Called by the pipeline once the guardrails checked the input: when the key's requests are kept,
    a hook that keeps this one when it ends."""
    data = request.app.get(CLIENT_DATA)
    principal = call.principal
    if data is None or data.store is None or principal is None or principal is ANONYMOUS or not principal.key_id:
        return
    if call.kind not in KEPT_KINDS or hasattr(call.dialect, "read_body") or request.get(REPLAYING):
        return
    try:
        keep = await rules_of(data).keep_for(principal.key_id, principal.project_id)
    except StoreError as exc:  # keeping is not worth refusing the request over
        logs.event(log, "kept-request rule not read", logging.WARNING, request_id=call.request_id, error=str(exc))
        return
    if keep is None:
        return
    if (call.guard is not None and getattr(call.guard, "no_store", False)) or no_store(gw, principal):
        return  # the guardrails' data policy: nothing of this key is kept
    call.hooks.append(RequestKeeper(data.store, keep, request.path, body))


class RequestKeeper:
    """Sees the answer as the client gets it (after the guardrails) and keeps it with its request."""

    def __init__(self, store: Any, keep: dt.timedelta, endpoint: str, body: dict) -> None:
        self.store = store
        self.keep = keep
        self.endpoint = endpoint
        self.body = body
        self.raw: bytes | None = None
        self.pieces: list[bytes] | None = None
        self._size = 0
        self._too_big = False

    def wrap(self, relay: Any) -> Any:
        self.pieces, self._size, self._too_big = [], 0, False
        return Recorder(relay, self._piece)

    def _piece(self, data: bytes) -> None:
        if self._too_big or self.pieces is None:
            return
        self._size += len(data)
        if self._size > MAX_KEPT_BYTES:
            self._too_big, self.pieces = True, None
            return
        self.pieces.append(data)

    def whole(self, status: int, raw: bytes) -> None:
        self.raw = raw

    async def end(self, call: Any) -> None:
        size = len(json.dumps(self.body, ensure_ascii=False).encode()) + (
            self._size if self.pieces is not None else len(self.raw or b""))
        if self._too_big or size > MAX_KEPT_BYTES:
            logs.event(log, "request not kept: too large", request_id=call.request_id, limit=MAX_KEPT_BYTES)
            return
        streamed = self.pieces is not None
        answer = assemble_stream(b"".join(self.pieces), call.kind) if streamed else _json_object(self.raw)
        principal = call.principal
        record = call.guard.record if call.guard is not None else None
        try:
            await self.store.put_kept_request(
                id=call.request_id, at=call.started_at, keep=self.keep, key_id=principal.key_id,
                project_id=principal.project_id, org_id=principal.org_id, user_id=principal.user_id,
                endpoint=self.endpoint, kind=call.kind, model=call.model_asked, model_served=call.model_served,
                status=call.status, outcome=call.outcome, streamed=streamed, prompt_tokens=call.prompt_tokens,
                completion_tokens=call.completion_tokens,
                guard_action=(record.action or None) if record is not None else None,
                request=self.body, answer=answer)
        except StoreError as exc:
            logs.event(log, "request not kept", logging.WARNING, request_id=call.request_id, error=str(exc))


def _json_object(raw: bytes | None) -> dict | None:
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return {"text": raw.decode("utf-8", "replace")}
    return value if isinstance(value, dict) else {"value": value}


def assemble_stream(data: bytes, kind: str) -> dict | None:
    """A streamed answer's events, as released to the client, put together as one chat completion
    (or completion): the text of each choice, its tool calls, its finish reason, and the usage."""
    choices: dict[int, dict[str, Any]] = {}
    first: dict[str, Any] = {}
    usage = None
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.startswith("data:"):
            continue
        text = line[5:].strip()
        if not text or text == "[DONE]":
            continue
        try:
            event = json.loads(text)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        if not first:
            first = event
        if isinstance(event.get("usage"), dict):
            usage = event["usage"]
        for choice in event.get("choices") or ():
            if isinstance(choice, dict):
                _add_piece(choices.setdefault(int(choice.get("index") or 0), {}), choice, kind)
    if not first:
        return None
    out: dict[str, Any] = {"id": first.get("id"), "object": "chat.completion" if kind == "chat" else "text_completion",
                           "created": first.get("created"), "model": first.get("model"),
                           "choices": [choices[i] for i in sorted(choices)]}
    if usage is not None:
        out["usage"] = usage
    return out


def _add_piece(into: dict[str, Any], choice: dict, kind: str) -> None:
    into.setdefault("index", int(choice.get("index") or 0))
    if choice.get("finish_reason"):
        into["finish_reason"] = choice["finish_reason"]
    if kind != "chat":
        into["text"] = into.get("text", "") + (choice.get("text") or "")
        return
    message = into.setdefault("message", {"role": "assistant", "content": ""})
    delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
    if isinstance(delta.get("content"), str):
        message["content"] = (message.get("content") or "") + delta["content"]
    for call in delta.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        calls = message.setdefault("tool_calls", [])
        index = int(call.get("index") or 0)
        while len(calls) <= index:
            calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        kept = calls[index]
        kept["id"] = call.get("id") or kept["id"]
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        kept["function"]["name"] += function.get("name") or ""
        kept["function"]["arguments"] += function.get("arguments") or ""


# ---------------------------------------------------------------- the sweep


async def sweep(store: Any) -> int:
    """Remove the kept requests whose time is up (run by the client data janitor); how many."""
    try:
        gone = await store.delete_expired_kept_requests()
    except StoreError as exc:
        logs.event(log, "expired kept requests not removed", logging.WARNING, error=str(exc))
        return 0
    if gone:
        logs.event(log, "expired kept requests removed", count=gone)
    return gone


# ---------------------------------------------------------------- replay


class ReplayRefused(Exception):
    """A replay that cannot be sent: (status, reason)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def answer_text(answer: dict | None) -> str:
    """The text of an answer's first choice ('' when it has none)."""
    if not isinstance(answer, dict):
        return ""
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        error = answer.get("error")
        return f"(error: {error.get('message')})" if isinstance(error, dict) else ""
    first = choices[0]
    if isinstance(first.get("text"), str):
        return first["text"]
    message = first.get("message") if isinstance(first.get("message"), dict) else {}
    text = message.get("content") if isinstance(message.get("content"), str) else ""
    calls = [c.get("function", {}).get("name", "") for c in message.get("tool_calls") or () if isinstance(c, dict)]
    if calls:
        text += ("\n" if text else "") + "(tool calls: " + ", ".join(calls) + ")"
    return text


async def replay(gateway_app: web.Application, kept: Any, model: str) -> tuple[int, dict, str]:
    """Send a kept request again to `model`, through the pipeline as the key that made it, not streamed
    and not kept again: (status, the answer, its request id)."""
    from aiohttp import test_utils

    from llmgw.auth.keys import principal_of, refuse_unusable
    from llmgw.auth.principal import AuthError
    from llmgw.router.gateway import GATEWAY, INTERNAL_PRINCIPAL, REQUEST_ID
    from llmgw.router.pipeline import new_request_id, serve

    data = gateway_app.get(CLIENT_DATA)
    store = data.store if data is not None else None
    if store is None:
        raise ReplayRefused(503, "the gateway beside this admin API runs without a store")
    key = await store.get_key(kept.key_id) if kept.key_id else None
    resolved = await store.resolve_key(key.key_hash) if key is not None else None
    if resolved is None:
        raise ReplayRefused(409, f"request {kept.id}'s key {kept.key_id or '(none)'} is gone from the store: "
                                 "a replay is sent as the key that made the request, and billed to it")
    try:
        refuse_unusable(resolved, dt.datetime.now(dt.UTC))
    except AuthError as exc:
        why = getattr(exc, "message", str(exc))
        raise ReplayRefused(409, f"request {kept.id}'s key {kept.key_id} cannot be used now ({why}): a replay "
                                 "is sent as the key that made the request, and billed to it") from None
    principal = principal_of(resolved, gateway_app[GATEWAY].model_aliases())
    body = {k: v for k, v in kept.request.items() if k not in ("stream", "stream_options")}
    body["model"] = model
    raw = json.dumps(body).encode()
    kind = kept.kind if kept.kind in KEPT_KINDS else "chat"
    endpoint, path = (("/v1/chat/completions", "/chat/completions") if kind == "chat"
                      else ("/v1/completions", "/completions"))
    request_id = new_request_id()
    from llmgw.router.batch_worker import _payload

    request = test_utils.make_mocked_request(
        "POST", endpoint, app=gateway_app, payload=_payload(raw), client_max_size=len(raw) + 1,
        headers={"Content-Type": "application/json", "Content-Length": str(len(raw)),
                 "x-llmgw-tags": f"{REPLAY_TAG}={kept.id}"})
    request[REQUEST_ID] = request_id
    request[INTERNAL_PRINCIPAL] = principal
    request[REPLAYING] = kept.id
    response = await serve(request, kind, path)
    answer = response.body if isinstance(response, web.Response) and isinstance(response.body, bytes) else b""
    logs.event(log, "kept request replayed", request_id=request_id, replay_of=kept.id, model=model,
               status=response.status)
    return response.status, _json_object(answer) or {}, request_id


__all__ = ["GATEWAY_APP", "KEPT_KINDS", "KeptRules", "MAX_KEPT_BYTES", "REPLAYING", "REPLAY_TAG", "ReplayRefused",
           "RequestKeeper", "answer_text", "assemble_stream", "begin", "forget_rules", "replay", "rules_of", "sweep"]
