"""The public pages and what every page carries: the landing page, /docs, static files,
security headers, and a gateway without a store."""

from __future__ import annotations

import re

from aiohttp.test_utils import TestClient, TestServer

from llmgw.config import parse_server_config
from llmgw.server import make_gateway_app
from llmgw.web import docs

from .conftest import Site


async def test_every_page_carries_the_security_headers(site: Site) -> None:
    await site.person(role="admin")
    b = await site.browser()
    pages = ["/", "/signin", "/docs", "/docs/clients", "/reset"]
    for path in pages:
        page = await b.get(path)
        csp = page.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp, path
        assert page.headers["X-Frame-Options"] == "DENY" and page.headers["X-Content-Type-Options"] == "nosniff"
    await b.sign_in("ayse@example.com")
    for path in ["/account", "/account/connect", "/account/password", "/chat", "/admin/people", "/admin/audit"]:
        page = await b.get(path)
        assert page.status == 200 and page.headers["Cache-Control"] == "no-store", path
        assert page.headers["X-Frame-Options"] == "DENY"


async def test_no_page_has_an_inline_script_or_style(site: Site) -> None:
    await site.person(role="admin")
    b = await site.browser()
    await b.sign_in("ayse@example.com")
    for path in ["/", "/docs/index", "/account", "/account/connect?model=m", "/chat", "/admin/people",
                 "/admin/org", "/admin/usage", "/admin/cluster", "/admin/audit"]:
        text = (await b.get(path)).text
        assert not re.search(r"<script(?![^>]*\ssrc=)[^>]*>", text), path
        assert " style=" not in text and "<style" not in text and "javascript:" not in text.lower(), path
        assert not re.search(r"\son[a-z]+=", text), path  # no inline event handlers


async def test_the_landing_page_says_what_is_served_and_how_to_connect(site: Site) -> None:
    b = await site.browser()
    page = await b.get("/")
    assert page.status == 200
    assert "<code>m</code>" in page.text and "small" in page.text and "<code>n</code>" in page.text
    assert f"{site.url}/v1" in page.text and "Authorization: Bearer $LLMGW_API_KEY" in page.text
    assert 'href="/signin"' in page.text and 'href="/signup"' not in page.text
    assert 'href="/docs/clients"' in page.text


async def test_the_manual_has_anchors_contents_and_no_html_of_its_own(site: Site) -> None:
    b = await site.browser()
    index = await b.get("/docs")
    assert 'href="/docs/clients"' in index.text and 'href="/docs/portal"' in index.text
    page = await b.get("/docs/portal")
    assert page.status == 200 and "<h1 id=" in page.text
    rendered = docs.render("portal")
    assert rendered.headings and all(f'id="{h.anchor}"' in page.text for h in rendered.headings)
    assert all(f'href="#{h.anchor}"' in page.text for h in rendered.headings)
    assert (await b.get("/docs/PORTAL.md")).url.endswith("/docs/portal")
    assert (await b.get("/docs/no-such-page")).status == 404


def test_markdown_links_become_docs_links_and_raw_html_stays_text(monkeypatch) -> None:
    from llmgw import manual

    text = ("# Title\n\n## Part one\n\nSee [clients](clients.md#tools), [x](https://example.com) and"
            " [bad](javascript:alert(1)).\n\n<script>alert(1)</script>\n\n## Part one\n\n### Sub *part*\n")
    monkeypatch.setattr(manual, "find", lambda name: manual.Page(name="t", title="Title", text=text))
    docs.render.cache_clear()
    try:
        page = docs.render("t")
    finally:
        docs.render.cache_clear()
    html = str(page.html)
    assert 'href="/docs/clients#tools"' in html and 'rel="noopener noreferrer"' in html
    assert "<script>" not in html and "&lt;script&gt;" in html and 'href="javascript' not in html
    assert [h.anchor for h in page.headings] == ["part-one", "part-one-1", "sub-part"]


async def test_static_files_are_served_and_nothing_else(site: Site) -> None:
    b = await site.browser()
    for name, kind in [("portal.css", "text/css"), ("chat.js", "text/javascript"), ("markdown.js", "text/javascript")]:
        async with b.client.get(f"/static/{name}") as r:
            assert r.status == 200 and r.content_type == kind
            etag = r.headers["ETag"]
        async with b.client.get(f"/static/{name}", headers={"If-None-Match": etag}) as r:
            assert r.status == 304
    for name in ["../portal.py", "..%2Fportal.py", "portal.py", ".hidden.js", "nope.css"]:
        async with b.client.get(f"/static/{name}") as r:
            assert r.status == 404, name


async def test_a_gateway_without_a_store_serves_the_public_pages_only(engine) -> None:
    from tests.router.conftest import FakeAccountant, FakeResolver

    config = parse_server_config({"store": {"dsn": "/nonexistent/llmgw.db"}, "auth": {"keys_required": False},
                                  "models": [{"name": "m", "endpoints": [{"url": engine.url + "/v1"}]}]})
    app = make_gateway_app(config, resolver=FakeResolver(), accountant=FakeAccountant())
    async with TestClient(TestServer(app)) as client:
        async with client.get("/") as r:
            text = await r.text()
            assert r.status == 200 and "This gateway asks for no key" in text and 'href="/signin"' not in text
        async with client.get("/signin") as r:
            assert r.status == 404 and "keeps no accounts" in await r.text()
        async with client.get("/account", allow_redirects=False) as r:
            assert r.status == 404
        async with client.get("/docs") as r:
            assert r.status == 200
        # The API itself is unchanged: its errors are still OpenAI's shape.
        async with client.get("/v1/nothing") as r:
            assert r.status == 404 and (await r.json())["error"]["code"] == "not_found"


async def test_docs_can_require_sign_in(site: Site, monkeypatch) -> None:
    monkeypatch.setattr(site.portal, "docs_sign_in", True)
    b = await site.browser()
    assert (await b.get("/docs/clients")).url.endswith("/signin?next=/docs/clients")
    await site.person()
    await b.sign_in("ayse@example.com")
    assert (await b.get("/docs/clients")).status == 200
