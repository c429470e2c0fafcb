"""Talking to engines: one keep-alive pool, timeouts, and the streaming relay.

`Upstream.open` sends a request to one replica and returns its answer's
head, or raises `UpstreamFailure` saying whether another replica may be
tried (nothing was sent to the client yet, and the engine did not take the
request) and whether the failure counts against the replica's health.
`relay_stream` then passes a streamed answer on event by event;
`read_whole` reads an answer that is not streamed.

Timeouts (router.timeouts): `dial` to connect; `first_byte` until a
streamed answer's first event (an answer that is not streamed says nothing
until it is done, so only `total` bounds it); `idle` between two pieces of
a stream; `total` for the whole request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import aiohttp
import attrs
from aiohttp import web

from llmgw import __version__
from llmgw.adapters import serving as adapters_serving
from llmgw.config.server import RouterTimeouts
from llmgw.router import anthropic_upstream
from llmgw.router.errors import GatewayError, error_body, upstream_error
from llmgw.router.replicas import Replica
from llmgw.router.sse import SSERelay

#: Error answers of engines are read up to this size, then cut.
MAX_ERROR_BYTES = 64 * 1024
#: Answers that are not streamed are read up to this size (embeddings of big batches are large).
MAX_ANSWER_BYTES = 256 * 1024 * 1024
SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # tells nginx in front of us not to buffer either
}


@attrs.frozen
class Timeouts:
    """router.timeouts in seconds; None: no limit."""

    dial: float
    first_byte: float
    idle: float
    total: float | None

    @classmethod
    def from_config(cls, config: RouterTimeouts) -> Timeouts:
        total = config.total.total_seconds()
        return cls(config.dial.total_seconds(), config.first_byte.total_seconds(),
                   config.idle.total_seconds(), total or None)


class UpstreamFailure(Exception):
    """An engine that did not answer usefully, before anything reached the client."""

    def __init__(self, status: int, code: str, message: str, *, retryable: bool, counts: bool) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retryable = retryable  #: another replica may be tried
        self.counts = counts  #: counts against the replica's health

    def as_error(self) -> GatewayError:
        return upstream_error(self.status, self.code, self.message)


class Upstream:
    """The client side of the gateway: one aiohttp session, connections kept alive per engine."""

    def __init__(self, timeouts: Timeouts, *, limit_per_host: int = 0) -> None:
        self.timeouts = timeouts
        self.limit_per_host = limit_per_host
        self.session: aiohttp.ClientSession | None = None
        #: adapters: what an engine's 404 for an adapter it was thought to hold calls (the control plane's
        #: llmgw.adapters.loading.reload_forgotten): True when loaded again, and the request is sent once more
        self.adapter_missing: Callable[[Replica, bool], Awaitable[bool]] | None = None

    async def start(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=self.limit_per_host,
                                         keepalive_timeout=60, ttl_dns_cache=60)
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeouts.dial),
            headers={"User-Agent": f"llmgw/{__version__}"},
            # Engines are asked for plain bytes: the relay looks into them and passes them on.
            skip_auto_headers=("Accept-Encoding",),
            auto_decompress=False,
        )
        return self.session

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def open(self, replica: Replica, path: str, body: bytes, *, request_id: str, stream: bool,
                   deadline: float | None, content_type: str = "application/json",
                   trace: dict[str, str] | None = None, adapter_reloaded: bool = False) -> aiohttp.ClientResponse:
        """Send `body` to `replica` and wait for its answer's head.

        A stream's head must come within `first_byte`; an answer that is not
        streamed within what is left of `total`. 5xx and 429 answers, refused
        connections and dial timeouts raise a retryable UpstreamFailure. `trace`: the W3C trace
        context (traceparent) of the attempt's span, when the request is traced.
        """
        assert self.session is not None, "Upstream.start() first"
        asked = body  # adapters: sent once more as it came, when the engine had forgotten the adapter
        anthropic = replica.api == "anthropic"  # an Anthropic-shaped provider: llmgw.router.anthropic_upstream
        if anthropic:
            body, path = anthropic_upstream.request(body, path)
        body = adapters_serving.with_body_fields(replica, body, content_type)  # adapters: llama.cpp's lora
        headers = {"Content-Type": content_type, "X-Request-Id": request_id}
        if trace:
            headers.update(trace)
        headers.update(replica.extra_headers)  # federation: x-llmgw-hop to a peer cluster
        if anthropic:
            headers.update(anthropic_upstream.request_headers(replica.api_key))
        elif replica.api_key is not None:
            headers["Authorization"] = "Bearer " + replica.api_key.reveal()
        now = time.monotonic()
        wait = self.timeouts.first_byte if stream else None
        if deadline is not None:
            left = deadline - now
            wait = left if wait is None else min(wait, left)
            if wait <= 0:
                raise UpstreamFailure(504, "timeout", "the request ran out of time (router.timeouts.total)",
                                      retryable=False, counts=False)
        url = replica.base_url + path
        try:
            async with asyncio.timeout(wait):
                resp = await self.session.post(url, data=body, headers=headers)
        except aiohttp.ConnectionTimeoutError:
            raise UpstreamFailure(502, "upstream_unreachable",
                                  f"replica {replica.id} did not accept a connection within "
                                  f"{self.timeouts.dial:g}s (router.timeouts.dial)",
                                  retryable=True, counts=True) from None
        except TimeoutError:
            which = "first_byte" if stream and (deadline is None or wait < deadline - now) else "total"
            raise UpstreamFailure(504, "upstream_timeout",
                                  f"replica {replica.id} sent nothing for {wait:.1f}s (router.timeouts.{which})",
                                  retryable=False, counts=True) from None
        except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
                aiohttp.ClientPayloadError) as exc:
            raise UpstreamFailure(502, "upstream_unreachable",
                                  f"replica {replica.id} could not be reached ({type(exc).__name__})",
                                  retryable=True, counts=True) from None
        except aiohttp.ClientError as exc:
            raise UpstreamFailure(502, "upstream_error",
                                  f"replica {replica.id} failed: {type(exc).__name__}",
                                  retryable=False, counts=True) from None
        # 501: the engine does not do this (llama-server's rerank without --reranking), not a fault of it
        if (resp.status >= 500 and resp.status != 501) or resp.status == 429:
            detail = await _short_read(resp)
            resp.release()
            busy = resp.status in (429, 503, 529)  # 529: Anthropic's overloaded
            raise UpstreamFailure(502, "upstream_busy" if busy else "upstream_error",
                                  f"replica {replica.id} answered {resp.status}{detail}",
                                  retryable=True, counts=not busy)
        if resp.status == 404 and replica.shares_with and self.adapter_missing is not None \
                and await self.adapter_missing(replica, adapter_reloaded):  # adapters: the engine forgot it
            resp.release()
            return await self.open(replica, path, asked, request_id=request_id, stream=stream, deadline=deadline,
                                   content_type=content_type, trace=trace, adapter_reloaded=True)
        return anthropic_upstream.wrap(resp, stream) if anthropic else resp


async def _short_read(resp: aiohttp.ClientResponse) -> str:
    """A few words of an engine's error answer, for the message (never the client's text)."""
    try:
        async with asyncio.timeout(2):
            raw = await resp.content.read(512)
    except (TimeoutError, aiohttp.ClientError):
        return ""
    text = raw.decode("utf-8", "replace")
    marker = '"message":'
    at = text.find(marker)
    if at >= 0:
        snippet = text[at + len(marker):].strip().lstrip('"')
        return ": " + snippet.split('"', 1)[0][:200]
    return ""


async def read_whole(resp: aiohttp.ClientResponse, deadline: float | None) -> bytes:
    """The whole answer, within what is left of `total`."""
    wait = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        async with asyncio.timeout(wait):
            return await resp.content.read(MAX_ANSWER_BYTES)
    except TimeoutError:
        raise upstream_error(504, "upstream_timeout",
                             "the engine did not finish its answer in time (router.timeouts.total)") from None
    except aiohttp.ClientError as exc:
        raise upstream_error(502, "upstream_error",
                             f"the engine's answer broke off ({type(exc).__name__})") from None


@attrs.define(slots=True)
class StreamOutcome:
    """What happened to a relayed stream, for accounting and metrics."""

    first_at: float | None = None  # monotonic time the first event reached the client
    last_at: float | None = None
    failure: GatewayError | None = None  # the stream was cut: why
    client_gone: bool = False


async def first_events(resp: aiohttp.ClientResponse, relay: SSERelay, timeouts: Timeouts, sent_at: float,
                       deadline: float | None, replica: Replica) -> bytes:
    """A stream's first whole events, read before anything is sent to the client.

    Until then a failure is the engine's alone and another replica may be
    tried: a stream that ends or breaks before its first event raises a
    retryable UpstreamFailure; one silent past `first_byte` a final one (504).
    """
    limit, kind = sent_at + timeouts.first_byte, "first_byte"
    if deadline is not None and deadline < limit:
        limit, kind = deadline, "total"
    try:
        async with asyncio.timeout(max(0.0, limit - time.monotonic())):
            while True:
                data = await resp.content.readany()
                if not data:
                    resp.close()
                    raise UpstreamFailure(502, "upstream_error",
                                          f"replica {replica.id} ended its stream before sending anything",
                                          retryable=True, counts=True)
                out = relay.feed(data)
                if not isinstance(out, bytes):  # guard: a guarded relay checks before it releases
                    out = await out
                if out:
                    return out
    except TimeoutError:
        resp.close()
        seconds = timeouts.first_byte if kind == "first_byte" else None
        said = f"sent nothing for {seconds:g}s" if seconds is not None else "ran out of time"
        raise UpstreamFailure(504, "upstream_timeout", f"replica {replica.id} {said} (router.timeouts.{kind})",
                              retryable=False, counts=True) from None
    except aiohttp.ClientError as exc:
        resp.close()
        raise UpstreamFailure(502, "upstream_error",
                              f"replica {replica.id} broke off its stream ({type(exc).__name__})",
                              retryable=True, counts=True) from None


async def relay_stream(request: web.Request, resp: aiohttp.ClientResponse, headers: dict[str, str],
                       relay: SSERelay, first: bytes, timeouts: Timeouts,
                       deadline: float | None) -> tuple[web.StreamResponse, StreamOutcome]:
    """Pass a streamed answer on as it arrives: each whole event is written as soon as it is read.

    `first` is what `first_events` read. A stream the engine stops sending
    (idle), that runs out of total time, or that breaks off ends with an
    OpenAI-shaped error event, so SDKs raise rather than take a cut answer
    for a whole one. A client that goes away closes the engine's
    connection, which cancels the request there.
    """
    outcome = StreamOutcome()
    response = web.StreamResponse(status=200, headers={**SSE_HEADERS, **headers})
    loop = asyncio.get_running_loop()
    mono = time.monotonic
    read = resp.content.readany
    limit_kind = "idle"
    try:
        await response.prepare(request)
        await response.write(first)
        outcome.first_at = outcome.last_at = mono()
        async with asyncio.timeout(None) as timer:
            while True:
                now = mono()
                limit, limit_kind = now + timeouts.idle, "idle"
                if deadline is not None and deadline <= limit:
                    limit, limit_kind = deadline, "total"
                timer.reschedule(loop.time() + (limit - now))
                data = await read()
                if not data:
                    break
                out = relay.feed(data)
                if not isinstance(out, bytes):  # guard: a guarded relay checks (maybe asks a judge) first
                    timer.reschedule(None if deadline is None else loop.time() + (deadline - mono()))
                    out = await out
                if out:
                    # Writing waits on a slow client: only `total` bounds that.
                    timer.reschedule(None if deadline is None else loop.time() + (deadline - mono()))
                    await response.write(out)
                    outcome.last_at = mono()
                if getattr(relay, "stopped", False):  # guard: stopped by a policy; closing cancels the engine
                    break
        tail = relay.close()
        if not isinstance(tail, bytes):  # guard
            tail = await tail
        if tail:
            await response.write(tail)
    except TimeoutError:
        said = f"sent nothing for {timeouts.idle:g}s" if limit_kind == "idle" else "ran out of time"
        outcome.failure = upstream_error(504, "upstream_timeout",
                                         f"the engine {said} (router.timeouts.{limit_kind}); the answer was cut")
        await _end_with_error(response, outcome.failure, relay)
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        outcome.client_gone = True
    except aiohttp.ClientError as exc:
        outcome.failure = upstream_error(502, "upstream_error",
                                         f"the engine's stream broke off ({type(exc).__name__})")
        await _end_with_error(response, outcome.failure, relay)
    finally:
        resp.close()  # releases, or closes a connection the engine is still writing to
    if not outcome.client_gone:
        try:
            await response.write_eof()
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            outcome.client_gone = True
    return response, outcome


async def _end_with_error(response: web.StreamResponse, error: GatewayError, relay: SSERelay) -> None:
    """The last event of a cut stream; a translating relay (llmgw.router.dialects) writes its API's own."""
    event = getattr(relay, "error_event", None)
    try:
        await response.write(event(error) if event is not None
                             else b"data: " + error_body(error.message, error.type, error.code) + b"\n\n")
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        pass


__all__ = ["SSE_HEADERS", "StreamOutcome", "Timeouts", "Upstream", "UpstreamFailure", "first_events",
           "read_whole", "relay_stream"]
