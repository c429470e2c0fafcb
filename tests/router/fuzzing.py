"""What the client-API fuzz suite sends, and the gateway it sends it to.

Strategies (hypothesis) for bodies that are nearly right, with random values:
text with control characters, lone surrogates and characters outside the
BMP; wrong types; huge numbers and long or deeply nested values; and for
the headers a client may set. `FuzzedGateway` runs a real gateway (store in
SQLite, the real accountant and its usage writer, a simulated engine) on an
event loop of its own in a thread, so a synchronous hypothesis test can
drive it with plain HTTP and then count the usage rows in the store.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import attrs
from aiohttp import web
from hypothesis import strategies as st

from llmgw.accounting.accountant import Accountant
from llmgw.config import parse_server_config
from llmgw.obs.metrics import GatewayMetrics
from llmgw.server import make_gateway_app
from llmgw.simengine import SimOptions, start
from llmgw.store import open_store

from .conftest import FAST, FakeResolver, principal

# ---------------------------------------------------------------- values

#: Characters that break naive code: NUL and other controls, separators, BOM, RTL marks, lone surrogates.
NASTY = ["\x00", "\x01", "\x1b", "\x7f", "\r\n", "\t", "\u0085", "\u2028", "\u2029", "\ufeff", "\u202e",
         "\ud800", "\udfff", "\udbff\udbff", "\U0001f600", "\uffff", "\\", "\"", "'", "%s", "{{x}}", "${x}"]

nasty_chars = st.one_of(
    st.characters(),                       # any code point but a surrogate
    st.characters(categories=["Cs"]),      # a lone surrogate, sent as a \udXXX escape
    st.characters(max_codepoint=0x1f),     # control characters
    st.sampled_from(NASTY),
)
#: Mostly text a client could mean (any code point, no lone surrogate), now and then the nastiest.
text = st.one_of(*[st.text(max_size=24)] * 5, st.lists(nasty_chars, max_size=24).map("".join))
#: Some long text now and then (past every column and header width, not past the body limit).
long_text = st.integers(min_value=300, max_value=70_000).map(lambda n: "x" * n)
any_text = st.one_of(text, text, text, long_text)
numbers = st.one_of(
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.sampled_from([0, -1, 1, 2 ** 31, 2 ** 63, 10 ** 30]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e308, -1e308, 5e-324, 0.5]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, any_text)
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)), max_leaves=12)


def deep(depth: int) -> Any:
    value: Any = "bottom"
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


#: Nested past router.clients.max_json_depth (64), or just within it.
deep_values = st.sampled_from([30, 63, 65, 200, 1000]).map(deep)


def either(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly the right kind of value, sometimes anything at all."""
    return st.one_of(*[valid] * 7, json_values)


def optional(**fields: st.SearchStrategy) -> st.SearchStrategy:
    """A dict with any subset of `fields`."""
    return st.fixed_dictionaries({}, optional={k: either(v) for k, v in fields.items()})


model_names = st.one_of(st.just("m"), st.just("m"), st.just("no-such-model"), text)
roles = st.sampled_from(["user", "system", "assistant", "tool", "developer", "function", "", "USER"]) | text
content_parts = st.lists(st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": any_text}),
    st.fixed_dictionaries({"type": st.just("image_url"), "image_url": either(st.fixed_dictionaries(
        {"url": st.sampled_from(["data:image/png;base64,AAAA", "http://127.0.0.1:1/x.png", ""]) | text}))}),
    st.fixed_dictionaries({"type": text}, optional={"text": json_values}),
), max_size=3)
content = st.one_of(any_text, content_parts, st.none())
metadata = st.dictionaries(text, st.one_of(any_text, json_values), max_size=20)
tools = st.lists(st.one_of(
    st.fixed_dictionaries({"type": st.just("function"), "function": optional(
        name=text, description=text, parameters=st.just({"type": "object", "properties": {}}))}),
    st.fixed_dictionaries({}, optional={"name": text, "input_schema": json_values, "type": text}),
), max_size=3)
sampling = {
    "max_tokens": st.integers(min_value=-5, max_value=2 ** 40), "temperature": numbers, "top_p": numbers,
    "n": st.integers(min_value=-1, max_value=300), "stream": st.booleans(), "seed": numbers,
    "stop": st.one_of(text, st.lists(text, max_size=6)), "user": any_text, "metadata": metadata,
    "stream_options": optional(include_usage=st.booleans()),
}


