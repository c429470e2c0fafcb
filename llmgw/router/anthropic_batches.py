"""Anthropic's Message Batches API, `/v1/messages/batches`, on the gateway's own batch machinery.

A message batch is an OpenAI batch (llmgw.router.batches) of endpoint
`/v1/messages`: its requests are written, as they arrive, to an input file
(purpose `batch`, one JSON line each), and the batch worker runs each line
through the pipeline as a `/v1/messages` request of the key that made it
(its limits, budget and band, the lowest; a usage row each, tagged
`batch=<id>`). What changes is the shape: Anthropic's batch object
(`processing_status`, `request_counts` of processing, succeeded, errored,
canceled and expired, `results_url`) and its results, one JSON line a
request: `{"custom_id", "result": {"type": "succeeded", "message"} |
{"type": "errored", "error"} | {"type": "canceled"} | {"type": "expired"}}`.
Errors are in Anthropic's shape. Such a batch is listed by `/v1/batches`
too, with endpoint `/v1/messages`.

    POST   /v1/messages/batches              {"requests": [{"custom_id", "params": {…a Messages request…}}]}
    GET    /v1/messages/batches[?limit=&after_id=&before_id=]
    GET    /v1/messages/batches/{id}
    POST   /v1/messages/batches/{id}/cancel
    GET    /v1/messages/batches/{id}/results  (once ended)
    DELETE /v1/messages/batches/{id}          (once ended: with its files)
"""

from __future__ import annotations

import datetime as dt
import io
import re
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from llmgw.router.batches import MESSAGES_ENDPOINT, not_found, principal_snapshot
from llmgw.router.client_data import authenticate, client_data, no_store, owner_of, read_json_object, store_errors
from llmgw.router.errors import JSON, GatewayError, bad_request, dumps, loads
from llmgw.router.gateway import GATEWAY
from llmgw.router.handlers_anthropic import error_response
from llmgw.router.request_schemas import problem_in
from llmgw.store.client_data import Batch

#: Anthropic's bounds: a custom_id's form, and a batch's life.
CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
WINDOW = dt.timedelta(hours=24)
DEFAULT_LIMIT, MAX_LIMIT = 20, 1000
#: The metadata key that keeps a batch's number of requests (known before the worker counts them).
COUNT_KEY = "llmgw_message_requests"
#: Batches read from the store at most to find a page of message batches.
SCAN_AT_MOST = 5000
_ENDED = ("completed", "failed", "expired", "cancelled")
#: A host (and port) as a forwarding proxy may name it.
_HOST = re.compile(r"[A-Za-z0-9.\-\[\]:]{1,255}")


def _iso(t: dt.datetime | None) -> str | None:
    return None if t is None else t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def processing_status(b: Batch) -> str:
    if b.status == "cancelling":
        return "canceling"
    return "ended" if b.status in _ENDED else "in_progress"


async def _counts(request: web.Request, b: Batch) -> dict[str, int]:
    total = b.total or int((b.metadata or {}).get(COUNT_KEY, "0") or 0)
    counts = {"processing": 0, "succeeded": b.completed, "errored": 0, "canceled": 0, "expired": 0}
    if processing_status(b) != "ended":
        counts["errored"] = b.failed
        counts["processing"] = max(0, total - b.completed - b.failed)
        return counts
    if b.status == "completed":  # every request ran: the error file holds refusals and failures only
        counts["errored"] = b.failed
        return counts
    async for line in _lines(request, b, b.error_file_id):
        counts[_result(line)["result"]["type"]] += 1
    counts["errored"] += max(0, total - sum(counts.values()))  # lines a failed batch never ran
    return counts


def _results_url(request: web.Request, b: Batch) -> str | None:
    """Where an ended batch's results are: this gateway as the client reached it (a proxy in front
    saying so with X-Forwarded-Proto and X-Forwarded-Host)."""
    if processing_status(b) != "ended":
        return None
    scheme = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip() or request.scheme
    host = request.headers.get("X-Forwarded-Host", "").split(",")[0].strip() or request.host
    if scheme not in ("http", "https") or not _HOST.fullmatch(host):
        scheme, host = request.scheme, request.host
    return f"{scheme}://{host}/v1/messages/batches/{b.id}/results"


async def batch_object(request: web.Request, b: Batch) -> dict[str, Any]:
    ended = b.completed_at or b.failed_at or b.expired_at or b.cancelled_at
    return {"id": b.id, "type": "message_batch", "processing_status": processing_status(b),
            "request_counts": await _counts(request, b), "ended_at": _iso(ended), "created_at": _iso(b.created_at),
            "expires_at": _iso(b.expires_at), "archived_at": None, "cancel_initiated_at": _iso(b.cancelling_at),
            "results_url": _results_url(request, b)}


def _json(value: Any) -> web.Response:
    return web.Response(body=dumps(value), content_type=JSON)


