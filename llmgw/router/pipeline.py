"""One generation or embedding request, from arrival to its usage row, as a line of stages.

accounting → auth (key, body, model and allowlist) → threads → limits (max_tokens fitted; a spent budget
moves to a fallback) → guard (the input) → cache → kept → admission (no replica or a full queue moves to
a fallback) → engine (retried on another replica while nothing has reached the client; the answer
relayed). Each stage (llmgw.router.stages) sees the request once on its way in and the answer once on
its way out, in the reverse order; none knows of another: what one leaves for the next is on the
`Turn`. A stage answers (the engine; the cache, with a kept answer) or refuses with a `GatewayError`,
which is answered here, in the API's shape, and recorded like a request that was served.
"""

from __future__ import annotations

import asyncio
import os
import time

from aiohttp import web

from llmgw.obs import logs
from llmgw.router.dialects import Dialect
from llmgw.router.errors import CANCELLED, ERROR, GatewayError
from llmgw.router.gateway import GATEWAY, REQUEST_ID, REQUEST_TRACE
from llmgw.router.stages import STAGES
from llmgw.router.stages.base import CLIENT_CLOSED, Call, Stage, Turn, answer_headers

log = logs.get("llmgw.router.requests")


class _RequestIds:
    """`req_`, then 12 hex digits of the time in milliseconds and 12 random ones.

    Ids in the order they were made keep the usage table's primary key growing at its end: a random
    id lands on a random page of that index, and a batch of usage rows then touches (and, in SQLite's
    rollback journal, copies) one page a row; in time order it touches a few. The random half keeps
    ids from two processes in one millisecond apart (48 bits). The random bytes are read from the
    system 1,024 ids at a time (one read a request was a system call's worth of the request's CPU);
    a forked child reads its own.
    """

    def __init__(self, clock=time.time) -> None:
        self._clock = clock
        self._hex, self._at = "", 0
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._hex, self._at = "", 0

    def __call__(self) -> str:
        at = self._at
        if at >= len(self._hex):
            self._hex, at = os.urandom(6 * 1024).hex(), 0
        self._at = at + 12
        return f"req_{int(self._clock() * 1000) & 0xFFFFFFFFFFFF:012x}{self._hex[at:at + 12]}"


new_request_id = _RequestIds()




async def serve(request: web.Request, kind: str, path: str, dialect: Dialect | None = None) -> web.StreamResponse:
    """Answer one POST to /v1/chat/completions, /v1/completions or /v1/embeddings; with a
    `dialect`, one of another API that it translates to a chat completion and back."""
    gw = request.app[GATEWAY]
    call = Call(request_id=request.get(REQUEST_ID) or new_request_id(), kind=kind, path=path, dialect=dialect)
    call.trace = request.get(REQUEST_TRACE)
    logged_as = logs.REQUEST_ID.set(call.request_id)  # a batch's lines too: every log line names its request
    turn = Turn(gw, request, call)
    entered: list[Stage] = []
    try:
        for stage in STAGES:
            entered.append(stage)
            answer = await stage.enter(turn)
            if answer is not None:
                turn.answer = answer
                return answer
        raise AssertionError("the engine stage answers every request")  # pragma: no cover
    except GatewayError as exc:
        call.status, call.outcome, call.code, call.limited = exc.status, exc.outcome, exc.code, exc.limited
        turn.answer = _refusal(call, exc)
        return turn.answer
    except asyncio.CancelledError:
        call.status, call.outcome = CLIENT_CLOSED, CANCELLED
        raise
    except Exception:  # a fault of ours: a 500 with the request id, recorded as an error, never as ok
        call.status, call.outcome, call.code = 500, ERROR, "internal_error"
        log.exception("request failed", extra={"fields": {"request_id": call.request_id, "path": request.path}})
        gw.metrics.http_errors.labels(call.path).inc()
        if call.first_at is not None:  # part of the answer is out: the connection is cut instead
            raise
        turn.answer = _refusal(call, GatewayError(
            500, "internal_error", f"the gateway failed on this request; quote request id {call.request_id}",
            outcome=ERROR, type="server_error"))
        return turn.answer
    finally:
        try:
            await _leave(reversed(entered), turn)
        finally:
            if call.trace is not None:
                call.trace.finish(call)
            logs.REQUEST_ID.reset(logged_as)


def _refusal(call: Call, exc: GatewayError) -> web.StreamResponse:
    """A refusal in the API's own shape (a dialect's, else OpenAI's), with the answer's headers."""
    if call.dialect is not None:
        return call.dialect.error_response(exc, answer_headers(call))
    return exc.response(answer_headers(call))


async def _leave(stages, turn: Turn) -> None:
    """Each stage entered left in turn; one that fails (or is cancelled) does not keep the rest from it."""
    stages = list(stages)
    for i, stage in enumerate(stages):
        try:
            await stage.leave(turn)
        except BaseException:
            await _leave(stages[i + 1:], turn)
            raise


__all__ = ["CLIENT_CLOSED", "Call", "new_request_id", "serve"]
