"""The portal's state and what every page needs: who is signed in, the page's
language, rendering, CSRF, cookies and the security headers.

`Portal` is one per client app (`app[PORTAL]`). Tests reach in to make it
quick and deterministic: `portal.passwords` (a cheap hasher), `portal.clock`
(aware datetimes), `portal.throttle`, `portal.mailer`.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs
import jinja2
from aiohttp import web
from multidict import MultiDictProxy

from llmgw.auth.keys import model_aliases
from llmgw.auth.passwords import Passwords
from llmgw.auth.sessions import Sessions, same_token, session_csrf
from llmgw.auth.tenancy import Tenancy
from llmgw.config.server import ServerConfig
from llmgw.obs import logs
from llmgw.store import NotFound, Store, StoreError, User, WebSession
from llmgw.web import i18n
from llmgw.web.net import client_address, is_secure, parse_networks, public_base
from llmgw.web.throttle import SignInThrottle

log = logs.get("llmgw.web")

SESSION_COOKIE = "llmgw_session"
CSRF_COOKIE = "llmgw_csrf"
#: The largest form body read; forms here are a few fields.
MAX_FORM_BYTES = 64 * 1024
#: Staff roles that see /admin, and what each may change there.
STAFF = ("viewer", "operator", "billing", "admin")

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")


class Mailer(Protocol):
    """Sends the portal's mail: llmgw.mail.outbox.PortalMailer when server.yaml's `mail:` names a server
    (see docs/portal.md); without one, reset links are made by an operator with `llmgw users reset-link`."""

    base_url: str  #: where links point; never taken from a request

    async def send_reset_link(self, to: str, link: str, lang: str) -> None: ...

    async def send_approved(self, to: str, lang: str) -> None: ...


@attrs.define
class Viewer:
    """The person signed in on this request, and their session."""

    user: User
    session: WebSession
    token: str = attrs.field(repr=False)  # the cookie's value

    @property
    def staff(self) -> bool:
        return self.user.role in STAFF


VIEWER = web.RequestKey("portal_viewer", object)
NEW_CSRF = web.RequestKey("portal_new_csrf", str)


def _landing(config: ServerConfig) -> tuple[str, str, bool]:
    """(title, default language, docs need sign-in) from `landing:` when server.yaml has that section."""
    landing = getattr(config, "landing", None)
    title = str(getattr(landing, "title", "") or "llmgw")
    language = str(getattr(landing, "language", "") or i18n.DEFAULT)
    return title, language, bool(getattr(landing, "docs_sign_in", False))


class Portal:
    def __init__(self, config: ServerConfig, *, store_key: web.AppKey) -> None:
        self.config = config
        self.store_key = store_key
        self.app: web.Application | None = None
        self.title, self.default_language, self.docs_sign_in = _landing(config)
        self.trusted = parse_networks(config.router.trusted_proxies)
        self.clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
        self.passwords = Passwords()
        self.throttle = SignInThrottle()
        self.mailer: Mailer | None = None
        self.currency = config.prices.currency
        #: filled at start-up from the app's routes
        self.serves_anthropic = False
        self.serves_responses = False
        self._sessions: Sessions | None = None
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("llmgw.web", "templates"),
            autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        )

    # ---- parts ---------------------------------------------------------------

    def now(self) -> dt.datetime:
        return self.clock().astimezone(dt.UTC)

    @property
    def store(self) -> Store | None:
        return None if self.app is None else self.app.get(self.store_key)

    @property
    def sessions(self) -> Sessions:
        store = self.store
        if store is None:
            raise StoreError("this gateway has no store, so it keeps no accounts")
        if self._sessions is None or self._sessions.store is not store:
            auth = self.config.auth
            self._sessions = Sessions(store, ttl=auth.session_ttl, idle=auth.session_idle,
                                      on_closed=self._revoke_chat_keys, clock=self.now)
        return self._sessions

    def invalidate_key(self, key_id: str | None = None) -> None:
        """Tell the gateway's key cache a key changed."""
        from llmgw.router.gateway import GATEWAY

        gateway = self.app.get(GATEWAY) if self.app is not None else None
        resolver = getattr(gateway, "resolver", None)
        if resolver is not None:
            resolver.invalidate(key_id)

    async def _revoke_chat_keys(self, closed: Sequence[WebSession]) -> None:
        store = self.store
        for session in closed:
            if session.chat_key_id and store is not None:
                try:
                    await store.revoke_key(session.chat_key_id)
                except (NotFound, StoreError):
                    pass
                self.invalidate_key(session.chat_key_id)

    def tenancy(self, actor: str, fields: Mapping[str, Any] | None = None) -> Tenancy:
        """Tenancy operations as ``actor``, each audited with via=portal and the form's fields."""
        from llmgw.admin.audit import AuditedStore

        store = self.store
        if store is None:
            raise StoreError("this gateway has no store")
        max_ttl = self.config.auth.max_key_ttl
        return Tenancy(
            AuditedStore(store, via="portal", fields=fields),  # type: ignore[arg-type]
            actor=actor,
            max_key_ttl=dt.timedelta(seconds=max_ttl.total_seconds()) if max_ttl.total_seconds() > 0 else None,
            bands=[b.name for b in self.config.admission.bands] or None,
            models=model_aliases(self.config) or None,
            on_change=self.invalidate_key,
            hasher=self.key_hasher,
            clock=self.now,
        )

    async def audit_refused(self, actor: str, action: str, target: str, fields: Mapping[str, Any] | None,
                            reason: str, status: int) -> None:
        """Record a change that was refused (every attempt is in the audit log)."""
        from llmgw.admin.audit import record

        if self.store is not None:
            await record(self.store, actor=actor, via="portal", action=action, target=target,
                         fields=fields, outcome="refused", reason=reason, status=status)

    @property
    def key_hasher(self):
        """How keys made here are hashed: the cluster's secret when this machine has it."""
        from llmgw.auth.key_hash import key_hasher_of

        return key_hasher_of(self.config)

    # ---- the request -----------------------------------------------------------

    def client(self, request: web.Request) -> str:
        return client_address(request, self.trusted)

    def secure(self, request: web.Request) -> bool:
        return is_secure(request, self.trusted)

    def base_url(self, request: web.Request) -> str:
        return public_base(request, self.trusted)

    def language(self, request: web.Request) -> str:
        return i18n.choose(request.cookies.get(i18n.COOKIE), request.headers.get("Accept-Language"),
                           self.default_language)

    def translator(self, request: web.Request) -> i18n.Translator:
        return i18n.Translator(self.language(request))

    async def viewer(self, request: web.Request) -> Viewer | None:
        """The person signed in, or None; a session of someone no longer active is closed."""
        if VIEWER in request:
            return request[VIEWER]  # type: ignore[return-value]
        found: Viewer | None = None
        token = request.cookies.get(SESSION_COOKIE)
        if token and self.store is not None:
            session = await self.sessions.resolve(token)
            if session is not None:
                user = await self.store.get_user(session.user_id)
                if user is not None and user.state == "active":
                    found = Viewer(user, session, token)
                else:
                    await self.sessions.close(token)
        request[VIEWER] = found
        return found

    def csrf_token(self, request: web.Request, viewer: Viewer | None) -> str:
        """The token this page's forms carry: the session's, or before sign-in the browser's own."""
        if viewer is not None:
            return session_csrf(viewer.token)
        if NEW_CSRF in request:
            return request[NEW_CSRF]
        token = request.cookies.get(CSRF_COOKIE, "")
        if not (20 <= len(token) <= 100 and all(c.isalnum() or c in "-_" for c in token)):
            token = secrets.token_urlsafe(32)
            request[NEW_CSRF] = token
        return token

    def same_origin(self, request: web.Request) -> bool:
        """False when the browser says the form was sent from another site.

        Browsers send ``Sec-Fetch-Site`` on every form post, and it is what
        counts when present. Without it, an ``Origin`` naming another site
        refuses the form; ``Origin: null`` says nothing (our own pages send
        it, as their Referrer-Policy is no-referrer). A request with neither
        (curl, an old browser) is judged by its CSRF token alone.
        """
        site = request.headers.get("Sec-Fetch-Site", "").strip().lower()
        if site:
            return site in ("same-origin", "none")
        origin = request.headers.get("Origin", "").strip()
        if origin and origin != "null":
            return origin.lower() == self.base_url(request).lower()
        return True

    async def read_form(self, request: web.Request) -> MultiDictProxy | web.Response:
        """The posted form, or the answer to give instead: 413 when too big,
        403 when it comes from another site or its CSRF token is missing or
        not this session's (before sign-in: this browser's)."""
        if not self.same_origin(request):
            log.info("form refused: sent from another site", extra={"fields": {
                "path": request.path, "origin": request.headers.get("Origin", "")[:200],
                "sec_fetch_site": request.headers.get("Sec-Fetch-Site", "")[:40], "portal": self.base_url(request)}})
            return await self.error(request, 403, "error.csrf")
        if request.content_length is not None and request.content_length > MAX_FORM_BYTES:
            return await self.error(request, 413, "error.too_big")
        try:
            form = await request.post()
        except (ValueError, web.HTTPException):
            return await self.error(request, 400, "error.bad_form")
        submitted = str(form.get("csrf") or request.headers.get("X-CSRF-Token") or "")
        viewer = await self.viewer(request)
        # Signed in, only the session's own token will do: the browser's
        # pre-sign-in cookie could have been planted by someone else.
        expected = session_csrf(viewer.token) if viewer is not None else request.cookies.get(CSRF_COOKIE, "")
        if not same_token(submitted, expected):
            log.info("form refused: CSRF token missing or wrong", extra={"fields": {"path": request.path}})
            return await self.error(request, 403, "error.csrf")
        return form

    # ---- answers -----------------------------------------------------------------

    async def render(self, request: web.Request, template: str, *, status: int = 200,
                     headers: Mapping[str, str] | None = None, **context: Any) -> web.Response:
        viewer = await self.viewer(request)
        t = self.translator(request)
        page = self.env.get_template(template).render(
            _=t, t=t, lang=t.lang, languages=i18n.NAMES, viewer=viewer, csrf=self.csrf_token(request, viewer),
            path=request.path_qs, title=self.title, currency=self.currency, accounts=self.store is not None,
            **context,
        )
        response = web.Response(text=page, status=status, content_type="text/html", charset="utf-8",
                                headers=dict(headers or {}))
        return self.finish(request, response)

    async def error(self, request: web.Request, status: int, message: str, **values: Any) -> web.Response:
        """A page saying what went wrong: ``message`` is a message id."""
        return await self.render(request, "error.html", status=status, message=message, values=values)

    def finish(self, request: web.Request, response: web.StreamResponse, *, cache: bool = False) -> web.StreamResponse:
        """Security headers on every portal answer; no-store unless ``cache``."""
        h = response.headers
        h.setdefault("Content-Security-Policy", CSP)
        h["X-Frame-Options"] = "DENY"
        h["X-Content-Type-Options"] = "nosniff"
        h["Referrer-Policy"] = "no-referrer"  # reset links carry their token in the path
        if not cache:
            h["Cache-Control"] = "no-store"
        if NEW_CSRF in request:
            self.set_cookie(request, response, CSRF_COOKIE, request[NEW_CSRF], max_age=None)
        return response

    def redirect(self, request: web.Request, location: str) -> web.Response:
        response = web.Response(status=303, headers={"Location": location})
        self.finish(request, response)
        return response

    def set_cookie(self, request: web.Request, response: web.StreamResponse, name: str, value: str,
                   *, max_age: int | None, http_only: bool = True) -> None:
        response.set_cookie(name, value, max_age=max_age, path="/", httponly=http_only, samesite="Lax",
                            secure=self.secure(request))

    def open_session_cookie(self, request: web.Request, response: web.StreamResponse, token: str) -> None:
        self.set_cookie(request, response, SESSION_COOKIE, token,
                        max_age=int(self.config.auth.session_ttl.total_seconds()))

    def drop_session_cookie(self, response: web.StreamResponse) -> None:
        response.del_cookie(SESSION_COOKIE, path="/")


