"""An OTLP/HTTP receiver the tests run: what a collector would be given, decoded with opentelemetry-proto.

`OTLPReceiver().start()` listens on a free port of 127.0.0.1 and answers
`POST /v1/traces` as a collector does; `spans` are the spans it was sent, as
`ReceivedSpan`s (ids in hex, attributes as plain values), `posts` each
request's headers and raw body.
"""

from __future__ import annotations

from typing import Any

import attrs
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@attrs.frozen
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: str
    attributes: dict[str, Any]
    error: bool
    events: tuple[str, ...]
    service: str


def _value(v) -> Any:
    which = v.WhichOneof("value")
    return getattr(v, which) if which else None


class OTLPReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.posts.append((dict(request.headers), body))
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    self.spans.append(ReceivedSpan(
                        name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(), kind=KINDS.get(s.kind, str(s.kind)),
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        error=s.status.code == 2, events=tuple(e.name for e in s.events),
                        service=str(resource.get("service.name", ""))))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    async def start(self) -> OTLPReceiver:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def named(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name]

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.trace_id == trace_id]
