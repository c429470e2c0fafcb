"""Signing in and out, signing up, and setting a forgotten password through a link.

What these pages say never depends on whether an address has an account
(sign-up and reset requests answer the same either way), and an unknown
address costs the same hashing time as a known one. An account's state
(waiting for approval, suspended) is told only after the right password.
"""

from __future__ import annotations

from aiohttp import web

from llmgw.auth.passwords import Busy, WeakPassword, check_strength
from llmgw.auth.sessions import issue_reset, looks_like_token, reset_link, token_hash
from llmgw.store import Conflict, Invalid, StoreError
from llmgw.store import validate as store_validate
from llmgw.web.net import local_path
from llmgw.web.pages_sso import provider_name
from llmgw.web.portal import log_event, portal_of

_BUSY_HEADERS = {"Retry-After": "5"}


def _email(value: object) -> str | None:
    """A well-formed address in lower case, or None."""
    try:
        return store_validate.check_email(value)
    except Invalid:
        return None


async def _need_accounts(request: web.Request) -> web.StreamResponse | None:
    portal = portal_of(request)
    if portal.store is None:
        return await portal.error(request, 404, "error.no_accounts")
    return None


# ---- sign in, sign out ------------------------------------------------------------


async def signin_form(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    if (no := await _need_accounts(request)) is not None:
        return no
    nxt = local_path(request.query.get("next"))
    if await portal.viewer(request) is not None:
        return portal.redirect(request, nxt)
    return await _signin_page(request, nxt, "", None)


async def _signin_page(request: web.Request, nxt: str, email: str, problem: str | None, *,
                       status: int = 200, headers: dict | None = None, **values) -> web.StreamResponse:
    portal = portal_of(request)
    return await portal.render(
        request, "signin.html", status=status, headers=headers, next=nxt, email=email, problem=problem,
        values=values, signup_open=portal.config.auth.signup_open,
        no_passwords=portal.config.auth.oidc.no_passwords,
        sso=provider_name(portal.config) if portal.config.auth.oidc.issuer else None,
    )


async def signin(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    if (no := await _need_accounts(request)) is not None:
        return no
    form = await portal.read_form(request)
    if isinstance(form, web.StreamResponse):
        return form
    raw_email = str(form.get("email", "")).strip()[:254]
    password = str(form.get("password", ""))
    nxt = local_path(str(form.get("next", "")))
    if portal.config.auth.oidc.no_passwords:
        return await _signin_page(request, nxt, raw_email, "signin.no_passwords", status=403)
    client = portal.client(request)
    email = _email(raw_email) or raw_email.lower()
    if not portal.throttle.sign_in(email, client):
        wait = portal.throttle.retry_after(email, client)
        log_event("sign-in throttled", client=client)
        t = portal.translator(request)
        return await _signin_page(request, nxt, raw_email, "signin.throttled", status=429,
                                  headers={"Retry-After": str(int(wait) + 1)}, wait=t.span(wait))
    user = await portal.store.get_user_by_email(email) if _email(email) else None
    try:
        right = await portal.passwords.verify(user.password_hash if user else None, password)
    except Busy:
        return await _signin_page(request, nxt, raw_email, "signin.busy", status=503, headers=_BUSY_HEADERS)
    if not right or user is None:
        log_event("sign-in refused: wrong email or password", client=client)
        return await _signin_page(request, nxt, raw_email, "signin.wrong", status=401)
    portal.throttle.signed_in(email, client)
    # Told only now, after the right password: otherwise anyone could learn which addresses have accounts.
    if user.state != "active":
        return await _signin_page(request, nxt, raw_email, f"signin.{user.state}", status=403)
    if user.password_hash and portal.passwords.needs_rehash(user.password_hash):
        try:
            await portal.store.set_password_hash(user.id, await portal.passwords.hash(password))
        except (Busy, StoreError):
            pass  # the old hash still works; next time
    old = request.cookies.get("llmgw_session")
    if old:
        await portal.sessions.close(old)
    opened = await portal.sessions.open(user.id, client=client, user_agent=request.headers.get("User-Agent", ""))
    log_event("signed in", user_id=user.id, client=client)
    response = portal.redirect(request, nxt)
    portal.open_session_cookie(request, response, opened.token)
    return response


async def signout(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    form = await portal.read_form(request)
    if isinstance(form, web.StreamResponse):
        return form
    if portal.store is not None:
        await portal.sessions.close(request.cookies.get("llmgw_session"))
    response = portal.redirect(request, "/")
    portal.drop_session_cookie(response)
    return response


# ---- sign up ---------------------------------------------------------------------------


async def signup_form(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    if (no := await _need_accounts(request)) is not None:
        return no
    if not portal.config.auth.signup_open:
        return await portal.error(request, 404, "signup.closed")
    return await portal.render(request, "signup.html", email="", name="", problem=None)


async def signup(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    if (no := await _need_accounts(request)) is not None:
        return no
    if not portal.config.auth.signup_open:
        return await portal.error(request, 404, "signup.closed")
    form = await portal.read_form(request)
    if isinstance(form, web.StreamResponse):
        return form
    raw_email = str(form.get("email", "")).strip()[:254]
    name = " ".join(str(form.get("name", "")).split())[:100]
    password, again = str(form.get("password", "")), str(form.get("password2", ""))

    async def again_page(problem: str, status: int = 400, headers: dict | None = None) -> web.StreamResponse:
        return await portal.render(request, "signup.html", status=status, headers=headers,
                                   email=raw_email, name=name, problem=problem)

    if not portal.throttle.sign_up(portal.client(request)):
        return await again_page("signup.throttled", 429, {"Retry-After": "900"})
    email = _email(raw_email)
    if email is None:
        return await again_page("signup.bad_email")
    try:
        check_strength(password, email=email)
    except WeakPassword as exc:
        return await again_page(f"password.{exc.code}")
    if password != again:
        return await again_page("password.mismatch")
    try:
        password_hash = await portal.passwords.hash(password)
    except Busy:
        return await again_page("signin.busy", 503, _BUSY_HEADERS)
    store = portal.store
    if await store.get_user_by_email(email) is None:
        try:
            user = await store.create_user(email, name or email.split("@", 1)[0], state="pending",
                                           password_hash=password_hash)
            await store.append_audit(email, "users.signup", f"user:{user.id}",
                                     {"email": email, "via": "portal", "outcome": "ok", "state": "pending"})
            log_event("signed up, waiting for approval", user_id=user.id)
        except Conflict:
            pass  # signed up twice at once: the same answer
    # The same answer whether or not the address had an account already.
    return await portal.render(request, "message.html", heading="signup.done_title", message="signup.done")


# ---- forgotten passwords ------------------------------------------------------------------


async def reset_request_form(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    if (no := await _need_accounts(request)) is not None:
        return no
    return await portal.render(request, "reset_request.html", email="", problem=None)


async def reset_request(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    if (no := await _need_accounts(request)) is not None:
        return no
    form = await portal.read_form(request)
    if isinstance(form, web.StreamResponse):
        return form
    raw_email = str(form.get("email", "")).strip()[:254]
    email = _email(raw_email) or raw_email.lower()
    if not portal.throttle.reset_request(email, portal.client(request)):
        return await portal.render(request, "reset_request.html", status=429, headers={"Retry-After": "900"},
                                   email=raw_email, problem="reset.throttled")
    mailer = portal.mailer
    user = await portal.store.get_user_by_email(email) if _email(email) else None
    # Only an active person with a password here gets a link; nobody is told who does.
    if user is not None and user.state == "active" and user.password_hash and mailer is not None:
        token = await issue_reset(portal.store, user.id, portal.now())
        try:
            await mailer.send_reset_link(user.email, reset_link(mailer.base_url, token), portal.language(request))
            log_event("password reset link mailed", user_id=user.id)
        except Exception:  # noqa: BLE001 - the answer must not tell whether a mail was attempted
            log_event("a password reset link could not be mailed", 40, user_id=user.id)
    message = "reset.sent_mail" if mailer is not None else "reset.sent_no_mail"
    return await portal.render(request, "message.html", heading="reset.title", message=message)


async def _usable_link(request: web.Request, token: str):
    portal = portal_of(request)
    if not looks_like_token(token):
        return None
    link = await portal.store.get_password_reset(token_hash(token))
    return link if link is not None and link.usable_at(portal.now()) else None


async def reset_form(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    if (no := await _need_accounts(request)) is not None:
        return no
    token = request.match_info["token"]
    if await _usable_link(request, token) is None:
        return await portal.error(request, 410, "reset.invalid")
    return await portal.render(request, "reset_form.html", token=token, problem=None)


async def reset_password(request: web.Request) -> web.StreamResponse:
    portal = portal_of(request)
    if (no := await _need_accounts(request)) is not None:
        return no
    form = await portal.read_form(request)
    if isinstance(form, web.StreamResponse):
        return form
    token = request.match_info["token"]
    link = await _usable_link(request, token)
    user = await portal.store.get_user(link.user_id) if link is not None else None
    if link is None or user is None or user.state != "active":
        return await portal.error(request, 410, "reset.invalid")
    password, again = str(form.get("password", "")), str(form.get("password2", ""))
    problem = None
    try:
        check_strength(password, email=user.email)
    except WeakPassword as exc:
        problem = f"password.{exc.code}"
    if problem is None and password != again:
        problem = "password.mismatch"
    if problem is not None:
        return await portal.render(request, "reset_form.html", status=400, token=token, problem=problem)
    try:
        password_hash = await portal.passwords.hash(password)
    except Busy:
        return await portal.render(request, "reset_form.html", status=503, headers=_BUSY_HEADERS,
                                   token=token, problem="signin.busy")
    # Spent only now, in one statement: of two tabs submitting at once, one wins.
    if await portal.store.use_password_reset(token_hash(token), portal.now()) is None:
        return await portal.error(request, 410, "reset.invalid")
    await portal.store.set_password_hash(user.id, password_hash)
    # If they lost it, someone else may have it: every session of theirs ends.
    await portal.sessions.close_all(user.id)
    await portal.store.append_audit(user.email, "users.password-reset", f"user:{user.id}",
                                    {"email": user.email, "via": "portal", "outcome": "ok"})
    log_event("password set from a reset link", user_id=user.id)
    response = await portal.render(request, "message.html", heading="reset.done_title", message="reset.done")
    portal.drop_session_cookie(response)
    return response