PORTAL = web.AppKey("portal", Portal)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def portal_of(request: web.Request) -> Portal:
    return request.app[PORTAL]


def signed_in(handler: Handler) -> Handler:
    """Only for a signed-in, active person; anyone else goes to the sign-in page and back."""

    async def wrapper(request: web.Request) -> web.StreamResponse:
        portal = portal_of(request)
        if portal.store is None:
            return await portal.error(request, 404, "error.no_accounts")
        if await portal.viewer(request) is None:
            from urllib.parse import quote

            return portal.redirect(request, "/signin?next=" + quote(request.path_qs, safe="/"))
        return await handler(request)

    wrapper.__name__ = handler.__name__
    wrapper.__doc__ = handler.__doc__
    return wrapper


def staff(*roles: str) -> Callable[[Handler], Handler]:
    """Only for people with one of ``roles`` (any staff role when none is named)."""
    allowed = roles or STAFF

    def decorate(handler: Handler) -> Handler:
        @signed_in
        async def wrapper(request: web.Request) -> web.StreamResponse:
            portal = portal_of(request)
            viewer = await portal.viewer(request)
            assert viewer is not None
            if viewer.user.role not in allowed:
                if request.method == "POST":
                    await portal.audit_refused(viewer.user.email, f"portal.{handler.__name__}", request.path, None,
                                               f"staff role {viewer.user.role!r} may not do this", 403)
                return await portal.error(request, 403, "error.forbidden")
            return await handler(request)

        wrapper.__name__ = handler.__name__
        return wrapper

    return decorate


def log_event(message: str, level: int = logging.INFO, **fields: Any) -> None:
    logs.event(log, message, level, **fields)
