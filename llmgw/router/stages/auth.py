"""auth: the key, the body, the model asked for and whether the key may use it.

The first stage after accounting: the principal behind the request, the body read and checked
(llmgw.router.body; a dialect's own reader or translation), the request's fields read onto the call,
the model resolved in the catalog, a federation loop refused, the key's allowlist applied."""

from __future__ import annotations

from aiohttp import web

from llmgw.router.body import read_json_body
from llmgw.router.errors import GatewayError, bad_request, dumps
from llmgw.router.gateway import CLIENT_REQUEST_ID
from llmgw.router.stages.base import NOT_GENERATED, Call, Turn, span

#: Tags read from x-llmgw-tags at most, and their longest length.
MAX_TAGS, MAX_TAG_CHARS = 16, 128


class AuthStage:
    name = "auth"

    async def enter(self, turn: Turn) -> None:
        gw, call, request = turn.gw, turn.call, turn.request
        dialect = call.dialect
        with span(call, "auth"):
            call.principal = await gw.authenticate(request)
        reader = getattr(dialect, "read_body", None)  # a form upload (audio), not a JSON body
        if reader is not None:
            body_bytes, body = await reader(request, gw)
        else:
            body_bytes, body = await read_json_body(request, gw, getattr(dialect, "operation", None) or call.kind)
        if dialect is not None:
            body = await dialect.chat_body(body, call.principal)
            body_bytes = dumps(body)
        read_request(call, request, body)
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
        turn.body_bytes, turn.body, turn.model = body_bytes, body, model

    async def leave(self, turn: Turn) -> None:
        return None


def read_request(call: Call, request: web.Request, body: dict) -> None:
    """The body's and headers' fields the call records: model, stream, user, metadata, tags."""
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
