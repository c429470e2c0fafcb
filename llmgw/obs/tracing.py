"""Traces of client requests: OpenTelemetry spans sent to a collector over OTLP/HTTP.

Imported only when server.yaml sets `tracing.endpoint` (llmgw.server.app
builds a `Tracing` then): a gateway without it never loads the SDK and makes
no span. With it, each request to the client API gets a root span (SERVER)
begun by `Tracing.middleware`, continuing the trace of a `traceparent` the
client sent; the pipeline (llmgw.router.pipeline) opens its stages beneath
it through the `RequestTrace` it finds on the request: auth, limits, guard
input, admission, one `engine` span (CLIENT) per attempt whose context goes
to the engine as `traceparent` (vLLM and SGLang continue it), the `stream`
under it, and accounting.

Spans carry ids, names and counts (the request id, the model, the project,
the replica, tokens), never a prompt, an answer or a key. Finished spans
are batched and sent by the SDK's BatchSpanProcessor from its own thread,
off the event loop; a collector that is down costs dropped spans, never a
slower request.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from aiohttp import web
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from llmgw import __version__
from llmgw.config.server import TracingConfig
from llmgw.obs import logs

__all__ = ["RequestTrace", "Tracing", "traces_url"]

#: Paths not traced: probes that would bury requests under spans of their own.
_UNTRACED = frozenset({"/health", "/ready"})
_PROPAGATOR = TraceContextTextMapPropagator()


def traces_url(endpoint: str) -> str:
    """The collector's traces address: `endpoint` as given when it has a path, else with /v1/traces."""
    parts = urlsplit(endpoint)
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/traces")
    return urlunsplit(parts)


class Tracing:
    """One tracer provider for a gateway: its sampler, its exporter and its batch processor."""

    def __init__(self, config: TracingConfig, *, exporter=None) -> None:
        resource = Resource.create({"service.name": config.service_name, "service.version": __version__,
                                    "service.instance.id": socket.gethostname()})
        self.provider = TracerProvider(resource=resource,
                                       sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)))
        if exporter is None:
            exporter = OTLPSpanExporter(endpoint=traces_url(config.endpoint),
                                        headers={k: v.reveal() for k, v in config.headers.items()},
                                        timeout=config.timeout.total_seconds())
        self.processor = BatchSpanProcessor(exporter)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("llmgw.router", __version__)

    async def flush(self, timeout_s: float = 10.0) -> bool:
        """Send every finished span now (the export runs in the processor's thread)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.provider.force_flush, int(timeout_s * 1000))

    async def close(self) -> None:
        """Send what is left and stop the processor's thread."""
        await asyncio.get_running_loop().run_in_executor(None, self.provider.shutdown)

    def begin(self, request: web.Request, request_id: str | None) -> RequestTrace:
        """The root span of one client request, under the caller's trace when it sent a traceparent."""
        parent = _PROPAGATOR.extract(request.headers)
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"  # a client's path is no span name
        attributes: dict[str, Any] = {"http.request.method": request.method, "http.route": route,
                                      "url.path": request.path}
        if request_id:
            attributes["llmgw.request_id"] = request_id
        root = self.tracer.start_span(f"{request.method} {route}", context=parent, kind=SpanKind.SERVER,
                                      attributes=attributes)
        return RequestTrace(self.tracer, root, request_id)

    def middleware(self, request_key: web.RequestKey, id_key: web.RequestKey):
        """The aiohttp middleware that traces every request but probes; it runs inside the one giving ids."""

        @web.middleware
        async def traced(request: web.Request, handler) -> web.StreamResponse:
            if request.path in _UNTRACED:
                return await handler(request)
            request_trace = self.begin(request, request.get(id_key))
            request[request_key] = request_trace
            root = request_trace.root
            token = logs.TRACE_ID.set(request_trace.trace_id)
            try:
                response = await handler(request)
            except asyncio.CancelledError:
                root.set_attribute("llmgw.outcome", "cancelled")
                raise
            except web.HTTPException as exc:
                _answered(root, exc.status)
                raise
            except Exception as exc:
                status = getattr(exc, "status", 500)
                _answered(root, status if isinstance(status, int) else 500, getattr(exc, "code", None))
                raise
            else:
                _answered(root, response.status)
                return response
            finally:
                root.end()
                logs.TRACE_ID.reset(token)

        return traced


