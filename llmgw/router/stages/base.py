"""What every stage shares: the request's record (`Call`), the request in flight (`Turn`), the `Stage`
protocol, and the few helpers more than one stage writes with (a traced span, the answer's headers, the
client-data hooks a stage leaves and ends)."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from typing import Any, Protocol

import attrs
from aiohttp import web

from llmgw.accounting.api import Reservation
from llmgw.auth.principal import Principal
from llmgw.router.client_data import end_hooks
from llmgw.router.dialects import Dialect
from llmgw.router.errors import OK
from llmgw.router.gateway import Gateway


#: Kinds whose answer is not generated text (no stream, no max_tokens held, no prompt prefix to place by).
NOT_GENERATED = frozenset({"embedding", "rerank", "score"})
#: The status written to usage rows of requests whose client went away (nginx's).
CLIENT_CLOSED = 499


@attrs.define(slots=True)
class Call:
    """What one request did, filled in as it goes; becomes its usage row and metrics."""

    request_id: str
    kind: str  # chat, completion, embedding
    path: str  # the engine's path, like /chat/completions
    started: float = attrs.Factory(time.monotonic)
    started_at: dt.datetime = attrs.Factory(lambda: dt.datetime.now(dt.UTC))
    principal: Principal | None = None
    model_asked: str = ""
    model: str = ""  # the catalog model asked for (alias resolved)
    model_served: str = ""
    replica: str = ""
    band: str = ""
    queue_s: float | None = None
    stream: bool = False
    client_wants_usage: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    usage_known: bool = False
    cost_micros: int = 0
    status: int = 200
    outcome: str = OK
    code: str = ""
    limited: bool = False
    first_at: float | None = None
    last_at: float | None = None
    client_user: str | None = None
    metadata: dict[str, Any] | None = None
    tags: tuple[str, ...] = ()
    guard: Any = None  # guard: the request's llmgw.guard.gateway.GuardRequest, when a policy applies
    dialect: Dialect | None = None  # another API's request (Anthropic, Responses) run as a chat completion
    hooks: list[Any] = attrs.Factory(list)  # client data: what sees the answer (a thread's, the cache's)
    headers: dict[str, str] = attrs.Factory(dict)  # client data: x-llmgw-thread-trimmed, x-llmgw-cache
    trace: Any = None  # tracing: the request's llmgw.obs.tracing.RequestTrace; None when not traced


@attrs.define(slots=True)
class Turn:
    """One request on its way through the stages: what each stage reads and leaves for the next."""

    gw: Gateway
    request: web.Request
    call: Call
    body_bytes: bytes = b""
    body: dict = attrs.Factory(dict)
    model: str = ""  # the model the limits hold for (a spent budget may move it to a fallback)
    reservation: Reservation | None = None  # the limits' hold, settled by accounting
    grants: list[Any] = attrs.Factory(list)  # admission's room on replicas, every one let go on the way out
    answer: web.StreamResponse | None = None  # what the client gets, once there is one
    hooks_of: dict[str, list[Any]] = attrs.Factory(dict)  # stage name -> the client-data hooks it left


class Stage(Protocol):
    """One step of the serving path. `enter` sees the request on its way in: it changes the turn, refuses
    (raises GatewayError) or answers (returns the answer, and no stage after it is entered). `leave` sees
    the answer on its way out, once, for every stage entered, in the reverse order, whatever happened
    (`turn.call` says how the request ended; `turn.answer` is what the client gets)."""

    name: str

    async def enter(self, turn: Turn) -> web.StreamResponse | None: ...

    async def leave(self, turn: Turn) -> None: ...


class HookStage:
    """A stage whose work on the way out is the client-data hooks it left on the call (a thread's turn
    kept, an answer cached, a request kept): they see the answer as it goes (client_data.wrap_stream and
    saw_answer) and are ended, each once, when this stage is left."""

    name = "hooks"

    async def enter(self, turn: Turn) -> web.StreamResponse | None:
        before = len(turn.call.hooks)
        try:
            return await self.begin(turn)
        finally:
            turn.hooks_of[self.name] = turn.call.hooks[before:]

    async def begin(self, turn: Turn) -> web.StreamResponse | None:  # pragma: no cover - each stage's own
        raise NotImplementedError

    async def leave(self, turn: Turn) -> None:
        hooks = turn.hooks_of.pop(self.name, None)
        if hooks:
            await end_hooks(turn.call, hooks)


#: tracing: what a stage opens when its request is not traced: no span, nothing made.
NO_SPAN = contextlib.nullcontext()


def span(call: Call, name: str):
    """tracing: a stage's span (`with span(call, "auth"):`) when the request is traced."""
    return NO_SPAN if call.trace is None else call.trace.span(name)


def answer_headers(call: Call) -> dict[str, str]:
    """The headers every answer of the gateway's own carries: queue time, the model served, the guard's,
    and what the stages put in call.headers (limits, threads, the cache)."""
    headers = {}
    if call.queue_s is not None:
        headers["x-llmgw-queue-ms"] = str(int(call.queue_s * 1000))
    if call.model_served and call.model and call.model_served != call.model:
        headers["x-llmgw-served-model"] = call.model_served
    if call.guard is not None:
        headers.update(call.guard.headers())  # guard: x-llmgw-guard, x-llmgw-guard-policy
    headers.update(call.headers)  # client data
    return headers


__all__ = ["CLIENT_CLOSED", "NOT_GENERATED", "Call", "HookStage", "NO_SPAN", "Stage", "Turn", "answer_headers", "span"]
