"""OpenAI's Responses API as the gateway serves it: /v1/responses.

`POST /v1/responses` runs through the same pipeline as a chat completion
(`llmgw.router.dialects`), translated by `llmgw.router.responses`; its
errors are OpenAI's, like the rest of the API. Each answer is kept (unless
the request says `store: false`) so that `previous_response_id` continues
it; `GET` and `DELETE /v1/responses/{id}` read and forget one. Where a
guardrails policy says `no_store`, nothing is kept.
"""

from __future__ import annotations

import re

from aiohttp import web

from llmgw.auth.principal import Principal
from llmgw.router.client_data import CLIENT_DATA, ClientData, no_store, owner_of
from llmgw.router.errors import JSON, GatewayError, bad_request, dumps, loads
from llmgw.router.gateway import GATEWAY, Gateway
from llmgw.router.pipeline import serve
from llmgw.router.response_log import ResponseLog, scope_of
from llmgw.router.responses import ResponseDraft, ResponseEvents, draft_from, response_from_chat, to_chat
from llmgw.router.sse import SSERelay
from llmgw.store import StoredResponse

RESPONSE_LOG = web.AppKey("response_log", ResponseLog)
_RESPONSE_ID = re.compile(r"[A-Za-z0-9_\-]{1,128}")


def make_response_log(data: ClientData) -> ResponseLog:
    """The app's kept responses, in the store its client data is started on (none: in memory only)."""
    return ResponseLog(lambda: data.store)


class ResponsesDialect:
    """One /v1/responses request: translated to a chat completion, its answer back to a response."""

    operation = "responses"  # its schema (llmgw.router.request_schemas)

    def __init__(self, gw: Gateway, responses: ResponseLog, data=None) -> None:
        self.gw = gw
        self.responses = responses
        self.data = data  # the app's llmgw.router.client_data.ClientData: the storage quota
        self.keep_it = False
        self.draft = ResponseDraft(model="")
        self.scope = ""
        self.conversation: list[dict] = []
        self.kept: StoredResponse | None = None

    async def chat_body(self, body: dict, principal: Principal) -> dict:
        self.scope = scope_of(principal)
        history: list[dict] = []
        previous = body.get("previous_response_id")
        if previous is not None:
            found = None
            if isinstance(previous, str) and _RESPONSE_ID.fullmatch(previous):
                found = await self.responses.find(previous, self.scope)
            if found is None:
                raise bad_request(f"previous_response_id: no response {previous!r} is kept for you "
                                  f"(it expired, was made with store: false, or was never made here)",
                                  param="previous_response_id", code="previous_response_not_found")
            history = found.messages
        chat, self.conversation = to_chat(body, history)
        self.draft = draft_from(body)
        self.keep_it = self.draft.store and not no_store(self.gw, principal)
        if self.keep_it and self.data is not None:  # it will be kept: refused before it is answered
            # Counted for whoever owns its files too: the project, else the person, else everyone.
            await self.data.check_quota(owner_of(principal), len(dumps(chat)))
        return chat

    def answer(self, status: int, raw: bytes) -> tuple[int, bytes]:
        if status >= 400:
            return status, raw  # the engine's error is already in OpenAI's shape
        try:
            answer = loads(raw)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            return 502, GatewayError(502, "upstream_error", "the engine's answer was not a chat completion",
                                     type="server_error").body()
        response, message = response_from_chat(answer, self.draft)
        self._done(response, message)
        return 200, dumps(response)

    def relay(self, inner: SSERelay) -> ResponseEvents:
        return ResponseEvents(inner, self.draft, on_done=self._done)

    def error_response(self, error: GatewayError, headers: dict[str, str]) -> web.Response:
        return error.response(headers)

    def _done(self, response: dict, message: dict) -> None:
        if self.keep_it:
            self.kept = self.responses.remember(self.draft.id, scope=self.scope, model=self.draft.model,
                                                messages=[*self.conversation, message], response=response)

    async def keep(self) -> None:
        if self.kept is not None:
            await self.responses.keep(self.kept)


async def create_response(request: web.Request) -> web.StreamResponse:
    dialect = ResponsesDialect(request.app[GATEWAY], request.app[RESPONSE_LOG], request.app.get(CLIENT_DATA))
    response = await serve(request, "chat", "/chat/completions", dialect=dialect)
    await dialect.keep()
    return response


async def _kept(request: web.Request) -> tuple[ResponseLog, str, str]:
    principal = await request.app[GATEWAY].authenticate(request)
    response_id = request.match_info["response_id"]
    return request.app[RESPONSE_LOG], response_id, scope_of(principal)


def _not_found(response_id: str) -> GatewayError:
    return GatewayError(404, "response_not_found", f"no response {response_id!r} is kept for you")


async def get_response(request: web.Request) -> web.Response:
    responses, response_id, scope = await _kept(request)
    found = await responses.find(response_id, scope) if _RESPONSE_ID.fullmatch(response_id) else None
    if found is None:
        raise _not_found(response_id)
    return web.Response(body=dumps(found.response), content_type=JSON)


async def delete_response(request: web.Request) -> web.Response:
    responses, response_id, scope = await _kept(request)
    if not (_RESPONSE_ID.fullmatch(response_id) and await responses.forget(response_id, scope)):
        raise _not_found(response_id)
    return web.Response(body=dumps({"id": response_id, "object": "response", "deleted": True}),
                        content_type=JSON)
