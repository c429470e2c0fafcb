"""A gateway in process in front of simulated engines, with fake keys and a fake accountant.

`sim(**options)` starts an engine; `gateway(models=[...], **settings)` starts
a gateway whose server.yaml is built from keyword sections (`router=`,
`admission=`, `auth=`), with an open store when given one (`store=`, closed
by its owner); both listen on free ports of 127.0.0.1 and close after the
test. The fakes implement the contracts in llmgw.auth.principal
and llmgw.accounting.api and keep what they were told, for the tests.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import attrs
import openai
import pytest
from aiohttp import web

from llmgw.accounting.api import LimitExceeded, Reservation
from llmgw.auth.principal import AuthError, Principal
from llmgw.config import parse_server_config
from llmgw.obs.metrics import GatewayMetrics
from llmgw.router.gateway import GATEWAY
from llmgw.server import make_gateway_app
from llmgw.simengine import SimOptions, start
from llmgw.store.records import UsageRow

FAST = {"ttft": 0.005, "prefill_per_token": 0.0, "tpot": 0.0, "port": 0}
HELLO = [{"role": "user", "content": "Say something about rivers."}]


def principal(key_id: str = "key-1", *, project: str = "prj-1", band: str | None = None,
              models: set[str] | None = None) -> Principal:
    return Principal(key_id=key_id, key_prefix="llmgw-abc123", key_name=key_id, kind="service",
                     org_id="org-1", team_id="team-1", project_id=project, user_id=None, band=band,
                     allowed_models=frozenset(models) if models is not None else None)


class FakeResolver:
    """Secrets to principals from a dict; anything else is unknown."""

    def __init__(self, keys: dict[str, Principal] | None = None) -> None:
        self.keys = dict(keys or {})

    async def resolve(self, secret: str) -> Principal:
        if secret not in self.keys:
            raise AuthError(401, "invalid_api_key", "unknown API key")
        return self.keys[secret]

    def invalidate(self, key_id: str | None = None) -> None:
        pass


@attrs.define
class FakeAccountant:
    """Admits unless told to refuse a model; prices every token at 1 micro-dollar."""

    refuse: dict[str, LimitExceeded] = attrs.Factory(dict)
    rows: list[UsageRow] = attrs.Factory(list)
    admitted: list[str] = attrs.Factory(list)
    settled: list[tuple[str, str, int, int]] = attrs.Factory(list)
    released: int = 0

    async def admit(self, principal: Principal, model: str, *, prompt_tokens: int, max_tokens: int) -> Reservation:
        self.admitted.append(model)
        if model in self.refuse:
            raise self.refuse[model]
        return Reservation(principal=principal, model=model, reserved_micros=prompt_tokens + max_tokens,
                           prompt_tokens_estimate=prompt_tokens)

    async def settle(self, reservation: Reservation, *, model_served: str, prompt_tokens: int,
                     completion_tokens: int, cached_tokens: int = 0) -> int:
        reservation.settled = True
        self.settled.append((reservation.model, model_served, prompt_tokens, completion_tokens))
        return self.cost(model_served, prompt_tokens, completion_tokens)

    def release(self, reservation: Reservation) -> None:
        reservation.settled = True
        self.released += 1

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> int:
        return prompt_tokens + completion_tokens

    def record(self, row: UsageRow) -> None:
        self.rows.append(row)

    def row(self, request_id: str) -> UsageRow:
        return next(r for r in self.rows if r.request_id == request_id)


@attrs.define
class RunningGateway:
    app: web.Application
    runner: web.AppRunner
    url: str
    accountant: FakeAccountant
    resolver: FakeResolver
    metrics: GatewayMetrics
    clients: list = attrs.Factory(list)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def gateway(self):
        return self.app[GATEWAY]

    def client(self, key: str = "none", **kw) -> openai.AsyncOpenAI:
        client = openai.AsyncOpenAI(base_url=self.base_url, api_key=key, max_retries=0, **kw)
        self.clients.append(client)
        return client

    def sync_client(self, key: str = "none", **kw) -> openai.OpenAI:
        client = openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0, **kw)
        self.clients.append(client)
        return client

    async def close(self) -> None:
        for client in self.clients:
            result = client.close()
            if asyncio.iscoroutine(result):
                await result
        await self.runner.cleanup()

    async def settle(self, count: int | None = None, timeout: float = 2.0) -> list[UsageRow]:
        """Wait until `count` usage rows are recorded (rows are written as handlers finish)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while count is not None and len(self.accountant.rows) < count and loop.time() < end:
            await asyncio.sleep(0.01)
        return self.accountant.rows


def model(name: str, *engines, **extra) -> dict[str, Any]:
    """A models[] entry serving `name` at each engine (a RunningEngine or a URL)."""
    urls = [e if isinstance(e, str) else e.url + "/v1" for e in engines]
    entry: dict[str, Any] = {"name": name, **extra}
    if urls:
        entry["endpoints"] = [{"url": u} for u in urls]
    elif "profiles" not in extra:
        entry["profiles"] = [{"engine": "sim"}]  # a cluster model: no replica until the scheduler runs one
    return entry


@pytest.fixture
async def sim():
    running = []

    async def make(**overrides):
        engine = await start(SimOptions(**{**FAST, **overrides}), shutdown_timeout=0.5)
        running.append(engine)
        return engine

    yield make
    for engine in running:
        await engine.close()


@pytest.fixture
async def gateway():
    running: list[RunningGateway] = []

    async def make(models: list[dict], *, keys: dict[str, Principal] | None = None,
                   accountant: FakeAccountant | None = None, store=None, **sections) -> RunningGateway:
        raw: dict[str, Any] = {"models": models, "store": {"dsn": "/nonexistent/llmgw.db"}}
        raw["auth"] = {"keys_required": keys is not None, **sections.pop("auth", {})}
        router = sections.pop("router", {})
        raw["router"] = {"scrape_interval": "100ms", **router}
        raw.update(sections)
        config = parse_server_config(raw)
        resolver = FakeResolver(keys)
        accountant = accountant or FakeAccountant()
        metrics = GatewayMetrics()
        app = make_gateway_app(config, store=store, resolver=resolver, accountant=accountant, metrics=metrics)
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        gw = RunningGateway(app, runner, f"http://127.0.0.1:{port}", accountant, resolver, metrics)
        running.append(gw)
        return gw

    yield make
    for gw in running:
        await gw.close()


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


# A gateway with a store, and an engine that keeps what it is sent (threads, notes, files, batches, cache).
from .stored import recorder, stored_gateway  # noqa: F401