def _answered(span, status: int, code: str | None = None) -> None:
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR, code or f"HTTP {status}"))


class _Child:
    """A child span as a context manager: ended on the way out, marked failed by what was raised."""

    __slots__ = ("span",)

    def __init__(self, span) -> None:
        self.span = span

    def __enter__(self):
        return self.span

    def __exit__(self, kind, exc, tb) -> None:
        if exc is not None:
            fail(self.span, exc)
        self.span.end()


def fail(span, exc: BaseException) -> None:
    """Mark a span failed by `exc`: its code (a GatewayError's), never its message (it may quote a client)."""
    if isinstance(exc, asyncio.CancelledError):
        span.set_attribute("llmgw.outcome", "cancelled")
        return
    code = getattr(exc, "code", None) or type(exc).__name__
    span.set_attribute("llmgw.code", str(code))
    span.set_status(Status(StatusCode.ERROR, str(code)))


class RequestTrace:
    """The spans of one request: its root, and what the pipeline opens beneath it."""

    __slots__ = ("tracer", "root", "_context", "trace_id", "_ids")

    def __init__(self, tracer, root, request_id: str | None = None) -> None:
        self.tracer = tracer
        self.root = root
        self._context = trace.set_span_in_context(root)
        self.trace_id = format(root.get_span_context().trace_id, "032x")
        self._ids = {"llmgw.request_id": request_id} if request_id else {}  # on every span of the request

    def span(self, name: str, parent=None, **attributes: Any) -> _Child:
        """A stage's span (`with trace.span("auth"):`), under the root or under `parent`."""
        context = self._context if parent is None else trace.set_span_in_context(parent)
        return _Child(self.tracer.start_span(name, context=context, attributes={**self._ids, **attributes}))

    def engine(self, *, replica_id: str, url: str, model: str, attempt: int):
        """One attempt at the engine (CLIENT): end it with `engine_done`."""
        parts = urlsplit(url)
        return self.tracer.start_span("engine", context=self._context, kind=SpanKind.CLIENT, attributes={
            **self._ids, "llmgw.replica_id": replica_id, "llmgw.attempt": attempt, "gen_ai.request.model": model,
            "server.address": parts.hostname or "", "server.port": parts.port or 0})

    @staticmethod
    def headers(span) -> dict[str, str]:
        """The W3C trace context of `span` for the engine: traceparent, and tracestate when there is one."""
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return carrier

    @staticmethod
    def engine_done(span, *, status: int | None = None, error: BaseException | None = None,
                    code: str | None = None) -> None:
        """End an attempt's span: the engine's status, and what went wrong (`error`, or a cut stream's `code`)."""
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        if error is not None:
            fail(span, error)
        elif code:
            span.set_attribute("llmgw.code", code)
            span.set_status(Status(StatusCode.ERROR, code))
        span.end()

    def finish(self, call: Any) -> None:
        """What the request came to, on the root span (llmgw.router.pipeline's Call): ids, names and counts."""
        root = self.root
        principal = call.principal
        values = {
            "llmgw.request_id": call.request_id,
            "gen_ai.request.model": call.model_asked,
            "llmgw.model": call.model,
            "gen_ai.response.model": call.model_served,
            "llmgw.replica_id": call.replica,
            "llmgw.band": call.band,
            "llmgw.outcome": "limited" if call.limited else call.outcome,
            "llmgw.code": call.code,
            "llmgw.stream": call.stream,
            "gen_ai.usage.input_tokens": call.prompt_tokens,
            "gen_ai.usage.output_tokens": call.completion_tokens,
        }
        if principal is not None:
            values["llmgw.project"] = principal.project_id or ""
            values["llmgw.team"] = principal.team_id or ""
            values["llmgw.org"] = principal.org_id or ""
        if call.queue_s is not None:
            values["llmgw.queue_ms"] = int(call.queue_s * 1000)
        if call.first_at is not None:
            values["llmgw.ttft_ms"] = int((call.first_at - call.started) * 1000)
        root.set_attributes({k: v for k, v in values.items() if v is not None and v != ""})
