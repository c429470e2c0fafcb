"""OpenAI's Batch API: `/v1/batches`.

A batch is a JSONL file of requests (uploaded with purpose=batch), each line
`{"custom_id", "method": "POST", "url", "body"}`, run later by the batch
worker (llmgw.router.batch_worker) at the lowest priority, each line
charged to the key that submitted the batch and recorded with the tag
`batch=<id>`. Its answers come back as an output file (lines that
succeeded) and an error file (the others), each line naming its
`custom_id`.

    POST /v1/batches                 {"input_file_id", "endpoint", "completion_window"[, "metadata"]}
    GET  /v1/batches[?after=&limit=]
    GET  /v1/batches/{id}
    POST /v1/batches/{id}/cancel

Endpoints: /v1/chat/completions, /v1/embeddings and /v1/completions. The
completion window is a duration (`24h`, as OpenAI takes, or anything from a
minute to a week); lines not done by then end in the error file as
`batch_expired`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from aiohttp import web

from llmgw.auth.principal import Principal
from llmgw.config.units import Duration
from llmgw.router.client_data import (
    authenticate,
    client_data,
    json_response,
    no_store,
    owner_of,
    read_json_object,
    store_errors,
)
from llmgw.router.errors import GatewayError, bad_request
from llmgw.router.gateway import GATEWAY
from llmgw.store.client_data import Batch

#: The endpoints a batch may run, with the pipeline's kind and the engine's path.
ENDPOINTS: dict[str, tuple[str, str]] = {
    "/v1/chat/completions": ("chat", "/chat/completions"),
    "/v1/embeddings": ("embedding", "/embeddings"),
    "/v1/completions": ("completion", "/completions"),
}
#: The endpoint of Anthropic's message batches (llmgw.router.anthropic_batches), run by the same worker.
MESSAGES_ENDPOINT = "/v1/messages"
MIN_WINDOW, MAX_WINDOW = dt.timedelta(minutes=1), dt.timedelta(days=7)
DEFAULT_LIMIT, MAX_LIMIT = 20, 100
MAX_METADATA = 16


def _unix(t: dt.datetime | None) -> int | None:
    return None if t is None else int(t.timestamp())


def batch_json(b: Batch) -> dict[str, Any]:
    errors = None
    if b.errors:
        errors = {"object": "list", "data": b.errors}
    return {
        "id": b.id, "object": "batch", "endpoint": b.endpoint, "errors": errors,
        "input_file_id": b.input_file_id, "completion_window": b.completion_window, "status": b.status,
        "output_file_id": b.output_file_id, "error_file_id": b.error_file_id,
        "created_at": _unix(b.created_at), "in_progress_at": _unix(b.in_progress_at),
        "expires_at": _unix(b.expires_at), "finalizing_at": _unix(b.finalizing_at),
        "completed_at": _unix(b.completed_at), "failed_at": _unix(b.failed_at), "expired_at": _unix(b.expired_at),
        "cancelling_at": _unix(b.cancelling_at), "cancelled_at": _unix(b.cancelled_at),
        "request_counts": {"total": b.total, "completed": b.completed, "failed": b.failed},
        "metadata": b.metadata,
    }


def principal_snapshot(p: Principal) -> dict[str, Any]:
    """Who submitted a batch, as the worker needs them when the key cannot be read again."""
    return {"key_id": p.key_id, "key_prefix": p.key_prefix, "key_name": p.key_name, "kind": p.kind,
            "org_id": p.org_id, "team_id": p.team_id, "project_id": p.project_id, "user_id": p.user_id,
            "band": p.band, "allowed_models": sorted(p.allowed_models) if p.allowed_models is not None else None,
            "in_cluster": p.in_cluster}  # residency: its lines stay on the cluster's own engines too


def not_found(batch_id: str) -> GatewayError:
    return GatewayError(404, "batch_not_found", f"no batch {batch_id!r} (or not one of this key's project)")


def _window(value: Any) -> dt.timedelta:
    if not isinstance(value, str) or not value.strip():
        raise bad_request("completion_window: say how long the batch may take, like 24h", param="completion_window")
    try:
        window = Duration.parse(value)
    except ValueError:
        raise bad_request(f"completion_window: {value!r} is not a duration like 24h",
                          param="completion_window") from None
    if not MIN_WINDOW <= window <= MAX_WINDOW:
        raise bad_request("completion_window: from 1m to 168h", param="completion_window")
    return window


def _metadata(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > MAX_METADATA or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512 for k, v in value.items()):
        raise bad_request("metadata: at most 16 text keys (64 characters) with text values (512)", param="metadata")
    return value or None


async def create_batch(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    principal = await authenticate(request)
    data = client_data(request)
    store = data.require_store("batches")
    if no_store(gw, principal):
        raise bad_request("a guardrails policy with no_store applies to this key: the gateway keeps no batches for it",
                          code="no_store")
    body = await read_json_object(request, "a batch", "batch")
    endpoint = body.get("endpoint")
    if endpoint not in ENDPOINTS:
        raise bad_request(f"endpoint: {endpoint!r} is not one a batch runs; use one of {', '.join(ENDPOINTS)}",
                          param="endpoint")
    window = _window(body.get("completion_window"))
    metadata = _metadata(body.get("metadata"))
    file_id = body.get("input_file_id")
    if not isinstance(file_id, str) or not file_id:
        raise bad_request("input_file_id: name the file of requests (uploaded with purpose=batch)",
                          param="input_file_id")
    owner = owner_of(principal)
    await data.check_quota(owner, 1)  # its results will be kept: none once the quota is full
    with store_errors("batches"):
        found = await store.get_file(owner, file_id)
        if found is None:
            raise GatewayError(404, "file_not_found", f"no file {file_id!r} (or not one of this key's project)",
                               param="input_file_id")
        if found.purpose != "batch":
            raise bad_request(f"input_file_id: {file_id} has purpose {found.purpose}; a batch reads a file "
                              "uploaded with purpose=batch", param="input_file_id")
        batch = await store.create_batch(
            owner, key_id=principal.key_id, principal=principal_snapshot(principal), endpoint=endpoint,
            completion_window=body["completion_window"].strip(), input_file_id=file_id,
            expires_at=dt.datetime.now(dt.UTC) + window, metadata=metadata,
        )
    if data.worker is not None:
        data.worker.wake()
    return json_response(batch_json(batch))


async def get_batch(request: web.Request) -> web.Response:
    principal = await authenticate(request)
    store = client_data(request).require_store("batches")
    batch_id = request.match_info["batch_id"]
    with store_errors("batches"):
        batch = await store.get_batch(batch_id, owner=owner_of(principal))
    if batch is None:
        raise not_found(batch_id)
    return json_response(batch_json(batch))


async def list_batches(request: web.Request) -> web.Response:
    principal = await authenticate(request)
    store = client_data(request).require_store("batches")
    try:
        limit = max(1, min(int(request.query.get("limit", DEFAULT_LIMIT)), MAX_LIMIT))
    except ValueError:
        raise bad_request("limit: expected a whole number", param="limit") from None
    with store_errors("batches"):
        found = await store.list_batches(owner_of(principal), after=request.query.get("after") or None,
                                         limit=limit + 1)
    page = found[:limit]
    return json_response({"object": "list", "data": [batch_json(b) for b in page],
                          "first_id": page[0].id if page else None, "last_id": page[-1].id if page else None,
                          "has_more": len(found) > limit})


async def cancel_batch(request: web.Request) -> web.Response:
    principal = await authenticate(request)
    data = client_data(request)
    store = data.require_store("batches")
    batch_id = request.match_info["batch_id"]
    with store_errors("batches"):
        batch = await store.cancel_batch(owner_of(principal), batch_id)
    if data.worker is not None:
        data.worker.wake()
    return json_response(batch_json(batch))


__all__ = ["ENDPOINTS", "batch_json", "cancel_batch", "create_batch", "get_batch", "list_batches",
           "principal_snapshot"]