def _anthropic(handler):
    """The handler's refusals in Anthropic's error shape."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except GatewayError as exc:
            return error_response(exc)

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


def _check_requests(value: Any, max_lines: int) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise bad_request("requests: a list of {custom_id, params}, at least one", param="requests")
    if len(value) > max_lines:
        raise bad_request(f"requests: at most {max_lines} in a batch (router.batch.max_lines)", param="requests")
    seen: set[str] = set()
    lines = []
    for i, item in enumerate(value):
        where = f"requests[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{where}: an object with custom_id and params", param=where)
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str) or not CUSTOM_ID.fullmatch(custom_id):
            raise bad_request(f"{where}.custom_id: 1 to 64 letters, digits, _ or -", param=f"{where}.custom_id")
        if custom_id in seen:
            raise bad_request(f"{where}.custom_id: {custom_id!r} is used by an earlier request too",
                              param=f"{where}.custom_id")
        seen.add(custom_id)
        params = item.get("params")
        if not isinstance(params, dict):
            raise bad_request(f"{where}.params: a Messages request (model, max_tokens, messages)",
                              param=f"{where}.params")
        if (problem := problem_in("messages", params)) is not None:
            field = f"{where}.params.{problem.param}" if problem.param else f"{where}.params"
            said = problem.message
            message = f"{where}.params.{said}" if problem.param and said.startswith(problem.param) \
                else f"{where}.params: {said}"
            raise bad_request(message, param=field, code=problem.code)
        lines.append({"custom_id": custom_id, "method": "POST", "url": MESSAGES_ENDPOINT, "body": params})
    return lines


@_anthropic
async def create(request: web.Request) -> web.Response:
    """A message batch from its requests: checked whole, kept as an input file, run by the batch worker."""
    gw = request.app[GATEWAY]
    principal = await authenticate(request)
    data = client_data(request)
    store = data.require_store("message batches")
    if no_store(gw, principal):
        raise bad_request("a guardrails policy with no_store applies to this key: the gateway keeps no batches for it",
                          code="no_store")
    body = await read_json_object(request, "a message batch")
    lines = _check_requests(body.get("requests"), gw.config.router.batch.max_lines)
    content = b"".join(dumps(line) + b"\n" for line in lines)
    owner = owner_of(principal)
    await data.check_quota(owner, len(content))
    with store_errors("message batches"):
        stored = await store.create_file(owner, purpose="batch", filename="message_batch_requests.jsonl",
                                         content=io.BytesIO(content))
        batch = await store.create_batch(
            owner, key_id=principal.key_id, principal=principal_snapshot(principal), endpoint=MESSAGES_ENDPOINT,
            completion_window="24h", input_file_id=stored.id, expires_at=dt.datetime.now(dt.UTC) + WINDOW,
            metadata={COUNT_KEY: str(len(lines))},
        )
    if data.worker is not None:
        data.worker.wake()
    return _json(await batch_object(request, batch))


async def _own_batch(request: web.Request) -> Batch:
    principal = await authenticate(request)
    store = client_data(request).require_store("message batches")
    batch_id = request.match_info["batch_id"]
    with store_errors("message batches"):
        batch = await store.get_batch(batch_id, owner=owner_of(principal))
    if batch is None or batch.endpoint != MESSAGES_ENDPOINT:
        raise not_found(batch_id)
    return batch


@_anthropic
async def retrieve(request: web.Request) -> web.Response:
    return _json(await batch_object(request, await _own_batch(request)))


@_anthropic
async def list_batches(request: web.Request) -> web.Response:
    """The key's message batches, newest first, a page at a time (after_id or before_id)."""
    principal = await authenticate(request)
    store = client_data(request).require_store("message batches")
    raw = request.query.get("limit")
    try:
        limit = int(raw) if raw is not None else DEFAULT_LIMIT
    except ValueError:
        raise bad_request(f"limit: a whole number from 1 to {MAX_LIMIT}, got {raw!r}", param="limit") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise bad_request(f"limit: from 1 to {MAX_LIMIT}, got {limit}", param="limit")
    after, before = request.query.get("after_id"), request.query.get("before_id")
    if after and before:
        raise bad_request("give after_id or before_id, not both", param="after_id")
    found: list[Batch] = []
    cursor = None
    with store_errors("message batches"):
        for _ in range(SCAN_AT_MOST // 100):
            page = await store.list_batches(owner_of(principal), after=cursor, limit=100)
            found.extend(b for b in page if b.endpoint == MESSAGES_ENDPOINT)
            if len(page) < 100:
                break
            cursor = page[-1].id
    ids = [b.id for b in found]
    if after:
        rest = found[ids.index(after) + 1:] if after in ids else []
        chosen, has_more = rest[:limit], len(rest) > limit
    elif before:
        rest = found[:ids.index(before)] if before in ids else []
        chosen, has_more = rest[-limit:], len(rest) > limit
    else:
        chosen, has_more = found[:limit], len(found) > limit
    data = [await batch_object(request, b) for b in chosen]
    return _json({"data": data, "has_more": has_more, "first_id": chosen[0].id if chosen else None,
                  "last_id": chosen[-1].id if chosen else None})


@_anthropic
async def cancel(request: web.Request) -> web.Response:
    batch = await _own_batch(request)
    data = client_data(request)
    with store_errors("message batches"):
        batch = await data.require_store("message batches").cancel_batch(batch.owner, batch.id)
    if data.worker is not None:
        data.worker.wake()
    return _json(await batch_object(request, batch))


@_anthropic
async def delete(request: web.Request) -> web.Response:
    batch = await _own_batch(request)
    with store_errors("message batches"):
        gone = await client_data(request).require_store("message batches").delete_batch(batch.owner, batch.id)
    if not gone:
        raise not_found(batch.id)
    return _json({"id": batch.id, "type": "message_batch_deleted"})


async def _lines(request: web.Request, b: Batch, file_id: str | None) -> AsyncIterator[dict[str, Any]]:
    """The JSON lines of one of a batch's files, read a stored piece at a time."""
    if not file_id:
        return
    store = client_data(request).require_store("message batches")
    with store_errors("message batches"):
        pieces = await store.iter_file_content(b.owner, file_id)
    if pieces is None:
        return
    rest = b""
    async for piece in pieces:
        rest += piece
        *whole, rest = rest.split(b"\n")
        for line in whole:
            if line.strip():
                yield loads(line)
    if rest.strip():
        yield loads(rest)


def _error(status: int, message: str) -> dict[str, Any]:
    from llmgw.router.anthropic import ERROR_TYPES

    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _result(line: dict[str, Any]) -> dict[str, Any]:
    """One line of a batch's output or error file as Anthropic's result line."""
    custom_id = line.get("custom_id")
    error = line.get("error")
    if isinstance(error, dict):
        kind = {"batch_cancelled": "canceled", "batch_expired": "expired"}.get(error.get("code"))
        if kind is not None:
            return {"custom_id": custom_id, "result": {"type": kind}}
        return {"custom_id": custom_id, "result": {"type": "errored",
                                                   "error": _error(500, str(error.get("message") or ""))}}
    response = line.get("response") or {}
    status, body = response.get("status_code", 500), response.get("body")
    if 200 <= status < 300 and isinstance(body, dict):
        return {"custom_id": custom_id, "result": {"type": "succeeded", "message": body}}
    if isinstance(body, dict) and body.get("type") == "error" and isinstance(body.get("error"), dict):
        shaped = body  # Anthropic's already (a refusal through the Messages dialect)
    else:
        inner = body.get("error") if isinstance(body, dict) else None
        message = inner.get("message") if isinstance(inner, dict) else None
        shaped = _error(status, str(message or f"the request ended with status {status}"))
    return {"custom_id": custom_id, "result": {"type": "errored", "error": shaped}}


@_anthropic
async def results(request: web.Request) -> web.StreamResponse:
    """An ended batch's results, one JSON line a request, read and sent a stored piece at a time."""
    batch = await _own_batch(request)
    if processing_status(batch) != "ended":
        raise bad_request(f"batch {batch.id} is still {processing_status(batch)}: its results come once it has ended",
                          code="batch_not_ended")
    response = web.StreamResponse(headers={"Content-Type": "application/x-jsonl"})
    await response.prepare(request)
    seen: set[str] = set()
    for file_id in (batch.output_file_id, batch.error_file_id):
        async for line in _lines(request, batch, file_id):
            out = _result(line)
            seen.add(str(out["custom_id"]))
            await response.write(dumps(out) + b"\n")
    if batch.status == "failed":  # the batch stopped before these ran: each errored, with the batch's reason
        reason = "; ".join(str(e.get("message")) for e in batch.errors or ()) or "the batch failed"
        async for line in _lines(request, batch, batch.input_file_id):
            if str(line.get("custom_id")) not in seen:
                out = {"custom_id": line.get("custom_id"), "result": {"type": "errored", "error": _error(500, reason)}}
                await response.write(dumps(out) + b"\n")
    await response.write_eof()
    return response


def routes() -> list[web.RouteDef]:
    return [
        web.post("/v1/messages/batches", create),
        web.get("/v1/messages/batches", list_batches),
        web.get("/v1/messages/batches/{batch_id}", retrieve),
        web.post("/v1/messages/batches/{batch_id}/cancel", cancel),
        web.get("/v1/messages/batches/{batch_id}/results", results),
        web.delete("/v1/messages/batches/{batch_id}", delete),
    ]


__all__ = ["batch_object", "processing_status", "routes"]
