"""Tracing: a request's spans from the gateway to the engine reach a collector over OTLP/HTTP, the engine is
given the trace as traceparent, and a gateway without tracing.endpoint makes neither spans nor traceparents."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys

import attrs
import pytest
from aiohttp import web

import llmgw.obs.tracing  # noqa: F401 - the SDK loads while tests are collected, not in the first test
from llmgw.obs import logs

from .conftest import HELLO, model, principal
from .otlp import OTLPReceiver

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
STAGES = {"auth", "limits", "admission", "engine", "accounting"}


@attrs.define
class HeaderEngine:
    """An OpenAI-shaped engine that keeps the headers of every request; the first `busy` answer 503."""

    url: str = ""
    headers: list[dict[str, str]] = attrs.Factory(list)
    busy: int = 0
    runner: web.AppRunner | None = None

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.headers.append(dict(request.headers))
        body = await request.json()
        if self.busy > 0:
            self.busy -= 1
            return web.json_response({"error": {"message": "busy"}}, status=503)
        usage = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
        if not body.get("stream"):
            return web.json_response({"id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
                                      "choices": [{"index": 0, "finish_reason": "stop",
                                                   "message": {"role": "assistant", "content": "Rivers flow."}}],
                                      "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in ("Rivers", " flow."):
            chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                 "choices": [], "usage": usage}
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n")
        return resp

    async def start(self) -> HeaderEngine:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}/v1"
        return self


@pytest.fixture
async def engines():
    made: list[HeaderEngine] = []

    async def make() -> HeaderEngine:
        engine = await HeaderEngine().start()
        made.append(engine)
        return engine

    yield make
    for engine in made:
        await engine.runner.cleanup()


@pytest.fixture
async def collector():
    receiver = await OTLPReceiver().start()
    yield receiver
    await receiver.stop()


async def spans_of(gw, collector: OTLPReceiver, root_name: str, count: int = 1):
    """Flush the gateway's spans until `count` root spans called `root_name` have reached the collector."""
    for _ in range(100):
        await gw.gateway.tracing.flush()
        roots = collector.named(root_name)
        if len(roots) >= count:
            return roots
        await asyncio.sleep(0.02)
    raise AssertionError(f"{root_name} not exported; got {[s.name for s in collector.spans]}")


def traceparent_of(headers: dict[str, str]) -> tuple[str, str, str]:
    version, trace_id, parent, flags = headers["traceparent"].split("-")
    assert version == "00"
    return trace_id, parent, flags


