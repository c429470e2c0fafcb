"""One generation or embedding request, from arrival to its usage row.

auth → body → model and allowlist → limits and budget (a spent budget
moves to a fallback) → admission (no replica or a full queue moves to a
fallback) → replica → engine, retried on another replica while nothing has
reached the client → answer relayed → settlement, usage row, metrics.

Every refusal on the way is a `GatewayError` with a code and a reason,
recorded like a request that was served.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import time
from typing import Any

import attrs
from aiohttp import web

from llmgw.accounting.api import LimitExceeded, Reservation
from llmgw.auth.principal import ANONYMOUS, Principal
from llmgw.obs import logs
from llmgw.router import cache as answer_cache
from llmgw.router import openai_shape
from llmgw.router import kept_requests, residency, threads
from llmgw.router.admission import Grant, NoReplica, QueueFull
from llmgw.router.slo import SloExceeded
from llmgw.router.body import read_json_body
from llmgw.router.canary import VARIANT_HEADER, session_key
from llmgw.router.choose import Want, prefix_hashes, prompt_text
from llmgw.router.client_data import end_hooks, saw_answer, wrap_stream
from llmgw.router.dialects import Dialect
from llmgw.router.errors import (
    CANCELLED,
    ERROR,
    JSON,
    OK,
    GatewayError,
    bad_request,
    dumps,
)
from llmgw.router.fit import fit_max_tokens, project_is_strict
from llmgw.router.gateway import CLIENT_REQUEST_ID, GATEWAY, REQUEST_ID, REQUEST_TRACE, Gateway
from llmgw.router.ratelimit_headers import rate_headers
from llmgw.router.proxy import UpstreamFailure, first_events, read_whole, relay_stream
from llmgw.router.sse import SSERelay, find_usage
from llmgw.store.records import UsageRow

log = logs.get("llmgw.router.requests")

#: Tokens held against a budget for an answer whose request sets no max_tokens.
DEFAULT_MAX_TOKENS = 1024
#: Tags read from x-llmgw-tags at most, and their longest length.
MAX_TAGS, MAX_TAG_CHARS = 16, 128
#: The status written to usage rows of requests whose client went away (nginx's).
CLIENT_CLOSED = 499
#: The metrics' model label of a request for no known model: a client's made-up names must not become series.
UNKNOWN_MODEL = "unknown"
#: Kinds whose answer is not generated text (no stream, no max_tokens held, no prompt prefix to place by).
NOT_GENERATED = frozenset({"embedding", "rerank", "score"})


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


#: tracing: what a stage opens when its request is not traced: no span, nothing made.
_NO_SPAN = contextlib.nullcontext()


def _span(call: Call, name: str):
    """tracing: a stage's span (`with _span(call, "auth"):`) when the request is traced."""
    return _NO_SPAN if call.trace is None else call.trace.span(name)


class _RequestIds:
    """`req_` and 24 random hex digits, the random bytes read from the system 512 ids at a time (one
    read a request was a system call's worth of the request's CPU); a forked child reads its own."""

    def __init__(self) -> None:
        self._hex, self._at = "", 0
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._hex, self._at = "", 0

    def __call__(self) -> str:
        at = self._at
        if at >= len(self._hex):
            self._hex, at = os.urandom(12 * 512).hex(), 0
        self._at = at + 24
        return "req_" + self._hex[at:at + 24]


new_request_id = _RequestIds()


