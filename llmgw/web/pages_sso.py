"""Signing in through the OpenID Connect provider: the redirect there and the callback.

`GET /auth/oidc?next=/page` sends the browser to the provider with a new
state, nonce and PKCE verifier, which it keeps meanwhile in a short-lived
HttpOnly cookie of its own (so any control plane behind the same address
can take the callback). `GET /auth/callback` checks that the state it comes
back with is that cookie's, trades the code for the ID token, checks it
(llmgw.auth.oidc), maps its claims to the person (llmgw.auth.oidc_accounts)
and opens the same session a password sign-in opens, with its own CSRF
token. Nothing of the tokens is logged.
"""

from __future__ import annotations

import base64
import json
import secrets

from aiohttp import web

from llmgw.auth.oidc import OIDCError, Pending, Provider
from llmgw.auth.oidc_accounts import Refused, account_for, identity_of
from llmgw.web.net import local_path
from llmgw.web.portal import log_event, portal_of

#: The cookie that carries a sign-in's state between the redirect and the callback.
PENDING_COOKIE = "llmgw_oidc"
#: How long a sign-in at the provider may take.
PENDING_SECONDS = 600

PROVIDER = web.AppKey("oidc_provider", Provider)


def install(app: web.Application, config) -> None:
    """Keep the configured provider on the portal's app (nothing while auth.oidc.issuer is empty)."""
    if config.auth.oidc.issuer:
        app[PROVIDER] = Provider(config.auth.oidc)
        if config.auth.oidc.no_passwords:
            app.on_startup.append(_provider_works)


async def _provider_works(app: web.Application) -> None:
    """With no_passwords, a provider that cannot be read would lock everyone out: refuse to start."""
    provider = app[PROVIDER]
    try:
        await provider.discovery()
    except OIDCError as exc:
        raise OIDCError(f"auth.oidc.no_passwords is true, but {exc}, so nobody could sign in to the portal; "
                        "fix auth.oidc.issuer (or the network to it), or set no_passwords: false") from None


def provider_of(request: web.Request) -> Provider | None:
    """The configured provider, or None while auth.oidc.issuer is empty."""
    return request.app.get(PROVIDER)


def provider_name(config) -> str:
    return config.auth.oidc.display_name or "single sign-on"


def _pack(pending: Pending) -> str:
    return base64.urlsafe_b64encode(json.dumps(pending).encode("utf-8")).decode("ascii")


def _unpack(value: str | None) -> Pending | None:
    if not value or len(value) > 2000:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(value.encode("ascii")))
    except (ValueError, UnicodeError):
        return None
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("state", "nonce", "verifier", "next")):
        return None
    return Pending(data)


async def start(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    provider = provider_of(request)
    if provider is None or portal.store is None:
        return await portal.error(request, 404, "sso.off")
    pending = Pending.new(local_path(request.query.get("next")))
    try:
        url = await provider.authorization_url(pending)
    except OIDCError as exc:
        log_event("single sign-on cannot start", 40, reason=str(exc))
        return await portal.error(request, 502, "sso.failed", provider=provider_name(portal.config), reason=str(exc))
    response = web.Response(status=303, headers={"Location": url})
    portal.finish(request, response)
    response.set_cookie(PENDING_COOKIE, _pack(pending), max_age=PENDING_SECONDS, path="/auth", httponly=True,
                        samesite="Lax", secure=portal.secure(request))
    return response


async def callback(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    provider = provider_of(request)
    if provider is None or portal.store is None:
        return await portal.error(request, 404, "sso.off")
    name = provider_name(portal.config)
    client = portal.client(request)
    pending = _unpack(request.cookies.get(PENDING_COOKIE))
    state = request.query.get("state", "")
    if pending is None or not state or not secrets.compare_digest(state.encode(), pending["state"].encode()):
        log_event("single sign-on refused: state missing or not this browser's", client=client)
        return await _done(request, await portal.error(request, 400, "sso.expired"))
    if "error" in request.query:
        reason = request.query.get("error_description") or request.query["error"]
        log_event("single sign-on refused by the provider", client=client, error=request.query["error"][:100])
        return await _done(request, await portal.error(request, 401, "sso.failed", provider=name, reason=reason[:200]))
    code = request.query.get("code", "")
    if not code:
        return await _done(request, await portal.error(request, 400, "sso.failed", provider=name,
                                                       reason="the provider sent no code"))
    try:
        claims = await provider.finish(code, pending)
        identity = identity_of(claims, portal.config.auth.oidc)
        user = await account_for(portal.tenancy(f"oidc:{provider.issuer}"), identity)
    except Refused as exc:
        log_event("single sign-on refused: account not active", client=client, state=exc.state)
        return await _done(request, await portal.error(request, 403, f"signin.{exc.state}"))
    except OIDCError as exc:
        log_event("single sign-on refused", client=client, reason=str(exc))
        return await _done(request, await portal.error(request, 401, "sso.failed", provider=name, reason=str(exc)))
    old = request.cookies.get("llmgw_session")
    if old:
        await portal.sessions.close(old)
    opened = await portal.sessions.open(user.id, client=client, user_agent=request.headers.get("User-Agent", ""))
    log_event("signed in through single sign-on", user_id=user.id, client=client, role=user.role)
    response = portal.redirect(request, pending["next"])
    portal.open_session_cookie(request, response, opened.token)
    return await _done(request, response)


async def _done(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """A sign-in's state is used once, whatever came of it."""
    response.del_cookie(PENDING_COOKIE, path="/auth")
    return response