def chat_messages(min_size: int = 1, roles: st.SearchStrategy = roles, **more: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(optional(role=roles, content=content, **more), min_size=min_size,
                    max_size=4).map(lambda ms: [{"role": "user", "content": "hi", **m} for m in ms])


#: Anthropic's messages: mostly a user's turn, now and then another role (Messages takes user and assistant).
anthropic_messages = chat_messages(roles=st.sampled_from(["user"] * 4 + ["assistant", "system", ""]))


def body(required: dict[str, st.SearchStrategy], **extra: st.SearchStrategy) -> st.SearchStrategy:
    """A body with `required` (each sometimes wrong, sometimes left out) and any of `extra`."""
    must = st.fixed_dictionaries({k: either(v) for k, v in required.items()})
    drop = st.sets(st.sampled_from(sorted(required)), max_size=1) if required else st.just(set())
    more = optional(**extra)
    junk = st.one_of(st.just({}), st.just({}), st.just({}), st.dictionaries(text, json_values, max_size=2))
    return st.tuples(must, drop, more, junk, st.one_of(*[st.none()] * 9, deep_values)).map(
        lambda t: {**{k: v for k, v in t[0].items() if k not in t[1]}, **t[2], **t[3],
                   **({"extra_deep": t[4]} if t[4] is not None else {})})


BODIES: dict[str, st.SearchStrategy] = {
    "/v1/chat/completions": body({"model": model_names, "messages": chat_messages(name=text, tool_call_id=text)},
                                 tools=tools, tool_choice=st.sampled_from(["auto", "none", "required"]) | text,
                                 response_format=optional(type=st.sampled_from(["json_object", "text"])),
                                 **sampling),
    "/v1/completions": body({"model": model_names, "prompt": st.one_of(any_text, st.lists(any_text, max_size=3))},
                            echo=st.booleans(), logprobs=st.integers(-1, 10), **sampling),
    "/v1/embeddings": body({"model": model_names,
                            "input": st.one_of(any_text, st.lists(any_text, max_size=4),
                                               st.lists(st.integers(-1, 2 ** 33), max_size=5))},
                           encoding_format=st.sampled_from(["float", "base64"]) | text,
                           dimensions=st.integers(-1, 10 ** 6), user=any_text),
    "/v1/responses": body({"model": model_names, "input": st.one_of(any_text, chat_messages())},
                          instructions=any_text, max_output_tokens=st.integers(-5, 2 ** 40), store=st.booleans(),
                          previous_response_id=st.sampled_from(["resp_0", ""]) | text, stream=st.booleans(),
                          user=any_text, metadata=metadata, tools=tools, temperature=numbers),
    "/v1/messages": body({"model": model_names, "max_tokens": st.integers(-5, 2 ** 40),
                          "messages": anthropic_messages},
                         system=st.one_of(any_text, content_parts), stream=st.booleans(),
                         metadata=optional(user_id=any_text), tools=tools, temperature=numbers,
                         stop_sequences=st.lists(text, max_size=4), top_k=st.integers(-1, 10 ** 6)),
    "/v1/messages/count_tokens": body({"model": model_names, "messages": anthropic_messages},
                                      system=st.one_of(any_text, content_parts), tools=tools),
    "/v1/batches": body({"input_file_id": st.sampled_from(["file-0", ""]) | text,
                         "endpoint": st.sampled_from(["/v1/chat/completions", "/v1/embeddings", "/v1/x"]) | text,
                         "completion_window": st.sampled_from(["24h", "1h", "0h", "-1h"]) | text},
                        metadata=metadata),
    "/v1/rerank": body({"model": st.sampled_from(["rr", "rr", "m"]) | text, "query": any_text,
                        "documents": st.lists(st.one_of(any_text, optional(text=any_text)), max_size=4)},
                       top_n=st.integers(-1, 10 ** 6), return_documents=st.booleans(), user=any_text),
    "/v1/score": body({"model": st.sampled_from(["rr", "rr", "m"]) | text,
                       "text_1": st.one_of(any_text, st.lists(any_text, max_size=3)),
                       "text_2": st.one_of(any_text, st.lists(any_text, max_size=3))}),
    "/v1/moderations": body({"input": st.one_of(any_text, st.lists(any_text, max_size=3), content_parts)},
                            model=st.sampled_from(["judge", "omni-moderation-latest", "m"]) | text),
    "/v1/messages/batches": body({"requests": st.lists(optional(
        custom_id=st.sampled_from(["a", "b", "a-1"]) | text,
        params=body({"model": model_names, "max_tokens": st.integers(-5, 2 ** 40), "messages": anthropic_messages},
                    temperature=numbers)), max_size=3)}),
}
#: A body each endpoint answers 200 to (tried first in every run, so each run shows the path works end to end).
ANSWERED: dict[str, dict] = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": "ann"},
    "/v1/completions": {"model": "m", "prompt": "hi", "max_tokens": 3},
    "/v1/embeddings": {"model": "m", "input": "hi"},
    "/v1/responses": {"model": "m", "input": "hi", "max_output_tokens": 3},
    "/v1/messages": {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}],
                     "metadata": {"user_id": "ann"}},
    "/v1/messages/count_tokens": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/rerank": {"model": "rr", "query": "hi", "documents": ["hi there", "bye"]},
    "/v1/score": {"model": "rr", "text_1": "hi", "text_2": ["hi there", "bye"]},
    "/v1/moderations": {"input": ["hi", "there"]},
    "/v1/messages/batches": {"requests": [{"custom_id": "a", "params": {
        "model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}}]},
}
#: The endpoints that run through the pipeline: each answer to one is a usage row.
METERED = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages",
           "/v1/rerank", "/v1/score", "/v1/moderations", "/v1/audio/transcriptions", "/v1/audio/translations")

header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xff, exclude_characters="\x7f"),
                      max_size=40).map(str.lstrip)  # what requests will send: no leading white space
