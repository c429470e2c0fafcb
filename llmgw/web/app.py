"""Mounting the portal on the client app: its routes, and its background sweep.

`install_portal(app, config, store_key=STORE)` adds the pages to the
gateway's own application (the client listener), so the portal, the chat
page and the API share one address and one origin. The portal's answers
are all built by its handlers (never raised as HTTP errors), so the API's
error middleware leaves them alone.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator

from aiohttp import web

from llmgw.config.server import ServerConfig
from llmgw.store import StoreError
from llmgw.tasks import cancel_and_wait
from llmgw.web import pages_account as account
from llmgw.web import pages_admin as admin
from llmgw.web import pages_auth as auth
from llmgw.web import pages_public as public
from llmgw.web import pages_sso as sso
from llmgw.web.portal import PORTAL, Portal, log

#: How often ended sessions and spent links are cleared from the store.
SWEEP_SECONDS = 600.0


def routes() -> list[web.RouteDef]:
    return [
        web.get("/", public.landing),
        web.get("/lang/{lang}", public.switch_language),
        web.get("/docs", public.docs_index),
        web.get("/docs/{page}", public.docs_page),
        web.get("/static/{name}", public.static),
        web.get("/signin", auth.signin_form),
        web.post("/signin", auth.signin),
        web.post("/signout", auth.signout),
        web.get("/auth/oidc", sso.start),
        web.get("/auth/callback", sso.callback),
        web.get("/signup", auth.signup_form),
        web.post("/signup", auth.signup),
        web.get("/reset", auth.reset_request_form),
        web.post("/reset", auth.reset_request),
        web.get("/reset/{token}", auth.reset_form),
        web.post("/reset/{token}", auth.reset_password),
        web.get("/account", account.account),
        web.post("/account/keys", account.create_key),
        web.post("/account/keys/{key_id}/revoke", account.revoke_key),
        web.get("/account/connect", account.connect),
        web.get("/account/password", account.password_form),
        web.post("/account/password", account.change_password),
        web.get("/chat", account.chat),
        web.post("/chat/key", account.chat_key),
        web.get("/admin", admin.home),
        web.get("/admin/people", admin.people),
        web.post("/admin/people/{user_id}", admin.change_person),
        web.get("/admin/org", admin.org),
        web.post("/admin/org", admin.change_org),
        web.get("/admin/usage", admin.usage),
        web.get("/admin/cluster", admin.cluster),
        web.get("/admin/audit", admin.audit),
    ]


def install_portal(app: web.Application, config: ServerConfig, *, store_key: web.AppKey) -> Portal:
    """Add the portal's pages to ``app``; the store is read from ``app[store_key]`` once the app runs."""
    portal = Portal(config, store_key=store_key)
    portal.app = app
    app[PORTAL] = portal
    app.router.add_routes(routes())
    sso.install(app, config)
    app.cleanup_ctx.append(_portal_lifecycle)
    return portal


def _serves(app: web.Application, path: str) -> bool:
    return any(getattr(r, "canonical", None) == path for r in app.router.resources())


async def _portal_lifecycle(app: web.Application) -> AsyncIterator[None]:
    portal = app[PORTAL]
    portal.serves_anthropic = _serves(app, "/v1/messages")
    portal.serves_responses = _serves(app, "/v1/responses")
    task = asyncio.create_task(_sweep(portal), name="llmgw-portal-sweep") if portal.store is not None else None
    mail = None
    if portal.config.mail.enabled and portal.store is not None and portal.mailer is None:
        # mail: the portal's messages go through the store's queue; this control plane sends what is due
        from llmgw.mail.outbox import Outbox, PortalMailer

        from llmgw.mail import outbox as mail_outbox

        outbox = Outbox(portal.store, portal.config.mail)
        portal.mailer = PortalMailer(outbox)
        mail_outbox.bind(outbox)  # notify.sinks of kind email queue into it too
        mail = asyncio.create_task(outbox.run(), name="llmgw-mail")
    try:
        yield
    finally:
        if mail is not None:
            from llmgw.mail import outbox as mail_outbox

            mail_outbox.bind(None)
        await cancel_and_wait(mail)
        await cancel_and_wait(task)
        portal.passwords.close()


async def _sweep(portal: Portal) -> None:
    while True:
        await asyncio.sleep(SWEEP_SECONDS)
        try:
            await portal.sessions.sweep()
            await portal.store.delete_stale_password_resets(portal.now() - dt.timedelta(days=1))
        except StoreError as exc:
            log.warning("clearing ended portal sessions failed: %s", exc)
