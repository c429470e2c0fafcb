"""accounting: the outermost stage. On the way out, whatever happened: the limits' hold settled (or let
go), the usage row queued, the metrics counted, the access log line written (never prompt text, answers
or keys). It runs to its end even when the request is cancelled meanwhile."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from llmgw.accounting.api import Reservation
from llmgw.auth.principal import ANONYMOUS, Principal
from llmgw.obs import logs
from llmgw.router.errors import OK
from llmgw.router.gateway import Gateway
from llmgw.router.stages.base import Call, Turn, span
from llmgw.store.records import UsageRow

log = logs.get("llmgw.router.requests")

#: The metrics' model label of a request for no known model: a client's made-up names must not become series.
UNKNOWN_MODEL = "unknown"


class AccountingStage:
    name = "accounting"

    async def enter(self, turn: Turn) -> None:
        return None

    async def leave(self, turn: Turn) -> None:
        with span(turn.call, "accounting"):
            await finish(turn.gw, turn.call, turn.reservation)


async def finish(gw: Gateway, call: Call, reservation: Reservation | None) -> None:
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
