"""engine: the request sent to a replica's engine and its answer relayed back: retried on another
replica (or the model's fallbacks) while nothing has reached the client; a stream relayed through the
guard's check, the client-data hooks and the dialect's events; a whole answer put in OpenAI's shape,
checked by the guard and shown to the hooks. The usage the engine reports goes on the call."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiohttp import web

from llmgw.obs import logs
from llmgw.router import openai_shape, residency
from llmgw.router.admission import Grant
from llmgw.router.choose import Want
from llmgw.router.client_data import saw_answer, wrap_stream
from llmgw.router.errors import ERROR, JSON, GatewayError, dumps
from llmgw.router.gateway import Gateway
from llmgw.router.proxy import UpstreamFailure, first_events, read_whole, relay_stream
from llmgw.router.sse import SSERelay, find_usage
from llmgw.router.stages.base import CLIENT_CLOSED, NO_SPAN, Call, Turn, answer_headers, span

log = logs.get("llmgw.router.requests")

class EngineStage:
    name = "engine"

    async def enter(self, turn: Turn) -> web.StreamResponse:
        return await forward(turn.gw, turn.call, turn.request, turn.body_bytes, turn.body, turn.grants)

    async def leave(self, turn: Turn) -> None:
        return None


def _engine_body(gw: Gateway, call: Call, body: dict, body_bytes: bytes, engine_model: str) -> bytes:
    """The body the engine gets: its own name for the model, usage asked for, our metadata kept back."""
    changes: dict[str, Any] = {}
    if body.get("model") != engine_model:
        changes["model"] = engine_model
    if call.stream and gw.config.router.inject_usage and not call.client_wants_usage:
        options = body.get("stream_options")
        changes["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    drop = "metadata" in body
    if not changes and not drop:
        return body_bytes
    out = {k: v for k, v in body.items() if k != "metadata"}
    out.update(changes)
    return dumps(out)


async def forward(gw: Gateway, call: Call, request: web.Request, body_bytes: bytes, body: dict,
                   grants: list[Grant]) -> web.StreamResponse:
    attempts = 1 + max(0, gw.config.router.retries.attempts)
    pause = gw.config.router.retries.backoff.total_seconds()
    total = gw.timeouts.total
    deadline = call.started + total if total else None
    tried: set[str] = set()
    encoded: dict[str, bytes] = {}
    grant = grants[-1]
    fallbacks = _failure_fallbacks(gw, call)
    for attempt in range(attempts + len(fallbacks)):
        replica = grant.replica
        call.replica = replica.id
        tried.add(replica.id)
        engine_model = replica.name_at_engine
        content_type = "application/json"
        if hasattr(call.dialect, "engine_request"):  # a form upload, made anew for each try
            encoded[engine_model], content_type = call.dialect.engine_request(engine_model)
        elif engine_model not in encoded:
            encoded[engine_model] = _engine_body(gw, call, body, body_bytes, engine_model)
        sent_at = time.monotonic()
        relay = SSERelay(strip_usage=not call.client_wants_usage) if call.stream else None
        if relay is not None and call.guard is not None:
            relay = call.guard.wrap(relay)  # guard: text released only once checked
        relay = wrap_stream(call, relay)  # client data: the stream as checked, seen by a thread or the cache
        if relay is not None and call.dialect is not None:
            relay = call.dialect.relay(relay)  # outermost: it writes the client's API's events
        first = b""
        engine_span = None  # tracing: this attempt's span, its context sent to the engine as traceparent
        if call.trace is not None:
            engine_span = call.trace.engine(replica_id=replica.id, url=replica.base_url, model=engine_model,
                                            attempt=attempt + 1)
        try:
            resp = await gw.upstream.open(replica, call.path, encoded[engine_model], request_id=call.request_id,
                                          stream=call.stream, deadline=deadline, content_type=content_type,
                                          trace=None if engine_span is None else call.trace.headers(engine_span))
            if relay is not None and resp.status == 200:
                first = await first_events(resp, relay, gw.timeouts, sent_at, deadline, replica)
            if engine_span is not None:
                engine_span.add_event("first byte")
        except UpstreamFailure as failure:
            if engine_span is not None:
                call.trace.engine_done(engine_span, status=failure.status, error=failure)
            if failure.counts:
                replica.failed(failure.code)
            logs.event(log, "engine failed", logging.WARNING, request_id=call.request_id, replica_id=replica.id,
                       model=call.model_served, error_code=failure.code, attempt=attempt + 1)
            if not failure.retryable or attempt + 1 >= attempts:
                # the model's fallbacks, tried on its first failure (not once its replicas are ejected)
                again = _fallback_grant(gw, call, fallbacks, grant.band) if failure.retryable else None
                if again is None:
                    raise failure.as_error() from None
                grants.append(again)
                gw.admission.release(grant)
                grant = again
                continue
            if pause:
                await asyncio.sleep(pause)
            again = gw.admission.try_now(call.model_served, Want(exclude=frozenset(tried), cluster_only=bool(
                residency.in_cluster_reason(gw, call.principal, call.guard)),
                routing=gw.routing.get(call.principal.routing)), grant.band)  # routing profiles: kept on a retry
            if again is None:
                again = _fallback_grant(gw, call, fallbacks, grant.band)
            if again is None:
                raise failure.as_error() from None
            gw.metrics.retries.labels(call.model_served).inc()
            grants.append(again)
            gw.admission.release(grant)
            grant = again
            continue
        except BaseException as exc:
            if engine_span is not None:
                call.trace.engine_done(engine_span, error=exc)
            raise
        if engine_span is None:
            return await _answer(gw, call, request, resp, relay, first, deadline)
        try:
            response = await _answer(gw, call, request, resp, relay, first, deadline, engine_span)
        except BaseException as exc:
            call.trace.engine_done(engine_span, status=resp.status, error=exc)
            raise
        call.trace.engine_done(engine_span, status=resp.status, code=call.code if call.outcome == ERROR else None)
        return response
    raise AssertionError("unreachable")  # pragma: no cover


def _failure_fallbacks(gw: Gateway, call: Call) -> list[str]:
    """The models a request moves to when its model's engines fail it before answering: its fallbacks
    the key may use (and, for a key kept in the cluster, those served there), the one serving it left out."""
    principal = call.principal
    chain = [f for f in gw.catalog.fallbacks(call.model)
             if f != call.model_served and principal is not None and principal.may_use(f)]
    if chain and residency.in_cluster_reason(gw, principal, call.guard):
        chain = [f for f in chain if residency.served_in_cluster(gw, f)]
    return chain


def _fallback_grant(gw: Gateway, call: Call, fallbacks: list[str], band: str) -> Grant | None:
    """Room at once on the next of `fallbacks` that has a healthy replica; it is taken off the list."""
    while fallbacks:
        candidate = fallbacks.pop(0)
        grant = gw.admission.try_now(candidate, Want(routing=gw.routing.get(call.principal.routing)), band)
        if grant is None:
            continue
        gw.metrics.fallbacks.labels(call.model, candidate, "upstream_failed").inc()
        logs.event(log, "moved to a fallback", logging.WARNING, request_id=call.request_id, model=call.model,
                   failed=call.model_served, fallback=candidate)
        call.model_served = candidate
        return grant
    return None


async def _answer(gw: Gateway, call: Call, request: web.Request, resp, relay: Any, first: bytes,
                  deadline: float | None, engine_span: Any = None) -> web.StreamResponse:
    replica = gw.replicas.get(call.replica)
    headers = answer_headers(call)
    if relay is not None and resp.status == 200:
        if replica is not None:
            replica.succeeded()
        with NO_SPAN if engine_span is None else call.trace.span("stream", parent=engine_span):
            response, outcome = await relay_stream(request, resp, headers, relay, first, gw.timeouts, deadline)
        call.first_at, call.last_at = outcome.first_at, outcome.last_at
        _take_usage(call, relay.usage)
        if not call.usage_known:
            call.completion_tokens = max(0, relay.events)
        if outcome.client_gone:
            call.status, call.outcome = CLIENT_CLOSED, CANCELLED
        elif outcome.failure is not None:
            call.status, call.outcome, call.code = 200, ERROR, outcome.failure.code
            if replica is not None:
                replica.failed(outcome.failure.code)
        return response
    try:
        raw = await read_whole(resp, deadline)
    except GatewayError as exc:
        if replica is not None:
            replica.failed(exc.code)
        raise
    finally:
        resp.release()
    if replica is not None:
        replica.succeeded()
    call.status = resp.status
    if resp.status >= 400:
        call.outcome = ERROR
        call.code = "engine_refused"
    else:
        _take_usage(call, find_usage(raw))
        if call.kind == "chat":
            raw = openai_shape.chat_answer(raw)  # refusal, annotations, call_ ids: as OpenAI answers
        if call.guard is not None:
            with span(call, "guard output"):
                raw = await call.guard.filter_answer(raw)  # guard: the answer checked whole
            headers = answer_headers(call)
    saw_answer(call, resp.status, raw)  # client data: the answer as checked, seen by a thread or the cache
    content_type = resp.headers.get("Content-Type", JSON)
    if call.dialect is not None:
        status, raw = call.dialect.answer(resp.status, raw)
        if getattr(call.dialect, "keeps_content_type", False):  # audio as text, SRT or VTT: the engine's type
            return web.Response(status=status, body=raw, headers={**headers, "Content-Type": content_type})
        return web.Response(status=status, body=raw, headers={**headers, "Content-Type": JSON})
    return web.Response(status=resp.status, body=raw, headers={**headers, "Content-Type": content_type})


def _take_usage(call: Call, usage: dict | None) -> None:
    if not usage:
        return
    call.usage_known = True
    # rerank: only a total (vLLM), all of it read
    call.prompt_tokens = _int(usage.get("prompt_tokens" if "prompt_tokens" in usage else "total_tokens"))
    call.completion_tokens = _int(usage.get("completion_tokens"))
    if "input_tokens" in usage or "output_tokens" in usage:  # audio: OpenAI's names for them
        call.prompt_tokens, call.completion_tokens = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        call.cached_tokens = _int(details.get("cached_tokens"))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
