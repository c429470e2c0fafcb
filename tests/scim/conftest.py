"""A gateway with a SQLite store and a simulated engine, listening, with organization
acme (and its SCIM token) and a person in it who has a working API key."""

from __future__ import annotations

import attrs
import pytest
from aiohttp.test_utils import TestServer

from llmgw.config import parse_server_config
from llmgw.scim import tokens
from llmgw.server import make_gateway_app
from llmgw.server.app import STORE
from llmgw.simengine import SimOptions, start
from llmgw.store import Store
from llmgw.web.portal import PORTAL


@attrs.define
class ScimSite:
    server: TestServer
    token: str
    engine_url: str

    @property
    def store(self) -> Store:
        return self.server.app[STORE]

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    @property
    def scim(self) -> str:
        return self.url + "/scim/v2"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "Content-Type": "application/scim+json"}


def scim_config(engine_url: str, db: str, **sections):
    return parse_server_config({
        "store": {"dsn": db},
        "router": {"trusted_proxies": ["127.0.0.1"]},
        "accounting": {"flush_interval": "50ms"},
        "models": [{"name": "m", "endpoints": [{"url": engine_url + "/v1"}]}],
        **sections,
    })


async def start_scim_site(engine_url: str, db: str) -> ScimSite:
    server = TestServer(make_gateway_app(scim_config(engine_url, db)), host="127.0.0.1")
    await server.start_server()
    tenancy = server.app[PORTAL].tenancy("test")
    acme = await tenancy.create("acme")
    token = await tokens.issue(server.app[STORE], acme.id, actor="test")
    return ScimSite(server, token, engine_url)


@pytest.fixture
async def engine():
    running = await start(SimOptions(models=["m"], ttft=0.001, prefill_per_token=0.0, tpot=0.001, port=0),
                          shutdown_timeout=0.5)
    yield running
    await running.close()


@pytest.fixture
async def scim_site(engine, tmp_path):
    site = await start_scim_site(engine.url, str(tmp_path / "scim.db"))
    yield site
    await site.server.close()
