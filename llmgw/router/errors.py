"""Refusals and failures as the client sees them: OpenAI's error shape, with a code.

Every answer that is not the engine's own goes through `GatewayError`, so a
client always gets `{"error": {"message", "type", "param", "code"}}`, the
status that fits, and the outcome the usage row and the metrics record.
"""

from __future__ import annotations

import json
import math

from aiohttp import web


def _standard_dumps(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


try:  # orjson: several times faster both ways (llmgw[fast], in the build); the standard module otherwise
    import orjson

    def dumps(value) -> bytes:
        try:
            return orjson.dumps(value)
        except TypeError:  # what only the standard encoder writes: keys that are not text, integers past 64 bits
            return _standard_dumps(value)

    def loads(text):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            # What orjson refuses and the standard reader takes (NaN, 1e400, a lone surrogate escape, which
            # llmgw.router.body then names): read as before, and refused with the standard reader's words.
            return json.loads(text)
except ImportError:  # pragma: no cover - without the fast extra
    dumps = _standard_dumps
    loads = json.loads

JSON = "application/json"

# OpenAI's `type` for each status family, so SDKs raise the exception they usually do.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}

#: Usage-row outcomes: what happened to a request, in one word.
OK, ERROR, REFUSED, CANCELLED = "ok", "error", "refused", "cancelled"


class GatewayError(Exception):
    """A request the gateway answers itself, with a reason.

    `outcome` is what the usage row says: `refused` when the gateway turned
    the request away (key, allowlist, limits, queue, size), `error` when it
    tried and something failed (an engine, a timeout). `limited` marks the
    refusals by a limit or a full queue, which metrics count apart.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        param: str | None = None,
        outcome: str = REFUSED,
        retry_after: float | None = None,
        limited: bool = False,
        type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.outcome = outcome
        self.retry_after = retry_after
        self.limited = limited
        self.type = type or _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")

    def body(self) -> bytes:
        return error_body(self.message, self.type, self.code, self.param)

    def response(self, headers: dict[str, str] | None = None) -> web.Response:
        out = dict(headers or {})
        if self.retry_after is not None:
            out["Retry-After"] = str(max(1, math.ceil(self.retry_after)))
        return web.Response(status=self.status, body=self.body(), content_type=JSON, headers=out)


def error_body(message: str, type: str, code: str | None, param: str | None = None) -> bytes:
    return dumps({"error": {"message": message, "type": type, "param": param, "code": code}})


def bad_request(message: str, *, param: str | None = None, code: str = "invalid_request") -> GatewayError:
    return GatewayError(400, code, message, param=param)


def upstream_error(status: int, code: str, message: str) -> GatewayError:
    """A failure on the way to or from an engine: counted as an error, not a refusal."""
    return GatewayError(status, code, message, outcome=ERROR, type="server_error")
