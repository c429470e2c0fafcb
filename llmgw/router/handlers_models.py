"""The models a key may use, in the shape of the API that asks: `/v1/models` and `/v1/models/{id}`.

OpenAI's SDKs and Anthropic's share these paths. A request carrying
`anthropic-version` (every Anthropic SDK sends it), or a key in
`x-api-key` and no `Authorization`, is Anthropic's: it gets Anthropic's
model objects (`type: model`, `display_name`, `created_at` as RFC 3339),
its pagination (`before_id`, `after_id`, `limit`; `has_more`, `first_id`,
`last_id`) and its error shape. Anything else gets OpenAI's list and
model objects. Either way only the models the key may use are named; a
model it may not use is "not found", as one that does not exist.
"""

from __future__ import annotations

import datetime as dt

from aiohttp import web

from llmgw.router import handlers_openai
from llmgw.router.errors import JSON, GatewayError, bad_request, dumps
from llmgw.router.gateway import GATEWAY

#: Anthropic's page size when the request does not say, and at most.
ANTHROPIC_DEFAULT_LIMIT, ANTHROPIC_MAX_LIMIT = 20, 1000


def is_anthropic(request: web.Request) -> bool:
    """Whether a request on a path both APIs share is Anthropic's."""
    headers = request.headers
    return "anthropic-version" in headers or ("x-api-key" in headers and "Authorization" not in headers)


def _created() -> int:
    return handlers_openai._STARTED


def openai_model(gw, name: str) -> dict:
    model = gw.catalog.get(name)
    return {"id": name, "object": "model", "created": _created(), "owned_by": gw.federation.owner(name),
            "aliases": list(model.aliases), "ready": gw.admission.healthy(name)}


def anthropic_model(name: str) -> dict:
    created = dt.datetime.fromtimestamp(_created(), dt.UTC).isoformat().replace("+00:00", "Z")
    return {"type": "model", "id": name, "display_name": name, "created_at": created}


def _anthropic_error(exc: GatewayError) -> web.Response:
    from llmgw.router.handlers_anthropic import error_response

    return error_response(exc)


async def list_models(request: web.Request) -> web.Response:
    """OpenAI's list (handlers_openai.list_models), or Anthropic's page of models."""
    if not is_anthropic(request):
        return await handlers_openai.list_models(request)
    gw = request.app[GATEWAY]
    try:
        principal = await gw.authenticate(request)
        names = gw.allowed_models(principal)
        page, has_more = _anthropic_page(names, request.query)
    except GatewayError as exc:
        return _anthropic_error(exc)
    body = {"data": [anthropic_model(n) for n in page], "has_more": has_more,
            "first_id": page[0] if page else None, "last_id": page[-1] if page else None}
    return web.Response(body=dumps(body), content_type=JSON)


def _anthropic_page(names: list[str], query) -> tuple[list[str], bool]:
    raw = query.get("limit")
    limit = ANTHROPIC_DEFAULT_LIMIT
    if raw is not None:
        try:
            limit = int(raw)
        except ValueError:
            raise bad_request(f"limit: expected a whole number from 1 to {ANTHROPIC_MAX_LIMIT}, got {raw!r}",
                              param="limit") from None
        if not 1 <= limit <= ANTHROPIC_MAX_LIMIT:
            raise bad_request(f"limit: from 1 to {ANTHROPIC_MAX_LIMIT}, got {limit}", param="limit")
    after, before = query.get("after_id"), query.get("before_id")
    if after is not None and before is not None:
        raise bad_request("give after_id or before_id, not both", param="after_id")
    if after is not None:
        rest = names[names.index(after) + 1:] if after in names else []
        return rest[:limit], len(rest) > limit
    if before is not None:
        rest = names[:names.index(before)] if before in names else []
        return rest[-limit:], len(rest) > limit
    return names[:limit], len(names) > limit


async def get_model(request: web.Request) -> web.Response:
    """One model by its name or alias, when the key may use it; 404 otherwise."""
    gw = request.app[GATEWAY]
    anthropic = is_anthropic(request)
    asked = request.match_info["model_id"]
    try:
        principal = await gw.authenticate(request)
        name = gw.catalog.resolve(asked)
        if name is None or not (principal.may_use(name) or principal.may_use(asked)):
            raise GatewayError(404, "model_not_found",
                               f"no model called {asked!r} is served here for this key; "
                               "GET /v1/models lists the ones it may use", param="model")
    except GatewayError as exc:
        return _anthropic_error(exc) if anthropic else exc.response()
    body = anthropic_model(name) if anthropic else openai_model(gw, name)
    if not anthropic and asked != name:
        body["id"] = name  # an alias is answered with the model it names
    return web.Response(body=dumps(body), content_type=JSON)


__all__ = ["anthropic_model", "get_model", "is_anthropic", "list_models", "openai_model"]
