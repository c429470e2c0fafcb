"""The client API's aiohttp application: routes, request ids, errors in OpenAI's shape.

`make_router_app(gateway)` builds it; the gateway's HTTP client and scraper
run in its cleanup context. Serve it with `handler_cancellation=True` on the
runner, so a client that goes away cancels its request (and the engine's).
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator

from aiohttp import web

from llmgw.obs import logs
from llmgw.router import anthropic_batches, client_data
from llmgw.router import handlers_anthropic as anthropic
from llmgw.router import handlers_audio as audio
from llmgw.router import handlers_moderations as moderations
from llmgw.router import handlers_openai as h
from llmgw.router import handlers_rerank as rerank
from llmgw.router import handlers_models as models
from llmgw.router import handlers_responses as responses
from llmgw.router import responses_items
from llmgw.router.errors import GatewayError
from llmgw.router.gateway import CLIENT_REQUEST_ID, GATEWAY, REQUEST_ID, REQUEST_TRACE, Gateway
from llmgw.router.pipeline import new_request_id

log = logs.get("llmgw.router")

#: A client's own request id is echoed when it looks like one: letters, digits and ._:-, at most 128.
_SANE_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")


def client_request_id(request: web.Request) -> str | None:
    given = request.headers.get("x-request-id")
    return given if given and _SANE_ID.fullmatch(given) else None


@web.middleware
async def request_ids_and_errors(request: web.Request, handler) -> web.StreamResponse:
    """Give every request an id, and every failure an OpenAI-shaped answer."""
    request[REQUEST_ID] = new_request_id()
    client_id = client_request_id(request)
    if client_id:
        request[CLIENT_REQUEST_ID] = client_id
    logged_as = logs.REQUEST_ID.set(request[REQUEST_ID])  # every log line of this request names it
    try:
        return await handler(request)
    except GatewayError as exc:
        return exc.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(exc.status, "http_error")
        message = {404: f"no such endpoint: {request.method} {request.path}",
                   405: f"{request.method} is not allowed on {request.path}"}.get(exc.status, exc.reason)
        return GatewayError(exc.status, code, message).response()
    except Exception:
        log.exception("request failed", extra={"fields": {"request_id": request[REQUEST_ID], "path": request.path}})
        request.app[GATEWAY].metrics.http_errors.labels(_route_of(request)).inc()
        return GatewayError(500, "internal_error",
                            f"the gateway failed on this request; quote request id {request[REQUEST_ID]}",
                            type="server_error").response()
    finally:
        logs.REQUEST_ID.reset(logged_as)


def _route_of(request: web.Request) -> str:
    """The route's template (/v1/files/{file_id}), so a client's ids do not become series."""
    info = request.match_info.route.resource
    return info.canonical if info is not None else "unmatched"


async def _stamp_ids(request: web.Request, response: web.StreamResponse) -> None:
    """x-request-id (OpenAI's) and request-id (Anthropic's) on every answer: the client's own when it
    sent a sane one, else ours; x-llmgw-request-id is always ours (the id of the usage record)."""
    ours = request.get(REQUEST_ID)
    if ours:
        response.headers["x-request-id"] = response.headers["request-id"] = request.get(CLIENT_REQUEST_ID) or ours
        response.headers["x-llmgw-request-id"] = ours


def make_router_app(gateway: Gateway) -> web.Application:
    middlewares = [request_ids_and_errors]
    if gateway.tracing is not None:  # tracing: a root span per request, inside the request id
        middlewares.append(gateway.tracing.middleware(REQUEST_TRACE, REQUEST_ID))
    app = web.Application(
        middlewares=middlewares,
        # The pipeline checks the size itself, with our error; aiohttp's own limit is one byte more.
        client_max_size=int(gateway.config.router.max_body_bytes) + 1,
    )
    app[GATEWAY] = gateway
    app.on_response_prepare.append(_stamp_ids)
    app.cleanup_ctx.append(_gateway_lifecycle)
    app.router.add_routes([
        web.post("/v1/chat/completions", h.chat_completions),
        web.post("/v1/completions", h.completions),
        web.post("/v1/embeddings", h.embeddings),
        web.post("/v1/audio/transcriptions", audio.transcriptions),
        web.post("/v1/audio/translations", audio.translations),
        web.post("/v1/moderations", moderations.moderations),
        web.post("/v1/rerank", rerank.rerank),
        web.post("/v1/score", rerank.score),
        web.post("/v1/messages", anthropic.messages),
        web.post("/v1/messages/count_tokens", anthropic.count_tokens),
        web.post("/v1/responses", responses.create_response),
        web.get("/v1/responses/{response_id}", responses.get_response),
        web.delete("/v1/responses/{response_id}", responses.delete_response),
        web.get("/v1/responses/{response_id}/input_items", responses_items.list_input_items),
        web.get("/v1/models", models.list_models),  # OpenAI's list, or Anthropic's for an Anthropic request
        web.get("/v1/models/{model_id:.+}", models.get_model),
        web.get("/me", h.me),
        web.get("/v1/me", h.me),
        web.get("/health", h.health),
        web.get("/ready", h.ready),
    ])
    data = client_data.install(app, gateway)  # threads, memory, /mcp, files, batches; the answer cache
    app[responses.RESPONSE_LOG] = responses.make_response_log(data)  # kept in the store data is started on
    app.router.add_routes(anthropic_batches.routes())  # Anthropic's message batches, on the same batches
    return app


async def _gateway_lifecycle(app: web.Application) -> AsyncIterator[None]:
    gateway = app[GATEWAY]
    await gateway.start()
    try:
        yield
    finally:
        await gateway.close()
        logs.event(log, "gateway stopped", logging.INFO)
