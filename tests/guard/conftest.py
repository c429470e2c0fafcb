"""Helpers for the guard tests: the detectors, and a guarded gateway in front of simulated engines."""

import asyncio
from typing import Any

import attrs
import openai
import pytest
from aiohttp import web
from llmgw_guard_detectors import (
    InjectionDetector,
    PersonalDataDetector,
    SecretsDetector,
)

from llmgw.accounting.api import Reservation
from llmgw.auth.principal import AuthError, Principal
from llmgw.config import parse_server_config
from llmgw.obs.metrics import GatewayMetrics
from llmgw.router.gateway import GATEWAY
from llmgw.server import make_gateway_app
from llmgw.simengine import SimOptions, start
from llmgw.store.records import UsageRow


def _spans(detector, text):
    return [(f.kind, text[f.start:f.end]) for f in detector.find(text)]


@pytest.fixture(scope="session")
def spans():
    """(kind, matched text) for each finding, read back from the original by position."""
    return _spans


@pytest.fixture(scope="session")
def pii():
    return PersonalDataDetector()


@pytest.fixture(scope="session")
def secrets():
    return SecretsDetector()


@pytest.fixture(scope="session")
def injection():
    return InjectionDetector()


# ---------------------------------------------------------------- the guardrails on the serving path
#
# A gateway in process in front of simulated engines (a model named echo…
# answers with what it was sent), with fake keys and a fake accountant;
# policies come from the `guard=` section of the server.yaml each test writes.

FAST_ENGINE = {"ttft": 0.002, "prefill_per_token": 0.0, "tpot": 0.0, "port": 0}


def make_principal(key_id: str = "key-1", *, project: str = "prj-1", team: str = "team-1",
                   org: str = "org-1") -> Principal:
    return Principal(key_id=key_id, key_prefix="llmgw-abc123", key_name=key_id, kind="service",
                     org_id=org, team_id=team, project_id=project, user_id=None, band=None, allowed_models=None)


class GuardFakeResolver:
    def __init__(self, keys: dict[str, Principal]) -> None:
        self.keys = keys

    async def resolve(self, secret: str) -> Principal:
        if secret not in self.keys:
            raise AuthError(401, "invalid_api_key", "unknown API key")
        return self.keys[secret]

    def invalidate(self, key_id: str | None = None) -> None:
        pass


@attrs.define
class GuardFakeAccountant:
    """Admits everything; keeps the rows, the charges and the releases."""

    rows: list[UsageRow] = attrs.Factory(list)
    settled: list[tuple[int, int]] = attrs.Factory(list)
    released: int = 0

    async def admit(self, principal, model, *, prompt_tokens, max_tokens) -> Reservation:
        return Reservation(principal=principal, model=model, reserved_micros=0, prompt_tokens_estimate=prompt_tokens)

    async def settle(self, reservation, *, model_served, prompt_tokens, completion_tokens, cached_tokens=0) -> int:
        reservation.settled = True
        self.settled.append((prompt_tokens, completion_tokens))
        return prompt_tokens + completion_tokens

    def release(self, reservation) -> None:
        reservation.settled = True
        self.released += 1

    def cost(self, model, prompt_tokens, completion_tokens, cached_tokens=0) -> int:
        return prompt_tokens + completion_tokens

    def record(self, row: UsageRow) -> None:
        self.rows.append(row)


@attrs.define
class GuardedGateway:
    app: web.Application
    runner: web.AppRunner
    url: str
    accountant: GuardFakeAccountant
    metrics: GatewayMetrics

    @property
    def gateway(self):
        return self.app[GATEWAY]

    def client(self, key: str = "none") -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0)

    async def row(self, index: int = -1, timeout: float = 2.0) -> UsageRow:
        """A usage row, once the handler has recorded it (rows are written as handlers finish)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        want = index + 1 if index >= 0 else 1
        while len(self.accountant.rows) < want and loop.time() < end:
            await asyncio.sleep(0.01)
        return self.accountant.rows[index]

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels or None)
        return value or 0.0


@pytest.fixture
async def sim():
    running = []

    async def make(**overrides):
        engine = await start(SimOptions(**{**FAST_ENGINE, **overrides}), shutdown_timeout=0.5)
        running.append(engine)
        return engine

    yield make
    for engine in running:
        await engine.close()


def endpoint_model(name: str, engine, **extra) -> dict[str, Any]:
    """A models[] entry served by a sim engine (or any OpenAI-shaped base URL)."""
    url = engine if isinstance(engine, str) else engine.url + "/v1"
    return {"name": name, "endpoints": [{"url": url}], **extra}


@pytest.fixture
async def guarded():
    """A factory: `await guarded(models, guard={...}, keys={...}, store=...)` starts a gateway."""
    running: list[GuardedGateway] = []

    async def make(models: list[dict], *, guard: dict | None = None, keys: dict[str, Principal] | None = None,
                   store=None, **sections) -> GuardedGateway:
        raw: dict[str, Any] = {"models": models, "store": {"dsn": "/nonexistent/llmgw.db"},
                               "auth": {"keys_required": keys is not None},
                               "router": {"scrape_interval": "100ms"}, **sections}
        if guard is not None:
            raw["guard"] = guard
        config = parse_server_config(raw)
        accountant = GuardFakeAccountant()
        metrics = GatewayMetrics()
        app = make_gateway_app(config, store=store, resolver=GuardFakeResolver(keys or {}), accountant=accountant,
                               metrics=metrics)
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        gw = GuardedGateway(app, runner, f"http://127.0.0.1:{runner.addresses[0][1]}", accountant, metrics)
        running.append(gw)
        return gw

    yield make
    for gw in running:
        await gw.runner.cleanup()


@pytest.fixture(params=["sqlite", "postgres"])
async def guard_store(request, tmp_path):
    """A store on each backend (PostgreSQL from the session's server)."""
    from llmgw.store import open_store

    if request.param == "sqlite":
        store = await open_store(f"sqlite:///{tmp_path}/store.db")
        try:
            yield store
        finally:
            await store.close()
        return
    server = request.getfixturevalue("postgres_server")
    name = server.create_database()
    store = await open_store(server.dsn(name))
    try:
        yield store
    finally:
        await store.close()
        server.drop_database(name)


@pytest.fixture(scope="session")
def served():
    """`served(name, engine, **extra)`: a models[] entry served by a sim engine at its address."""
    return endpoint_model


@pytest.fixture(scope="session")
def principal_for():
    """`principal_for(key_id, project=..., team=..., org=...)`: a service key's principal."""
    return make_principal
