"""Requests the engine answers in the client's own shape: rerank, score and audio.

A `PassThrough` is a dialect (llmgw.router.dialects) that translates
nothing: the pipeline runs the request as it runs every other (key,
limits, admission, replica, engine, usage row, metrics) and the engine's
answer goes back as it came. What it adds is the refusal an engine gives
for an endpoint it does not serve, said plainly: vLLM answers 400 ("does
not support"), llama-server 501 (started without `--reranking`), others
404 or 405; the client gets a 400 `unsupported_endpoint` naming the model
and the endpoint instead.
"""

from __future__ import annotations

from aiohttp import web

from llmgw.auth.principal import Principal
from llmgw.router.anthropic import engine_error_message
from llmgw.router.errors import GatewayError
from llmgw.router.sse import SSERelay

#: Engine statuses that mean "this model does not serve that endpoint".
NOT_SERVED = frozenset({404, 405, 501})
#: Words in a vLLM 400 that mean the same.
_NOT_SUPPORTED_WORDS = ("does not support", "not supported", "unsupported task")


class PassThrough:
    """One request of an endpoint the engine serves in the client's shape."""

    def __init__(self, operation: str, endpoint: str) -> None:
        self.operation = operation  # its schema (llmgw.router.request_schemas)
        self.endpoint = endpoint  # as the client called it, for messages
        self.model = ""

    async def chat_body(self, body: dict, principal: Principal) -> dict:
        self.model = body.get("model") if isinstance(body.get("model"), str) else ""
        return body

    def answer(self, status: int, raw: bytes) -> tuple[int, bytes]:
        if status in NOT_SERVED or (status == 400 and _says_not_supported(raw)):
            return 400, self.not_served(status).body()
        return status, raw

    def not_served(self, status: int) -> GatewayError:
        return GatewayError(400, "unsupported_endpoint",
                            f"model {self.model!r} does not serve {self.endpoint} (its engine answered {status}); "
                            f"use a model whose engine serves it", param="model")

    def relay(self, inner: SSERelay) -> SSERelay:
        return inner

    def error_response(self, error: GatewayError, headers: dict[str, str]) -> web.Response:
        return error.response(headers)


def _says_not_supported(raw: bytes) -> bool:
    message = engine_error_message(raw).lower()
    return any(words in message for words in _NOT_SUPPORTED_WORDS)


__all__ = ["NOT_SERVED", "PassThrough"]
