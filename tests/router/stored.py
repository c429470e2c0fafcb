"""A gateway in process with a store (SQLite in tmp_path), for what clients keep: threads, notes, files, batches, cache.

`stored_gateway(models, **sections)` starts one whose keys are fakes:
`sk-a` (project A, made in the store), `sk-b` (project B) and `sk-personal`
(a person's key, no project). `recorder(context=…)` starts an engine that
keeps every request it gets and answers `answer N`, streamed or not.
Import the fixtures into a test module to use them.
"""

from __future__ import annotations

import asyncio
import warnings
import json
from typing import Any

import aiohttp
import attrs
import openai
import pytest
from aiohttp import web

from llmgw.auth.principal import Principal
from llmgw.config import parse_server_config
from llmgw.obs.metrics import GatewayMetrics
from llmgw.router.client_data import CLIENT_DATA, ClientData
from llmgw.server import make_gateway_app
from llmgw.store import Project, Store, open_store

from .conftest import FakeAccountant, FakeResolver, RunningGateway, principal


@attrs.define
class StoredGateway:
    running: RunningGateway
    store: Store
    project: Project
    other: Project

    @property
    def data(self) -> ClientData:
        return self.running.app[CLIENT_DATA]

    @property
    def url(self) -> str:
        return self.running.url

    @property
    def accountant(self) -> FakeAccountant:
        return self.running.accountant

    def client(self, key: str = "sk-a", **kw) -> openai.AsyncOpenAI:
        return self.running.client(key, **kw)

    def headers(self, key: str = "sk-a", **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}", **extra}

    async def turn_on(self, project: Project | None = None, **features: Any) -> None:
        """Change a project's switches in the store and make the gateway read them again."""
        await self.store.set_project_features((project or self.project).id, actor="test", **features)
        self.data.forget_features()


@pytest.fixture
async def stored_gateway(tmp_path):
    made: list[tuple[RunningGateway, Store]] = []

    async def make(models: list[dict], *, keys_required: bool = True, **sections) -> StoredGateway:
        store = await open_store(f"sqlite:///{tmp_path}/store-{len(made)}.db")
        org = await store.create_org("acme")
        project = await store.create_project(org.id, "a")
        other = await store.create_project(org.id, "b")
        keys = {
            "sk-a": principal("key-a", project=project.id),
            "sk-b": principal("key-b", project=other.id),
            "sk-personal": Principal(key_id="key-p", key_prefix="llmgw-p", key_name="mine", kind="personal",
                                     org_id=None, team_id=None, project_id=None, user_id="usr-1", band=None,
                                     allowed_models=None),
        }
        raw: dict[str, Any] = {"models": models, "store": {"dsn": "/nonexistent/llmgw.db"}}
        raw["auth"] = {"keys_required": keys_required, **sections.pop("auth", {})}
        raw["router"] = {"scrape_interval": "100ms", **sections.pop("router", {})}
        raw.update(sections)
        config = parse_server_config(raw)
        resolver = FakeResolver(keys if keys_required else None)
        accountant = FakeAccountant()
        metrics = GatewayMetrics()
        app = make_gateway_app(config, store=store, resolver=resolver, accountant=accountant, metrics=metrics)
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        running = RunningGateway(app, runner, f"http://127.0.0.1:{port}", accountant, resolver, metrics)
        made.append((running, store))
        return StoredGateway(running, store, project, other)

    yield make
    for running, store in made:
        # Bounded: a shutdown stuck on a swallowed cancellation must not hang the whole suite.
        closing = asyncio.ensure_future(running.close())
        done, _ = await asyncio.wait({closing}, timeout=20)
        if not done:
            warnings.warn("the gateway under test did not close within 20 s; left behind")
        await store.close()


@attrs.define
class Recorder:
    url: str
    runner: web.AppRunner
    seen: list[dict] = attrs.Factory(list)

    def messages(self, i: int = -1) -> list[tuple[str, str]]:
        """(role, content) of the messages of request i."""
        return [(m["role"], m.get("content")) for m in self.seen[i]["messages"]]


@pytest.fixture
async def recorder():
    running: list[Recorder] = []

    async def make(*, context: int = 4096, name: str = "m", llamacpp: bool = False) -> Recorder:
        """`llamacpp`: say the context as llama.cpp's server does (trained in /v1/models, started in /props)."""
        rec: Recorder

        async def chat(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            rec.seen.append(body)
            last = body["messages"][-1].get("content")
            if last == "fail":
                return web.json_response({"error": {"message": "no", "type": "invalid_request_error"}}, status=400)
            text = f"answer {len(rec.seen)}"
            usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
            if not body.get("stream"):
                return web.json_response({
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}], "usage": usage})
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for piece, finish in ((text[:3], None), (text[3:], None), ("", "stop")):
                chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "delta": {"content": piece} if piece else {},
                                      "finish_reason": finish}]}
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            if (body.get("stream_options") or {}).get("include_usage"):
                chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                         "choices": [], "usage": usage}
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            return resp

        async def models(request: web.Request) -> web.Response:
            entry = {"id": name, "object": "model", **({"meta": {"n_ctx_train": 131072}} if llamacpp
                                                       else {"max_model_len": context})}
            return web.json_response({"object": "list", "data": [entry]})

        async def props(request: web.Request) -> web.Response:
            return web.json_response({"default_generation_settings": {"n_ctx": context}, "total_slots": 1})

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/v1/models", models)
        if llamacpp:
            app.router.add_get("/props", props)
        # A short shutdown: the gateway's keep-alive connections must not hold the test's end up.
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        rec = Recorder(f"http://127.0.0.1:{runner.addresses[0][1]}", runner)
        running.append(rec)
        return rec

    yield make
    for rec in running:
        await rec.runner.cleanup()


async def wait_for(predicate, timeout: float = 30.0, every: float = 0.05):
    """Poll an async predicate until it returns something true."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if loop.time() > end:
            raise AssertionError(f"not done within {timeout}s")
        await asyncio.sleep(every)


async def get_json(http: aiohttp.ClientSession, method: str, url: str, **kw) -> tuple[int, Any, dict]:
    async with http.request(method, url, **kw) as resp:
        text = await resp.text()
        return resp.status, (json.loads(text) if text else None), dict(resp.headers)