async def serve(request: web.Request, kind: str, path: str, dialect: Dialect | None = None) -> web.StreamResponse:
    """Answer one POST to /v1/chat/completions, /v1/completions or /v1/embeddings; with a
    `dialect`, one of another API that it translates to a chat completion and back."""
    gw = request.app[GATEWAY]
    call = Call(request_id=request.get(REQUEST_ID) or new_request_id(), kind=kind, path=path, dialect=dialect)
    call.trace = request.get(REQUEST_TRACE)
    logged_as = logs.REQUEST_ID.set(call.request_id)  # a batch's lines too: every log line names its request
    reservation: Reservation | None = None
    grants: list[Grant] = []
    try:
        with _span(call, "auth"):
            call.principal = await gw.authenticate(request)
        reader = getattr(dialect, "read_body", None)  # a form upload (audio), not a JSON body
        if reader is not None:
            body_bytes, body = await reader(request, gw)
        else:
            body_bytes, body = await read_json_body(request, gw, getattr(dialect, "operation", None) or kind)
        if dialect is not None:
            body = await dialect.chat_body(body, call.principal)
            body_bytes = dumps(body)
        _read_request(call, request, body)
        principal = call.principal
        model = gw.catalog.resolve(call.model_asked)
        if model is None:
            names = ", ".join(gw.allowed_models(principal)) or "none"
            raise GatewayError(404, "model_not_found",
                               f"no model called {call.model_asked!r} is served here; your key may use: {names}",
                               param="model")
        call.model = model
        # federation: a loop or a peer's request for another peer's model refused; a down peer's reason
        gw.federation.check(request, model, gw.catalog.fallbacks(model))
        if not (principal.may_use(model) or principal.may_use(call.model_asked)):
            raise GatewayError(403, "model_not_allowed", f"this key may not use {call.model_asked!r}", param="model")
        # client data: a thread's stored conversation in front of the new turn, before the limits count it
        body_bytes, body = await threads.attach(gw, call, request, body_bytes, body)
        # max_tokens lowered to what the context leaves, before the budget holds on it (llmgw.router.fit)
        body_bytes, body = await fit_max_tokens(gw, call, model, body_bytes, body,
                                                lambda: project_is_strict(request, principal))
        with _span(call, "limits"):
            reservation, model = await _admit(gw, call, principal, model, body_bytes, body)
        call.headers.update(_rate_headers(gw, call))  # what is left of the key's limits, this request counted
        # guard: the input checked after the limits and before admission; a refusal costs nothing
        if gw.guard is not None and (guard := gw.guard.begin(principal, model, call.kind)) is not None:
            call.guard = guard
            with _span(call, "guard input"):
                body = await guard.check_input(body)
            if guard.changed:
                body_bytes = dumps(body)
                for hook in call.hooks:  # guard: a thread keeps the turn as checked, never a redacted value
                    if hasattr(hook, "checked"):
                        hook.checked(body)
        # client data: an answer kept for this very request, after the limits and the input check
        if (hit := await answer_cache.lookup(gw, call, request, body)) is not None:
            return hit
        await kept_requests.begin(gw, call, request, body)  # kept requests: the key's, as checked, when it asked
        call.band = gw.band_for(request, principal)
        with _span(call, "admission"):
            grant, served = await _acquire(gw, call, principal, model, body, request)
        grants.append(grant)
        call.model_served = served
        call.queue_s = grant.waited
        gw.metrics.queued(served, grant.band, grant.waited)
        return await _forward(gw, call, request, body_bytes, body, grants)
    except GatewayError as exc:
        call.status, call.outcome, call.code, call.limited = exc.status, exc.outcome, exc.code, exc.limited
        if exc.limited and call.principal is not None:
            call.headers.update(_rate_headers(gw, call))
        if dialect is not None:
            return dialect.error_response(exc, _answer_headers(call))
        return exc.response(_answer_headers(call))
    except asyncio.CancelledError:
        call.status, call.outcome = CLIENT_CLOSED, CANCELLED
        raise
    except Exception:  # a fault of ours: a 500 with the request id, recorded as an error, never as ok
        call.status, call.outcome, call.code = 500, ERROR, "internal_error"
        log.exception("request failed", extra={"fields": {"request_id": call.request_id, "path": request.path}})
        gw.metrics.http_errors.labels(call.path).inc()
        if call.first_at is not None:  # part of the answer is out: the connection is cut instead
            raise
        exc = GatewayError(500, "internal_error",
                           f"the gateway failed on this request; quote request id {call.request_id}",
                           outcome=ERROR, type="server_error")
        if dialect is not None:
            return dialect.error_response(exc, _answer_headers(call))
        return exc.response(_answer_headers(call))
    finally:
        for grant in grants:
            gw.admission.release(grant)
        await end_hooks(call)  # client data: the turn or the answer kept, a thread's lock let go
        try:
            with _span(call, "accounting"):
                await _finish(gw, call, reservation)
        finally:
            if call.trace is not None:
                call.trace.finish(call)
            logs.REQUEST_ID.reset(logged_as)