headers = st.fixed_dictionaries({}, optional={
    "user": header_text, "x-llmgw-tags": st.one_of(header_text, st.just("a," * 300)),
    "x-request-id": header_text, "x-session-id": header_text, "x-llmgw-band": header_text,
    "x-llmgw-thread": header_text, "x-llmgw-cache": header_text, "anthropic-version": header_text,
    "anthropic-beta": header_text, "Cache-Control": header_text,
    "Content-Type": st.sampled_from(["application/json"] * 6 + ["application/json; charset=latin-1", "text/plain",
                                                                "application/x+json", "multipart/form-data"]),
})


def encode(value: Any, how: str) -> bytes:
    """JSON text as a client might send it: ASCII escapes (lone surrogates as \\udXXX), raw UTF-8
    (lone surrogates as invalid bytes), or cut short."""
    if how == "escaped":
        return json.dumps(value).encode()
    raw = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return raw[: len(raw) // 2] if how == "cut" else raw


encodings = st.sampled_from(["escaped"] * 8 + ["raw", "cut"])


# ---------------------------------------------------------------- the gateway

async def _start_judge() -> tuple[web.AppRunner, str]:
    """A judge engine (no guard model runs here) that finds everything safe, as a JSON judge answers."""

    async def verdict(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": '{"safe": true}'}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", verdict)
    app.router.add_get("/v1/models", lambda r: web.json_response({"object": "list", "data": []}))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


@attrs.define
class FuzzedGateway:
    """A gateway on a loop of its own: `url`, `call(coro)` to run on that loop, `usage_ids()` after `flush()`."""

    url: str = ""
    loop: asyncio.AbstractEventLoop = attrs.field(factory=asyncio.new_event_loop)
    _thread: threading.Thread | None = None
    _parts: dict[str, Any] = attrs.Factory(dict)

    def call(self, coro, timeout: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self, tmp_path) -> FuzzedGateway:
        self._thread = threading.Thread(target=self.loop.run_forever, name="fuzzed-gateway", daemon=True)
        self._thread.start()
        self.call(self._start(tmp_path))
        return self

    async def _start(self, tmp_path) -> None:
        engine = await start(SimOptions(**{**FAST, "models": ["m"]}), shutdown_timeout=0.5)
        reranker = await start(SimOptions(**{**FAST, "models": ["rr"], "task": "score"}), shutdown_timeout=0.5)
        judge = await _start_judge()
        store = await open_store(f"sqlite:///{tmp_path}/fuzz.db")
        org = await store.create_org("acme")
        project = await store.create_project(org.id, "a")
        config = parse_server_config({
            "models": [{"name": "m", "endpoints": [{"url": engine.url + "/v1"}]},
                       {"name": "rr", "endpoints": [{"url": reranker.url + "/v1"}]},
                       {"name": "judge", "role": "guard", "guard": {"format": "json"},
                        "endpoints": [{"url": judge[1] + "/v1"}]}],
            "store": {"dsn": "/nonexistent/llmgw.db"}, "auth": {"keys_required": True},
            "router": {"scrape_interval": "100ms"},
        })
        (tmp_path / "journal").mkdir()
        accountant = Accountant(config, store, journal_dir=str(tmp_path / "journal"))
        await accountant.start()
        resolver = FakeResolver({"sk-a": principal("key-a", project=project.id)})
        app = make_gateway_app(config, store=store, resolver=resolver, accountant=accountant,
                               metrics=GatewayMetrics())
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self._parts.update(engine=engine, store=store, accountant=accountant, runner=runner, project=project,
                           reranker=reranker, judge=judge[0])

    @property
    def store(self):
        return self._parts["store"]

    def flush(self) -> None:
        """Every usage row buffered so far into the store."""
        self.call(self._parts["accountant"].usage.flush())

    def usage_ids(self) -> set[str]:
        rows = self.call(self.store.list_usage(limit=10_000))
        # a batch's lines are the worker's requests, not answers to the fuzzer's
        return {r.request_id for r in rows if not any(t.startswith("batch=") for t in r.tags or ())}

    def close(self) -> None:
        async def stop():
            await self._parts["runner"].cleanup()
            await self._parts["accountant"].stop()
            await self._parts["store"].close()
            await self._parts["engine"].close()
            await self._parts["reranker"].close()
            await self._parts["judge"].cleanup()

        try:
            self.call(stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            if self._thread is not None:
                self._thread.join(10)
            self.loop.close()
