"""Anthropic's Messages API as the gateway serves it: /v1/messages and /v1/messages/count_tokens.

A Messages request runs through the same pipeline as a chat completion
(`llmgw.router.dialects`): key (`x-api-key` or a bearer token), limits,
admission, replica, engine, accounting. `anthropic-version` and
`anthropic-beta` are accepted and change nothing. Every refusal is in
Anthropic's error shape.

count_tokens asks an engine of the model to count: vLLM's and the
simulated engine's `/tokenize` (chat messages in, `count` out), else
llama-server's `/apply-template` and `/tokenize`; with no engine that
answers, it estimates. It takes no room on a replica and is not charged,
recorded or counted against any limit.
"""

from __future__ import annotations

import asyncio
import math

import aiohttp
from aiohttp import web

from llmgw.auth.principal import Principal
from llmgw.obs import logs
from llmgw.router.anthropic import (
    MessageEvents,
    engine_error_message,
    error_payload,
    error_status,
    message_from_chat,
    to_chat,
)
from llmgw.router.body import read_json_body
from llmgw.router.errors import JSON, GatewayError, bad_request, dumps, loads
from llmgw.router.gateway import GATEWAY, Gateway
from llmgw.router.pipeline import serve
from llmgw.router.replicas import Replica
from llmgw.router.sse import SSERelay

log = logs.get("llmgw.router")

#: How long count_tokens waits on an engine before it estimates instead.
TOKENIZE_TIMEOUT = 5.0
#: Replicas asked to count before estimating.
TOKENIZE_TRIES = 2


class MessagesDialect:
    """One /v1/messages request: translated to a chat completion, its answer back to a Message."""

    operation = "messages"  # its schema (llmgw.router.request_schemas)

    def __init__(self) -> None:
        self.model = ""
        self.stop_sequences: list[str] = []

    async def chat_body(self, body: dict, principal: Principal) -> dict:
        self.model = body["model"] if isinstance(body.get("model"), str) else ""
        stops = body.get("stop_sequences")
        self.stop_sequences = [s for s in stops if isinstance(s, str)] if isinstance(stops, list) else []
        return to_chat(body)

    def answer(self, status: int, raw: bytes) -> tuple[int, bytes]:
        if status >= 400:
            status = error_status(status)
            return status, error_payload(status, engine_error_message(raw))
        try:
            answer = loads(raw)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            return 502, error_payload(502, "the engine's answer was not a chat completion")
        return 200, dumps(message_from_chat(answer, self.model, self.stop_sequences))

    def relay(self, inner: SSERelay) -> MessageEvents:
        return MessageEvents(inner, self.model, self.stop_sequences)

    def error_response(self, error: GatewayError, headers: dict[str, str]) -> web.Response:
        return error_response(error, headers)


def error_response(error: GatewayError, headers: dict[str, str] | None = None) -> web.Response:
    """A GatewayError in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`."""
    status = error_status(error.status)
    out = dict(headers or {})
    if error.retry_after is not None:
        out["Retry-After"] = str(max(1, math.ceil(error.retry_after)))
    return web.Response(status=status, body=error_payload(status, error.message), content_type=JSON, headers=out)


async def messages(request: web.Request) -> web.StreamResponse:
    return await serve(request, "chat", "/chat/completions", dialect=MessagesDialect())


# ---------------------------------------------------------------- count_tokens


async def count_tokens(request: web.Request) -> web.Response:
    """`{"input_tokens": N}` for a Messages request, as the model's engine counts it."""
    gw = request.app[GATEWAY]
    try:
        principal = await gw.authenticate(request)
        _, body = await read_json_body(request, gw, "count_tokens")
        asked = body.get("model")
        if not isinstance(asked, str) or not asked:
            raise bad_request("model: name a model; GET /v1/models lists the ones your key may use", param="model")
        model = gw.catalog.resolve(asked)
        if model is None:
            names = ", ".join(gw.allowed_models(principal)) or "none"
            raise GatewayError(404, "model_not_found",
                               f"no model called {asked!r} is served here; your key may use: {names}", param="model")
        if not (principal.may_use(model) or principal.may_use(asked)):
            raise GatewayError(403, "model_not_allowed", f"this key may not use {asked!r}", param="model")
        chat = to_chat({**body, "stream": False})
    except GatewayError as exc:
        return error_response(exc)
    count = await count_prompt(gw, model, chat)
    return web.Response(body=dumps({"input_tokens": count}), content_type=JSON)


async def count_prompt(gw: Gateway, model: str, chat: dict) -> int:
    """The prompt tokens of a chat request as an engine of `model` counts them, else an estimate."""
    replicas = sorted((r for r in gw.replicas.replicas_for(model) if r.usable()), key=lambda r: r.in_flight)
    for replica in replicas[:TOKENIZE_TRIES]:
        try:
            async with asyncio.timeout(TOKENIZE_TIMEOUT):
                count = await _engine_count(gw, replica, chat)
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            logs.event(log, "count_tokens: the engine did not count", replica_id=replica.id,
                       error=type(exc).__name__)
            continue
        if count is not None:
            return count
    return estimate_tokens(chat)


async def _engine_count(gw: Gateway, replica: Replica, chat: dict) -> int | None:
    session = gw.upstream.session
    if session is None:
        return None
    root = replica.base_url.rstrip("/").removesuffix("/v1")
    headers = {"Content-Type": JSON}
    if replica.api_key is not None:
        headers["Authorization"] = "Bearer " + replica.api_key.reveal()
    tools = {"tools": chat["tools"]} if chat.get("tools") else {}
    # vLLM and the simulated engine: chat messages in, a count out.
    asked = {"model": replica.name_at_engine, "messages": chat["messages"], **tools}
    async with session.post(root + "/tokenize", data=dumps(asked), headers=headers) as resp:
        if resp.status == 200:
            answer = loads(await resp.read())
            if isinstance(answer, dict) and isinstance(answer.get("count"), int):
                return answer["count"]
    # llama-server: the chat template applied, then its text tokenized.
    async with session.post(root + "/apply-template", data=dumps({"messages": chat["messages"], **tools}),
                            headers=headers) as resp:
        if resp.status != 200:
            return None
        answer = loads(await resp.read())
    prompt = answer.get("prompt") if isinstance(answer, dict) else None
    if not isinstance(prompt, str):
        return None
    async with session.post(root + "/tokenize", data=dumps({"content": prompt}), headers=headers) as resp:
        if resp.status != 200:
            return None
        answer = loads(await resp.read())
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    return len(tokens) if isinstance(tokens, list) else None


def estimate_tokens(chat: dict) -> int:
    """About four bytes of JSON a token, and a few tokens of template per message."""
    size = len(dumps(chat.get("messages") or [])) + len(dumps(chat.get("tools") or []))
    return max(1, size // 4 + 4 * len(chat.get("messages") or ()))
