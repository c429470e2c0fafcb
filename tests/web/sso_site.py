"""A site whose portal signs in through the test OIDC provider (tests/auth/oidc_op.py).

`sso_site` starts the provider and a gateway registered with it as client
`llmgw` (secret `s3cret`), on a port chosen first so the callback address
in server.yaml is the real one. `sign_in_through(site, browser, username)`
does what a browser does: the portal's redirect, the provider's sign-in
form, and back to the callback.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import aiohttp
from aiohttp.test_utils import TestServer

from auth.oidc_op import TestProvider
from llmgw.server import make_gateway_app
from llmgw.web.portal import PORTAL

from .conftest import Clock, Site, quick_passwords, site_config

RULES = [
    {"claim": "groups", "contains": "llmgw-admins", "role": "admin"},
    {"claim": "email", "suffix": "@acme.com", "org": "acme"},
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start_sso_site(engine, db: str, op: TestProvider, *, oidc: dict | None = None, **sections) -> Site:
    port = free_port()
    redirect = f"http://127.0.0.1:{port}/auth/callback"
    op.add_client("llmgw", "s3cret", [redirect])
    op.add_client("llmgw-cli", None, [])
    auth = sections.pop("auth", {})
    auth["oidc"] = {"issuer": op.issuer, "client_id": "llmgw", "client_secret": "s3cret", "redirect_url": redirect,
                    "display_name": "Test IdP", "device_client_id": "llmgw-cli",
                    "scopes": ["openid", "email", "profile", "groups"], "rules": RULES, **(oidc or {})}
    config = site_config(engine, db, auth=auth, **sections)
    app = make_gateway_app(config)
    portal = app[PORTAL]
    portal.passwords = quick_passwords()
    portal.clock = Clock()
    server = TestServer(app, host="127.0.0.1", port=port)
    await server.start_server()
    site = Site(app, server, engine)
    tenancy = portal.tenancy("test")
    await tenancy.create("acme")
    await tenancy.create("acme/search")
    await tenancy.create("acme/search/indexer")
    return site


async def sign_in_through(browser, username: str, next_path: str = "/account"):
    """The whole round trip; the portal's last page (browser.last)."""
    async with browser.client.get(f"/auth/oidc?next={next_path}", allow_redirects=False,
                                  headers=browser._headers()) as r:
        assert r.status == 303, await r.text()
        at_provider = r.headers["Location"]
    async with aiohttp.ClientSession() as http:
        async with http.get(at_provider) as r:
            assert r.status == 200, await r.text()
        async with http.post(at_provider, data={"username": username}, allow_redirects=False) as r:
            assert r.status == 302, await r.text()
            back = r.headers["Location"]
    parts = urlsplit(back)
    return await browser.get(parts.path + "?" + parts.query)
