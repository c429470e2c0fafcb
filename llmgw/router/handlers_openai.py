"""OpenAI's API as the gateway serves it, and the gateway's own small endpoints.

Generation and embeddings go through the pipeline; /v1/models, /me,
/health and /ready are answered here from the gateway's state.
"""

from __future__ import annotations

import datetime as dt
import inspect
import time

from aiohttp import web

from llmgw.auth.principal import Principal
from llmgw.obs import logs
from llmgw.router.errors import JSON, GatewayError, dumps
from llmgw.router.gateway import GATEWAY
from llmgw.router.pipeline import serve

_STARTED = int(time.time())
log = logs.get("llmgw.router")


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await serve(request, "chat", "/chat/completions")


async def completions(request: web.Request) -> web.StreamResponse:
    return await serve(request, "completion", "/completions")


async def embeddings(request: web.Request) -> web.StreamResponse:
    return await serve(request, "embedding", "/embeddings")


def _json(value, status: int = 200) -> web.Response:
    return web.Response(status=status, body=dumps(value), content_type=JSON)


async def _principal(request: web.Request) -> Principal:
    return await request.app[GATEWAY].authenticate(request)


async def list_models(request: web.Request) -> web.Response:
    """The models the key may use, declared or served, with their aliases."""
    gw = request.app[GATEWAY]
    try:
        principal = await _principal(request)
    except GatewayError as exc:
        return exc.response()
    data = []
    for name in gw.allowed_models(principal):
        model = gw.catalog.get(name)
        data.append({"id": name, "object": "model", "created": _STARTED, "owned_by": gw.federation.owner(name),
                     "aliases": list(model.aliases), "ready": gw.admission.healthy(name)})
    return _json({"object": "list", "data": data})


async def me(request: web.Request) -> web.Response:
    """What the key is, what it may use and what limits it runs under; its spend when the accountant tells."""
    gw = request.app[GATEWAY]
    try:
        p = await _principal(request)
    except GatewayError as exc:
        return exc.response()
    body = {
        "object": "principal",
        "key": {"id": p.key_id or None, "prefix": p.key_prefix or None, "name": p.key_name, "kind": p.kind,
                "expires_at": _iso(p.expires_at)},
        "org_id": p.org_id, "team_id": p.team_id, "project_id": p.project_id, "user_id": p.user_id,
        "band": gw.admission.band_name(p.band),
        "models": gw.allowed_models(p),
        "limits": [_limits(lim) for lim in p.limits],
    }
    spend = getattr(gw.accountant, "spend", None)
    if callable(spend):
        try:
            value = spend(p)
            if inspect.isawaitable(value):
                value = await value
            body["spend"] = value
        except Exception:  # what was spent is a nicety here; the rest of the answer stands
            log.exception("reading the spend for /me failed", extra={"fields": {"key_id": p.key_id}})
            body["spend"] = None
    return _json(_stringify(body))


def _limits(lim) -> dict:
    return {"scope": lim.scope_kind, "scope_id": lim.scope_id, "rpm": lim.rpm, "tpm": lim.tpm,
            "budget_micros": lim.budget_micros, "budget_period": lim.budget_period,
            "allowed_models": list(lim.allowed_models) if lim.allowed_models is not None else None}


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _stringify(value):
    if isinstance(value, dict):
        return {str(k): _stringify(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_stringify(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return str(value)


async def health(request: web.Request) -> web.Response:
    """Alive: the process answers. Nothing else is checked; a control plane's gateway adds its role and how old
    its replica set is (llmgw.control.replica_view)."""
    more = getattr(request.app[GATEWAY], "health_more", None)
    return _json({"status": "ok", **more()} if more is not None else {"status": "ok"})


async def ready(request: web.Request) -> web.Response:
    """Ready while at least one model has a healthy replica."""
    gw = request.app[GATEWAY]
    models = gw.ready_models()
    if models:
        return _json({"status": "ready", "models": models})
    return _json({"status": "not_ready", "reason": "no model has a healthy replica", "models": []}, status=503)