async def test_a_streamed_request_continues_the_clients_trace_down_to_the_engine(gateway, engines, collector):
    engine = await engines()
    gw = await gateway([model("m", engine.url)], keys={"sk-1": principal(project="prj-rivers")},
                       tracing={"endpoint": collector.url, "service_name": "llmgw-test",
                                "headers": {"x-collector-key": "let-me-in"}})
    client = gw.client("sk-1", default_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
    raw = await client.chat.completions.with_raw_response.create(model="m", messages=HELLO, stream=True)
    request_id = raw.headers["x-llmgw-request-id"]
    text = "".join([c.choices[0].delta.content or "" async for c in raw.parse() if c.choices])
    assert text == "Rivers flow."

    [root] = await spans_of(gw, collector, "POST /v1/chat/completions")
    assert (root.trace_id, root.parent_id, root.kind) == (CLIENT_TRACE, CLIENT_SPAN, "server")
    assert root.service == "llmgw-test"
    assert root.attributes["llmgw.request_id"] == request_id
    assert root.attributes["gen_ai.request.model"] == "m" and root.attributes["llmgw.project"] == "prj-rivers"
    assert (root.attributes["llmgw.team"], root.attributes["llmgw.org"]) == ("team-1", "org-1")
    assert root.attributes["http.response.status_code"] == 200 and root.attributes["llmgw.outcome"] == "ok"
    assert root.attributes["gen_ai.usage.output_tokens"] == 2 and root.attributes["llmgw.stream"] is True

    spans = {s.name: s for s in collector.trace(CLIENT_TRACE)}
    assert STAGES | {"stream"} <= set(spans)
    assert {s.attributes["llmgw.request_id"] for s in spans.values()} == {request_id}  # on every span
    for stage in STAGES:
        assert spans[stage].parent_id == root.span_id, stage
    call = spans["engine"]
    assert call.kind == "client" and call.attributes["llmgw.attempt"] == 1 and "first byte" in call.events
    assert spans["stream"].parent_id == call.span_id

    # The engine was given the trace, with the engine span as the parent of what it does.
    [sent] = engine.headers
    assert traceparent_of(sent) == (CLIENT_TRACE, call.span_id, "01")
    # What the collector was sent: the configured header, and never the conversation.
    headers, body = collector.posts[0]
    assert headers["x-collector-key"] == "let-me-in"
    assert all(b"about rivers" not in b and b"flow." not in b for _, b in collector.posts)
    assert all(b"sk-1" not in b for _, b in collector.posts)


async def test_a_request_without_traceparent_starts_a_trace_the_engine_joins(gateway, engines, collector):
    engine = await engines()
    gw = await gateway([model("m", engine.url)], tracing={"endpoint": collector.url + "/"},
                       guard={"default": ["checked"], "policies": {"checked": {"input": {"max_chars": 5000}}}})
    answer = await gw.client().chat.completions.create(model="m", messages=HELLO)
    assert answer.choices[0].message.content == "Rivers flow."
    [root] = await spans_of(gw, collector, "POST /v1/chat/completions")
    assert root.parent_id == "" and root.trace_id != CLIENT_TRACE
    [call] = [s for s in collector.trace(root.trace_id) if s.name == "engine"]
    trace_id, parent, flags = traceparent_of(engine.headers[0])
    assert (trace_id, parent) == (root.trace_id, call.span_id) and int(flags, 16) & 1  # sampled
    names = {s.name for s in collector.trace(root.trace_id)}
    assert "stream" not in names and {"guard input", "guard output"} <= names  # a policy applies: its checks


async def test_a_retried_attempt_is_a_failed_engine_span_and_the_log_lines_name_the_trace(gateway, engines,
                                                                                          collector):
    busy, ready = await engines(), await engines()
    busy.busy = 1
    gw = await gateway([model("m", busy.url, ready.url)], router={"retries": {"attempts": 1, "backoff": "0s"},
                                                                  "affinity": {"prefix": False, "session": False}},
                       tracing={"endpoint": collector.url})
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(logs.LogfmtFormatter())
    logging.getLogger("llmgw.router.requests").addHandler(handler)
    try:
        for _ in range(4):  # which replica is tried first is the chooser's: ask until one attempt failed
            await gw.client().chat.completions.create(model="m", messages=HELLO)
            if busy.busy == 0:
                break
    finally:
        logging.getLogger("llmgw.router.requests").removeHandler(handler)
    assert busy.busy == 0, "the busy engine was never tried"
    roots = await spans_of(gw, collector, "POST /v1/chat/completions", count=len(busy.headers) + len(ready.headers) - 1)
    [retried] = [r for r in roots if len([s for s in collector.trace(r.trace_id) if s.name == "engine"]) == 2]
    first, second = sorted((s for s in collector.trace(retried.trace_id) if s.name == "engine"),
                           key=lambda s: s.attributes["llmgw.attempt"])
    assert first.error and first.attributes["llmgw.code"] == "upstream_busy" and not second.error
    assert traceparent_of(busy.headers[-1])[:2] == (retried.trace_id, first.span_id)
    assert traceparent_of(ready.headers[-1])[:2] == (retried.trace_id, second.span_id)
    failed = [line for line in lines.getvalue().splitlines() if "engine failed" in line]
    assert failed and f"trace_id={retried.trace_id}" in failed[0]
    assert f"request_id={retried.attributes['llmgw.request_id']}" in failed[0]


async def test_sample_ratio_keeps_new_traces_and_follows_a_callers_choice(gateway, engines, collector):
    engine = await engines()
    gw = await gateway([model("m", engine.url)], tracing={"endpoint": collector.url, "sample_ratio": 0})
    await gw.client().chat.completions.create(model="m", messages=HELLO)  # a new trace, not kept
    chosen = gw.client(default_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
    await chosen.chat.completions.create(model="m", messages=HELLO)  # the caller keeps it: so do we
    [root] = await spans_of(gw, collector, "POST /v1/chat/completions")
    assert root.trace_id == CLIENT_TRACE and {s.trace_id for s in collector.spans} == {CLIENT_TRACE}
    # The trace not kept still reaches the engine, marked not sampled, so the engine does not keep it either.
    trace_id, _, flags = traceparent_of(engine.headers[0])
    assert trace_id != CLIENT_TRACE and int(flags, 16) & 1 == 0


async def test_a_collector_that_is_down_slows_no_request(gateway, engines):
    engine = await engines()
    gw = await gateway([model("m", engine.url)], tracing={"endpoint": "http://127.0.0.1:9", "timeout": "200ms"})
    loop = asyncio.get_running_loop()
    for _ in range(3):
        began = loop.time()
        answer = await gw.client().chat.completions.create(model="m", messages=HELLO)
        assert answer.choices[0].message.content == "Rivers flow." and loop.time() - began < 0.5


async def test_the_last_spans_are_sent_when_the_gateway_stops(gateway, engines, collector):
    engine = await engines()
    gw = await gateway([model("m", engine.url)], tracing={"endpoint": collector.url})
    await gw.client().chat.completions.create(model="m", messages=HELLO)
    await gw.close()
    assert [s.name for s in collector.spans if s.kind == "server"] == ["POST /v1/chat/completions"]


async def test_without_an_endpoint_nothing_is_traced_and_no_traceparent_is_made_up(gateway, engines, collector):
    engine = await engines()
    gw = await gateway([model("m", engine.url)])
    assert gw.gateway.tracing is None
    await gw.client().chat.completions.create(model="m", messages=HELLO)
    stream = await gw.client().chat.completions.create(model="m", messages=HELLO, stream=True)
    [c async for c in stream]
    assert len(engine.headers) == 2
    assert not any("traceparent" in {k.lower() for k in h} for h in engine.headers)
    assert collector.posts == []


async def test_a_gateway_without_tracing_never_imports_the_sdk(gateway, engines, monkeypatch):
    # An import of the tracing module (and through it the SDK) would now fail, and with it the request.
    monkeypatch.setitem(sys.modules, "llmgw.obs.tracing", None)
    engine = await engines()
    gw = await gateway([model("m", engine.url)])
    answer = await gw.client().chat.completions.create(model="m", messages=HELLO)
    assert answer.choices[0].message.content == "Rivers flow."


def test_every_log_line_written_during_a_request_names_it():
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(logs.LogfmtFormatter())
    logger = logging.getLogger("llmgw.test.tracing")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        token = logs.REQUEST_ID.set("req_abc")
        logger.warning("inside")
        logs.REQUEST_ID.reset(token)
        logger.warning("outside")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    inside, outside = lines.getvalue().splitlines()
    assert "request_id=req_abc" in inside and "request_id" not in outside
