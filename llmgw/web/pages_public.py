"""Pages anyone may see: the landing page, the manual at /docs, the language
switch and the static files (stylesheet and scripts, served from the package)."""

from __future__ import annotations

import functools
import hashlib
from importlib import resources

from aiohttp import web

from llmgw.manual import PageNotFound
from llmgw.web import docs, i18n
from llmgw.web.net import local_path
from llmgw.web.portal import portal_of
from llmgw.web.snippets import landing_examples

_TYPES = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml", ".png": "image/png",
          ".ico": "image/x-icon"}


def served_models(request: web.Request) -> list[dict]:
    """The gateway's models with whether each has a healthy replica now."""
    from llmgw.router.gateway import GATEWAY

    gateway = request.app.get(GATEWAY)
    if gateway is None:
        return []
    out = []
    for name in gateway.catalog.names():
        model = gateway.catalog.get(name)
        out.append({"name": name, "aliases": list(model.aliases), "ready": gateway.admission.healthy(name)})
    return out


async def landing(request: web.Request) -> web.StreamResponse:
    """What this gateway serves and how to connect to it."""
    portal = portal_of(request)
    models = served_models(request)
    base = portal.base_url(request)
    example = models[0]["name"] if models else "MODEL"
    keys_required = portal.config.auth.keys_required
    return await portal.render(
        request, "landing.html", models=models, base=base,
        examples=landing_examples(base, example, keys_required),
        signup_open=portal.config.auth.signup_open,
        keys_required=portal.config.auth.keys_required,
    )


async def switch_language(request: web.Request) -> web.StreamResponse:
    """Remember the language chosen in the footer, and go back to the page."""
    portal = portal_of(request)
    lang = request.match_info["lang"]
    response = portal.redirect(request, local_path(request.query.get("next"), "/"))
    if lang in i18n.LANGUAGES:
        portal.set_cookie(request, response, i18n.COOKIE, lang, max_age=365 * 86400)
    return response


async def _docs_allowed(request: web.Request) -> web.StreamResponse | None:
    portal = portal_of(request)
    if portal.docs_sign_in and portal.store is not None and await portal.viewer(request) is None:
        return portal.redirect(request, "/signin?next=" + request.path)
    return None


async def docs_index(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    if (refused := await _docs_allowed(request)) is not None:
        return refused
    response = await portal.render(request, "docs_index.html", pages=docs.contents())
    return portal.finish(request, response, cache=True)


async def docs_page(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    if (refused := await _docs_allowed(request)) is not None:
        return refused
    name = request.match_info["page"]
    try:
        page = docs.render(name)
    except PageNotFound:
        return await portal.error(request, 404, "error.no_page")
    if page.name != name:
        return portal.redirect(request, f"/docs/{page.name}")
    response = await portal.render(request, "docs_page.html", page=page, pages=docs.contents())
    return portal.finish(request, response, cache=True)


@functools.cache
def _static_file(name: str) -> tuple[bytes, str, str] | None:
    """(content, type, etag) of a file under static/, or None."""
    if "/" in name or "\\" in name or name.startswith(".") or not any(name.endswith(x) for x in _TYPES):
        return None
    item = resources.files("llmgw.web").joinpath("static", name)
    if not item.is_file():
        return None
    data = item.read_bytes()
    kind = _TYPES[name[name.rindex("."):]]
    return data, kind, '"' + hashlib.sha256(data).hexdigest()[:32] + '"'


async def static(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    found = _static_file(request.match_info["name"])
    if found is None:
        return await portal.error(request, 404, "error.no_page")
    data, kind, etag = found
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if request.headers.get("If-None-Match") == etag:
        response = web.Response(status=304, headers=headers)
    else:
        response = web.Response(body=data, content_type=kind, headers=headers)
        if kind.startswith("text/"):
            response.charset = "utf-8"
    return portal.finish(request, response, cache=True)