# ---------------------------------------------------------------- reading the request


def _read_request(call: Call, request: web.Request, body: dict) -> None:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("name a model in `model`; GET /v1/models lists the ones your key may use",
                          param="model", code="missing_model")
    call.model_asked = model
    if call.kind not in NOT_GENERATED:
        call.stream = body.get("stream") is True
        options = body.get("stream_options")
        call.client_wants_usage = call.stream and isinstance(options, dict) and options.get("include_usage") is True
    user = body.get("user")
    call.client_user = user[:256] if isinstance(user, str) and user else None
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and metadata:
        call.metadata = {str(k)[:64]: (v if isinstance(v, str) else dumps(v).decode())[:512]
                         for k, v in list(metadata.items())[:16]}
    tags = request.headers.get("x-llmgw-tags")
    if tags:
        call.tags = tuple(t.strip()[:MAX_TAG_CHARS] for t in tags.split(",") if t.strip())[:MAX_TAGS]
    client_id = request.get(CLIENT_REQUEST_ID)
    if client_id:  # kept findable without letting a client choose the row's id
        call.tags = (*call.tags, f"client_request_id={client_id}")


def _max_tokens(body: dict) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and value > 0:
            n = body.get("n")
            return value * (n if isinstance(n, int) and n > 0 else 1)
    return DEFAULT_MAX_TOKENS


# ---------------------------------------------------------------- limits and room


