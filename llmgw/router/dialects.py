"""Other client APIs served through the chat-completions pipeline: the hook they plug into.

A `Dialect` is one request in another API's shape (Anthropic's Messages in
`llmgw.router.anthropic`, OpenAI's Responses in `llmgw.router.responses`).
`pipeline.serve(request, "chat", "/chat/completions", dialect=d)` reads the
client's body and, once the key is known, asks `d.chat_body` for the chat
completion to run in its place. That request then goes the way every other
does (limits, admission, replica, engine, accounting), and comes back to the
client through the dialect: a whole answer through `d.answer`, a stream
through the relay `d.relay` wraps around the pipeline's own, a refusal
through `d.error_response`.

`TranslatingRelay` is the common part of the stream relays: the pipeline's
relay cuts the engine's bytes into whole events and reads the usage; the
translating relay reads each chat-completion chunk and writes the client's
own events.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable
from typing import Any, Protocol

from aiohttp import web

from llmgw.auth.principal import Principal
from llmgw.router.errors import GatewayError, loads
from llmgw.router.sse import SSERelay

_EVENT_SPLIT = re.compile(rb"\r?\n\r?\n")


class Dialect(Protocol):
    """One request of another API, run as a chat completion."""

    async def chat_body(self, body: dict, principal: Principal) -> dict:
        """The chat-completion body to run for the client's `body`; GatewayError when it is unusable."""

    def answer(self, status: int, raw: bytes) -> tuple[int, bytes]:
        """The client's answer for the engine's whole (not streamed) answer, or its error answer."""

    def relay(self, inner: SSERelay) -> SSERelay:
        """A relay writing the client's stream events around the pipeline's relay."""

    def error_response(self, error: GatewayError, headers: dict[str, str]) -> web.Response:
        """A refusal or failure in the client's API's error shape."""


def sse_event(name: str, payload: bytes) -> bytes:
    """One named server-sent event."""
    return b"event: " + name.encode() + b"\ndata: " + payload + b"\n\n"


class TranslatingRelay:
    """A relay that turns the chat-completion chunks the pipeline's relay passes into other events.

    Subclasses write `on_chunk` (one parsed chunk), `on_engine_error` (an
    error event an engine sent inside its stream), `finish` (the stream's
    last events, once) and `error_event` (what the client gets when the
    gateway cuts the stream). Attributes it lacks (`usage`, `events`, …) are
    the inner relay's, so the pipeline reads them as it always does.
    """

    def __init__(self, inner: SSERelay) -> None:
        self.inner = inner
        self.finished = False

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet: never look for it in itself
            raise AttributeError(name)
        return getattr(self.inner, name)

    # A relay inside this one (the guardrails') may answer with an awaitable
    # instead of bytes; then so does this one, and the proxy awaits it.

    def feed(self, data: bytes) -> bytes | Awaitable[bytes]:
        ready = self.inner.feed(data)
        if isinstance(ready, bytes):
            return self._translate(ready)
        return self._translate_later(ready)

    def close(self) -> bytes | Awaitable[bytes]:
        rest = self.inner.close()
        if isinstance(rest, bytes):
            return self._last(rest)
        return self._last_later(rest)

    async def _translate_later(self, ready: Awaitable[bytes]) -> bytes:
        return self._translate(await ready)

    async def _last_later(self, rest: Awaitable[bytes]) -> bytes:
        return self._last(await rest)

    def _last(self, rest: bytes) -> bytes:
        out = self._translate(rest)
        if not self.finished:
            self.finished = True
            out += self.finish()
        return out

    def _translate(self, ready: bytes) -> bytes:
        if not ready or self.finished:
            return b""
        out: list[bytes] = []
        for event in _EVENT_SPLIT.split(ready):
            data = _data_of(event)
            if data is None:
                continue
            if data == b"[DONE]":
                self.finished = True
                out.append(self.finish())
                break
            try:
                chunk = loads(data)
            except ValueError:
                continue  # not JSON: nothing a client of this API could read
            if not isinstance(chunk, dict):
                continue
            if isinstance(chunk.get("error"), dict) and "choices" not in chunk:
                self.finished = True
                out.append(self.on_engine_error(chunk["error"]))
                break
            out.append(self.on_chunk(chunk))
        return b"".join(out)

    # -- what a subclass writes -------------------------------------------------

    def on_chunk(self, chunk: dict) -> bytes:
        raise NotImplementedError

    def on_engine_error(self, error: dict) -> bytes:
        raise NotImplementedError

    def finish(self) -> bytes:
        raise NotImplementedError

    def error_event(self, error: GatewayError) -> bytes:
        raise NotImplementedError


def _data_of(event: bytes) -> bytes | None:
    """The data of one server-sent event (its `data:` lines joined), or None."""
    lines = [line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(lines).strip()


def chunk_usage(usage: Any) -> tuple[int, int, int] | None:
    """(prompt, completion, cached) tokens of an OpenAI usage object, or None."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")), _count(cached)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
