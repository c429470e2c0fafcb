"""Refusals: one exception type for the API's own, and the mapping of every
other failure (the store's, the cluster's, a malformed body) to a status and
a sentence. Every refusal is answered as `{"error": "…"}`."""

from __future__ import annotations

import logging

from aiohttp import web

from llmgw.admin.cluster_api import ClusterError, ClusterInvalid
from llmgw.admin.convert import BadRequest
from llmgw.store import Conflict, Invalid, NotFound, StoreError, StoreUnavailable, WritesRefused

log = logging.getLogger("llmgw.admin")

__all__ = ["ApiError", "Refusal", "error_response", "refusal_of"]


class ApiError(Exception):
    """A refusal with its HTTP status; the message is what the caller reads."""

    def __init__(self, status: int, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.problems = list(problems or [])


Refusal = ApiError


def refusal_of(exc: BaseException) -> ApiError:
    """Any exception as the refusal the caller sees; unexpected ones are logged and said to be ours."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, BadRequest):
        return ApiError(400, str(exc))
    if isinstance(exc, ClusterInvalid):
        return ApiError(400, str(exc), exc.problems)
    if isinstance(exc, ClusterError):
        return ApiError(exc.status, str(exc))
    if isinstance(exc, Invalid):
        return ApiError(400, str(exc))
    if isinstance(exc, NotFound):
        return ApiError(404, str(exc))
    if isinstance(exc, Conflict):
        return ApiError(409, str(exc))
    if isinstance(exc, WritesRefused):
        return ApiError(503, f"the store refuses writes, so nothing was changed: {exc}")
    if isinstance(exc, StoreUnavailable):
        return ApiError(503, f"the store does not answer: {exc}")
    if isinstance(exc, StoreError):
        log.error("the store failed: %s", exc)
        return ApiError(500, f"the store failed: {exc}")
    if isinstance(exc, web.HTTPException):
        return ApiError(exc.status, exc.text or exc.reason)
    log.exception("admin API handler failed", exc_info=exc)
    return ApiError(500, f"internal error ({type(exc).__name__}); the server's log has the details")


def error_response(err: ApiError, headers: dict[str, str] | None = None) -> web.Response:
    body: dict = {"error": err.message}
    if err.problems:
        body["problems"] = err.problems
    return web.json_response(body, status=err.status, headers=headers)