async def _admit(gw: Gateway, call: Call, principal: Principal, model: str, body_bytes: bytes,
                 body: dict) -> tuple[Reservation, str]:
    """Hold the request's cost; a spent budget tries the model's fallbacks, in order."""
    prompt_estimate = max(1, len(body_bytes) // 4)
    max_tokens = 0 if call.kind in NOT_GENERATED else _max_tokens(body)
    try:
        return await gw.accountant.admit(principal, model, prompt_tokens=prompt_estimate,
                                         max_tokens=max_tokens), model
    except LimitExceeded as exc:
        refusal = exc
    if refusal.code == "budget_exceeded":
        for fallback in gw.catalog.fallbacks(model):
            if not principal.may_use(fallback):
                continue
            try:
                reservation = await gw.accountant.admit(principal, fallback, prompt_tokens=prompt_estimate,
                                                        max_tokens=max_tokens)
            except LimitExceeded:
                continue
            gw.metrics.fallbacks.labels(model, fallback, "budget").inc()
            return reservation, fallback
    # 503 when the shared limits store is down and limits.on_store_down is refuse (llmgw.accounting.limits_redis)
    raise GatewayError(refusal.status, refusal.code, refusal.message, retry_after=refusal.retry_after, limited=True)


async def _acquire(gw: Gateway, call: Call, principal: Principal, model: str, body: dict,
                   request: web.Request) -> tuple[Grant, str]:
    """Room on a replica of `model`, else of its fallbacks when it has no replica or a full queue."""
    session = request.headers.get("x-session-id") or call.client_user
    text = prompt_text(body) if call.kind not in NOT_GENERATED else ""
    chain = [model, *(f for f in gw.catalog.fallbacks(model) if principal.may_use(f))]
    # residency: a key kept in the cluster skips models served outside it, and is refused when none is left
    stay = residency.in_cluster_reason(gw, principal, call.guard)
    if stay:
        inside = [c for c in chain if residency.served_in_cluster(gw, c)]
        if not inside:
            raise residency.refusal(model, stay)
        chain = inside
    # canary: a share of the model's sessions (or a request asking for it) tries the newer revision first
    canary = gw.canary.side(model, session_key(principal.key_id, request.headers, call.client_user),
                            request.headers.get(VARIANT_HEADER))
    if canary is not None:
        chain = [canary, *chain]
    first: GatewayError | None = None
    routing = gw.routing.get(principal.routing)  # routing profiles: the key's (refused when unknown here)
    for candidate in chain:
        want = Want(session=session[:256] if session else None, prefix=prefix_hashes(candidate, text),
                    cluster_only=bool(stay), routing=routing)
        try:
            grant = await gw.admission.acquire(candidate, call.band, want)
        except NoReplica as exc:
            if candidate == canary and not request.headers.get(VARIANT_HEADER):
                continue  # a canary not serving yet: its share goes to the model itself
            grant = await _start_on_demand(gw, call, candidate, want)
            if grant is None:
                first = first or exc
                continue
        except (QueueFull, SloExceeded) as exc:  # slo: a shed band's request may still go to a fallback
            first = first or exc
            continue
        plane = _control_plane(gw)
        if plane is not None:
            plane.touch(candidate)  # keeps an on-demand model from being stopped as idle
        if candidate != model and candidate != canary:
            reason = ("queue_full" if isinstance(first, QueueFull)
                      else "slo" if isinstance(first, SloExceeded) else "no_replica")
            gw.metrics.fallbacks.labels(model, candidate, reason).inc()
        return grant, candidate
    assert first is not None
    raise first


def _control_plane(gw: Gateway):
    return gw.control.plane if gw.control is not None else None


async def _start_on_demand(gw: Gateway, call: Call, model: str, want: Want) -> Grant | None:
    """A model the control plane knows but runs nowhere yet: start it and wait, within the band's wait."""
    plane = _control_plane(gw)
    if plane is None or not plane.knows(model):
        return None
    from llmgw.control.state import ModelUnavailable

    try:
        await plane.ensure_started(model, timeout=gw.admission.max_wait(call.band))
        return await gw.admission.acquire(model, call.band, want)
    except (ModelUnavailable, TimeoutError, NoReplica, QueueFull):
        return None


# ---------------------------------------------------------------- to the engine and back


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


async def _forward(gw: Gateway, call: Call, request: web.Request, body_bytes: bytes, body: dict,
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
    headers = _answer_headers(call)
    if relay is not None and resp.status == 200:
        if replica is not None:
            replica.succeeded()
        with _NO_SPAN if engine_span is None else call.trace.span("stream", parent=engine_span):
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
            with _span(call, "guard output"):
                raw = await call.guard.filter_answer(raw)  # guard: the answer checked whole
            headers = _answer_headers(call)
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


def _rate_headers(gw: Gateway, call: Call) -> dict[str, str]:
    """x-ratelimit-* (anthropic-ratelimit-* on /v1/messages) from the key's own limits."""
    anthropic = getattr(call.dialect, "operation", None) == "messages"
    return rate_headers(gw.accountant, call.principal, anthropic=anthropic)


def _answer_headers(call: Call) -> dict[str, str]:
    headers = {}
    if call.queue_s is not None:
        headers["x-llmgw-queue-ms"] = str(int(call.queue_s * 1000))
    if call.model_served and call.model and call.model_served != call.model:
        headers["x-llmgw-served-model"] = call.model_served
    if call.guard is not None:
        headers.update(call.guard.headers())  # guard: x-llmgw-guard, x-llmgw-guard-policy
    headers.update(call.headers)  # client data
    return headers


# ---------------------------------------------------------------- settling and recording


async def _finish(gw: Gateway, call: Call, reservation: Reservation | None) -> None:
    """Settle or release the hold, queue the usage row, count the request.

    Runs to the end even when the request is cancelled meanwhile (a client
    closing its connection just after the answer): the row and the charge
    are never lost; the cancellation is passed on afterwards.
    """
    now = time.monotonic()
    interrupted = False
    try:
        if not call.usage_known and call.completion_tokens and call.model_served:
            call.prompt_tokens = call.prompt_tokens or (reservation.prompt_tokens_estimate if reservation else 0)
        if reservation is not None:
            if call.prompt_tokens or call.completion_tokens:
                settling = asyncio.ensure_future(gw.accountant.settle(
                    reservation, model_served=call.model_served or reservation.model,
                    prompt_tokens=call.prompt_tokens, completion_tokens=call.completion_tokens,
                    cached_tokens=call.cached_tokens))
                while True:
                    try:
                        call.cost_micros = await asyncio.shield(settling)
                        break
                    except asyncio.CancelledError:
                        interrupted = True
                        if settling.done():
                            call.cost_micros = 0 if settling.cancelled() else settling.result()
                            break
            else:
                gw.accountant.release(reservation)
    except Exception:
        log.exception("settling a request failed", extra={"fields": {"request_id": call.request_id}})
    _account(gw, call, now)
    if interrupted:
        raise asyncio.CancelledError


def _account(gw: Gateway, call: Call, now: float) -> None:
    """The usage row, the metrics and the log line of a finished request."""
    principal = call.principal
    ttft = (call.first_at - call.started) if call.first_at is not None else None
    tpot = None
    if call.first_at is not None and call.last_at is not None and call.completion_tokens > 1:
        tpot = (call.last_at - call.first_at) / (call.completion_tokens - 1)
    if principal is not None:
        _record(gw, call, principal, now, ttft)
    if call.stream and ttft is not None and call.model_served:  # slo: the served model's recent first tokens
        gw.slo.observe(call.model_served, ttft)
    if principal is None:  # refused before a key was known
        tenant = "unknown"
    elif principal is ANONYMOUS:
        tenant = "anonymous"
    else:
        tenant = principal.project_id or "none"
    outcome = "limited" if call.limited else call.outcome
    try:
        gw.metrics.request_done(model=call.model_served or call.model or UNKNOWN_MODEL, tenant=tenant, outcome=outcome,
                                duration=now - call.started, prompt_tokens=call.prompt_tokens,
                                completion_tokens=call.completion_tokens, ttft=ttft, tpot=tpot, tags=call.tags)
    except Exception:
        log.exception("metrics failed", extra={"fields": {"request_id": call.request_id}})
    level = logging.INFO if call.outcome == OK else logging.WARNING
    logs.event(log, "request", level, request_id=call.request_id, key_id=principal.key_id if principal else None,
               model=call.model_asked, served=call.model_served, replica_id=call.replica, status=call.status,
               outcome=call.outcome, code=call.code or None, prompt_tokens=call.prompt_tokens,
               completion_tokens=call.completion_tokens, ms=int((now - call.started) * 1000),
               queue_ms=int(call.queue_s * 1000) if call.queue_s is not None else None,
               **_guard_fields(call))


def _guard_fields(call: Call) -> dict[str, Any]:
    """guard: what the access log says of the guardrails: the action, its stage and the policies."""
    record = call.guard.record if call.guard is not None else None
    if record is None or not record.action:
        return {}
    return {"guard_action": record.action, "guard_stage": record.stage, "guard_policy": record.policy}


def _guard_columns(call: Call) -> dict[str, Any]:
    """guard: the usage row's guard_* columns: action, policies, category and check time, never text."""
    if call.guard is None:
        return {}
    r = call.guard.record
    return {"guard_action": r.action or None, "guard_policy": r.policy or None,
            "guard_category": r.category or None, "guard_ms": r.ms}


def _record(gw: Gateway, call: Call, principal: Principal, now: float, ttft: float | None) -> None:
    row = UsageRow(
        request_id=call.request_id, at=call.started_at,
        key_id=principal.key_id or None, project_id=principal.project_id, team_id=principal.team_id,
        org_id=principal.org_id, user_id=principal.user_id,
        model_requested=call.model_asked, model_served=call.model_served if call.replica else "",
        replica=call.replica, prompt_tokens=call.prompt_tokens, completion_tokens=call.completion_tokens,
        cached_tokens=call.cached_tokens, cost_micros=call.cost_micros, status=call.status,
        outcome=call.outcome,
        latency_ms=int((now - call.started) * 1000),
        ttft_ms=int(ttft * 1000) if ttft is not None else None,
        client_user=call.client_user, metadata=call.metadata, tags=call.tags,
        **_guard_columns(call),
    )
    try:
        gw.accountant.record(row)
    except Exception:
        log.exception("recording usage failed", extra={"fields": {"request_id": call.request_id}})
