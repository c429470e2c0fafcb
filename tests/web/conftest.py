"""A whole gateway with its portal, in process: a SQLite store in tmp_path, real
keys and accounting, a simulated engine serving model `m` (and `n`).

`site` starts it; `site.browser(address)` is a client with its own cookie
jar that seems to come from `address` (the gateway trusts 127.0.0.1 as a
proxy, so X-Forwarded-For is believed). `browser.submit(path, fields)`
posts a form the way a browser does, with the CSRF token of the page it
came from. Passwords are hashed with tiny argon2 costs so tests are quick.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import aiohttp
import attrs
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.auth.passwords import Passwords
from llmgw.config import parse_server_config
from llmgw.server import make_gateway_app
from llmgw.server.app import STORE
from llmgw.simengine import SimOptions, start
from llmgw.store import Store
from llmgw.web.portal import PORTAL, Portal

FAST = {"ttft": 0.005, "prefill_per_token": 0.0, "tpot": 0.001, "port": 0}
PASSWORD = "correct horse battery"
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def quick_passwords(**kw) -> Passwords:
    return Passwords(time_cost=1, memory_cost=64, parallelism=1, **kw)


class Clock:
    """The portal's clock: now, moved by hand."""

    def __init__(self) -> None:
        self.offset = dt.timedelta(0)

    def __call__(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC) + self.offset

    def advance(self, **kw) -> None:
        self.offset += dt.timedelta(**kw)


class FakeMailer:
    base_url = "https://llm.example.com"

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    async def send_reset_link(self, to: str, link: str, lang: str) -> None:
        self.sent.append((to, link, lang))


@attrs.define
class Page:
    status: int
    text: str
    url: str
    headers: Any

    @property
    def csrf(self) -> str:
        found = _CSRF.search(self.text)
        assert found, f"no CSRF token on {self.url}"
        return found.group(1)


class Browser:
    def __init__(self, client: TestClient, address: str, lang: str = "en") -> None:
        self.client = client
        self.address = address
        self.lang = lang
        self.last: Page | None = None

    def _headers(self, extra: dict | None = None) -> dict:
        return {"X-Forwarded-For": self.address, "Accept-Language": self.lang, **(extra or {})}

    async def get(self, path: str, **kw) -> Page:
        async with self.client.get(path, headers=self._headers(kw.pop("headers", None)), **kw) as r:
            page = Page(r.status, await r.text(), str(r.url), r.headers)
        self.last = page
        return page

    async def post(self, path: str, data: dict, *, allow_redirects: bool = True, headers: dict | None = None) -> Page:
        async with self.client.post(path, data=data, headers=self._headers(headers),
                                    allow_redirects=allow_redirects) as r:
            page = Page(r.status, await r.text(), str(r.url), r.headers)
        self.last = page
        return page

    async def submit(self, form_page: str, action: str | None, fields: dict, **kw) -> Page:
        """Open ``form_page``, then post ``fields`` to ``action`` (default: the same path) with its CSRF token."""
        page = await self.get(form_page)
        return await self.post(action or form_page, {"csrf": page.csrf, **fields}, **kw)

    async def sign_in(self, email: str, password: str = PASSWORD) -> Page:
        return await self.submit("/signin", None, {"email": email, "password": password})

    def cookie(self, name: str) -> str | None:
        for c in self.client.session.cookie_jar:
            if c.key == name:
                return c.value
        return None


@attrs.define
class Site:
    app: web.Application
    server: TestServer
    engine: Any
    clients: list = attrs.Factory(list)

    @property
    def portal(self) -> Portal:
        return self.app[PORTAL]

    @property
    def store(self) -> Store:
        return self.app[STORE]

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    async def browser(self, address: str = "192.0.2.10", lang: str = "en") -> Browser:
        client = TestClient(self.server, cookie_jar=aiohttp.CookieJar(unsafe=True))
        await client.start_server()
        self.clients.append(client)
        return Browser(client, address, lang)

    async def person(self, email: str = "ayse@example.com", *, password: str = PASSWORD, role: str = "none",
                     state: str = "active", project: str | None = "acme/search/indexer"):
        """A person with a password (made the way `llmgw users create --password` does), in ``project``."""
        tenancy = self.portal.tenancy("test")
        user = await tenancy.create_user(email, email.split("@")[0].title(), role=role, state=state)
        user = await self.store.set_password_hash(user.id, await self.portal.passwords.hash(password))
        if project:
            await tenancy.add_member(email, project)
        return user


@pytest.fixture
async def engine():
    running = await start(SimOptions(models=["m", "n"], **FAST), shutdown_timeout=0.5)
    yield running
    await running.close()


def site_config(engine, db: str, *, names: tuple[str, ...] = ("m", "n"), **sections) -> Any:
    """server.yaml for a site: ``names`` served by ``engine`` (the first with an alias and a price)."""
    auth = {"signup_open": False, **sections.pop("auth", {})}
    models: list[dict] = [{"name": name, "endpoints": [{"url": engine.url + "/v1"}]} for name in names]
    models[0].update({"aliases": ["small"], "price": {"input": 1.0, "output": 2.0}})
    return parse_server_config({
        "store": {"dsn": db},
        "auth": auth,
        "router": {"trusted_proxies": ["127.0.0.1"], "scrape_interval": "100ms"},
        "accounting": {"flush_interval": "50ms"},
        "models": models,
        **sections,
    })


async def start_site(config, engine, host: str = "127.0.0.1") -> Site:
    """The gateway and its portal for ``config``, listening; with acme/search/indexer in the tree."""
    app = make_gateway_app(config)
    portal = app[PORTAL]
    portal.passwords = quick_passwords()
    portal.clock = Clock()
    server = TestServer(app, host=host)
    await server.start_server()
    site = Site(app, server, engine)
    tenancy = portal.tenancy("test")
    await tenancy.create("acme")
    await tenancy.create("acme/search")
    await tenancy.create("acme/search/indexer")
    return site


async def stop_site(site: Site) -> None:
    for client in site.clients:
        await client.close()
    await site.server.close()


@pytest.fixture
async def make_site(engine, tmp_path):
    sites: list[Site] = []

    async def make(**sections) -> Site:
        config = site_config(engine, str(tmp_path / f"llmgw{len(sites)}.db"), **sections)
        site = await start_site(config, engine)
        sites.append(site)
        return site

    yield make
    for site in sites:
        await stop_site(site)


@pytest.fixture
async def site(make_site) -> Site:
    return await make_site()
