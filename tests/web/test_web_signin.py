"""Signing up, being approved, signing in and out, the throttle, CSRF and session expiry."""

from __future__ import annotations

import asyncio

from llmgw.auth.sessions import token_hash
from llmgw.cli.main import main

from .conftest import PASSWORD, Site


async def test_sign_up_is_off_unless_signup_open(site: Site) -> None:
    b = await site.browser()
    page = await b.get("/signup")
    assert page.status == 404 and "ask one for yours" in page.text
    signin = await b.get("/signin")
    assert "/signup" not in signin.text
    page = await b.post("/signup", {"csrf": signin.csrf, "email": "x@example.com", "password": PASSWORD,
                                    "password2": PASSWORD})
    assert page.status == 404
    assert await site.store.get_user_by_email("x@example.com") is None


async def test_a_sign_up_waits_for_approval_then_signs_in(make_site) -> None:
    site: Site = await make_site(auth={"signup_open": True})
    b = await site.browser()
    assert "/signup" in (await b.get("/signin")).text
    done = await b.submit("/signup", None, {"email": "Ayse@Example.com", "name": "Ayşe",
                                             "password": PASSWORD, "password2": PASSWORD})
    assert done.status == 200 and "waits for an administrator" in done.text
    user = await site.store.get_user_by_email("ayse@example.com")
    assert (user.state, user.name, user.role) == ("pending", "Ayşe", "none")
    assert user.password_hash.startswith("$argon2id$")

    # The right password is told it waits; a wrong one is not told anything about the account.
    page = await b.sign_in("ayse@example.com")
    assert page.status == 403 and "waiting for an administrator" in page.text
    page = await b.sign_in("ayse@example.com", "wrong password!")
    assert page.status == 401 and "waiting" not in page.text

    # Signing up again with the same address answers the same, and changes nothing.
    again = await b.submit("/signup", None, {"email": "ayse@example.com", "name": "Someone",
                                              "password": "another password", "password2": "another password"})
    assert again.status == 200 and again.text == done.text
    assert (await site.store.get_user_by_email("ayse@example.com")).name == "Ayşe"

    # Approved with the command line, the way an operator does.
    db = site.portal.config.store.dsn.reveal()
    assert await asyncio.to_thread(main, ["users", "activate", "ayse@example.com", "--store", db, "--actor", "ilker"]) == 0
    page = await b.sign_in("ayse@example.com")
    assert page.status == 200 and page.url.endswith("/account") and "Your account" in page.text
    events = await site.store.list_audit(action="users.*")
    assert [e.action for e in events][:2] == ["users.activate", "users.signup"]


async def test_sign_up_checks_what_it_is_given(make_site) -> None:
    site: Site = await make_site(auth={"signup_open": True})
    b = await site.browser()
    cases = [
        ({"email": "not-an-address", "password": PASSWORD, "password2": PASSWORD}, "not an email address"),
        ({"email": "a@example.com", "password": "short", "password2": "short"}, "too short"),
        ({"email": "a@example.com", "password": PASSWORD, "password2": PASSWORD + "x"}, "not the same"),
        ({"email": "longname@example.com", "password": "longname@example.com",
          "password2": "longname@example.com"}, "must not be your email"),
    ]
    for fields, words in cases:
        page = await b.submit("/signup", None, fields)
        assert page.status == 400 and words in page.text, words
    assert await site.store.list_users() == []


async def test_sign_in_right_and_wrong(site: Site) -> None:
    await site.person()
    b = await site.browser()
    wrong = await b.sign_in("ayse@example.com", "not the password")
    assert wrong.status == 401 and "do not match" in wrong.text
    nobody = await b.sign_in("nobody@example.com", "not the password")
    assert nobody.status == 401 and "do not match" in nobody.text
    assert b.cookie("llmgw_session") is None
    right = await b.sign_in("AYSE@example.com")
    assert right.status == 200 and "ayse@example.com" in right.text
    cookie = b.cookie("llmgw_session")
    assert cookie and len(cookie) >= 40
    sessions = await site.store.list_web_sessions((await site.store.get_user_by_email("ayse@example.com")).id)
    assert len(sessions) == 1 and sessions[0].client == "192.0.2.10"
    assert sessions[0].token_hash != cookie  # only the hash is kept


async def test_the_session_cookie_is_httponly_and_lax(site: Site) -> None:
    await site.person()
    b = await site.browser()
    page = await b.get("/signin")
    response = await b.client.post("/signin", data={"csrf": page.csrf, "email": "ayse@example.com",
                                                     "password": PASSWORD},
                                   headers={"X-Forwarded-For": "192.0.2.10"}, allow_redirects=False)
    assert response.status == 303 and response.headers["Location"] == "/account"
    cookie = response.cookies["llmgw_session"]
    assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == "/"
    assert not cookie["secure"]  # plain HTTP here
    # Behind a trusted proxy that says https, it is Secure.
    b2 = await site.browser()
    page = await b2.get("/signin")
    response = await b2.client.post(
        "/signin", data={"csrf": page.csrf, "email": "ayse@example.com", "password": PASSWORD},
        headers={"X-Forwarded-For": "192.0.2.11", "X-Forwarded-Proto": "https"}, allow_redirects=False)
    assert response.cookies["llmgw_session"]["secure"]


async def test_next_goes_back_only_to_a_page_of_this_site(site: Site) -> None:
    await site.person()
    b = await site.browser()
    page = await b.get("/chat")
    assert page.url.endswith("/signin?next=/chat")
    done = await b.post("/signin", {"csrf": page.csrf, "email": "ayse@example.com", "password": PASSWORD,
                                    "next": "/chat"})
    assert done.url.endswith("/chat")
    b2 = await site.browser()
    page = await b2.get("/signin")
    response = await b2.client.post("/signin", data={"csrf": page.csrf, "email": "ayse@example.com",
                                                      "password": PASSWORD, "next": "//evil.example.com/x"},
                                    allow_redirects=False)
    assert response.headers["Location"] == "/account"


async def test_ten_wrong_passwords_elsewhere_do_not_lock_the_owner_out(site: Site) -> None:
    await site.person()
    guesser = await site.browser("203.0.113.66")
    for i in range(10):
        page = await guesser.sign_in("ayse@example.com", f"guess number {i}")
    assert page.status == 429 and "Too many attempts" in page.text
    assert int(page.headers["Retry-After"]) > 0
    # Even the right password is refused from the guesser's address now.
    assert (await guesser.sign_in("ayse@example.com")).status == 429
    owner = await site.browser("198.51.100.7")
    page = await owner.sign_in("ayse@example.com")
    assert page.status == 200 and page.url.endswith("/account")


async def test_guesses_spread_over_many_addresses_are_still_bounded(site: Site) -> None:
    await site.person()
    refused = 0
    for i in range(60):
        b = await site.browser(f"203.0.113.{i + 1}")
        page = await b.sign_in("ayse@example.com", f"guess {i}")
        refused += page.status == 429
    assert refused >= 10  # the per-address bound (50) holds against 60 clients


async def test_the_throttle_ignores_forwarded_for_from_an_untrusted_peer(make_site) -> None:
    site: Site = await make_site(router={"trusted_proxies": [], "scrape_interval": "100ms"})
    await site.person()
    for i in range(6):
        b = await site.browser(f"203.0.113.{i + 1}")  # the header claims many addresses
        page = await b.sign_in("ayse@example.com", "wrong guess")
    assert page.status == 429  # all counted as the one real peer, 127.0.0.1


async def test_a_busy_server_says_so(site: Site) -> None:
    await site.person()
    passwords = site.portal.passwords
    passwords.wait = 0.05
    passwords._turns = asyncio.Semaphore(0)  # every hashing turn taken
    b = await site.browser()
    page = await b.sign_in("ayse@example.com")
    assert page.status == 503 and "Too many people are signing in" in page.text
    assert page.headers["Retry-After"] == "5"


async def test_a_form_without_its_csrf_token_is_refused(site: Site) -> None:
    await site.person()
    b = await site.browser()
    await b.get("/signin")
    page = await b.post("/signin", {"email": "ayse@example.com", "password": PASSWORD})
    assert page.status == 403 and "expired or came from another site" in page.text
    page = await b.post("/signin", {"csrf": "x" * 43, "email": "ayse@example.com", "password": PASSWORD})
    assert page.status == 403
    await b.sign_in("ayse@example.com")
    account = await b.get("/account")
    for path, fields in [("/account/keys", {"name": "k"}), ("/account/password", {"current": PASSWORD}),
                         ("/signout", {}), ("/chat/key", {})]:
        page = await b.post(path, fields)
        assert page.status == 403, path
        page = await b.post(path, {**fields, "csrf": "forged-token-forged-token-forged"})
        assert page.status == 403, path
    assert (await b.get("/account")).status == 200 and account.csrf  # still signed in


async def test_sign_out_ends_the_session(site: Site) -> None:
    await site.person()
    b = await site.browser()
    page = await b.sign_in("ayse@example.com")
    token = b.cookie("llmgw_session")
    out = await b.post("/signout", {"csrf": page.csrf})
    assert out.status == 200 and out.url.endswith("/")
    assert (await b.get("/account")).url.endswith("/signin?next=/account")
    # The old cookie is no good either.
    b2 = await site.browser()
    b2.client.session.cookie_jar.update_cookies({"llmgw_session": token})
    assert (await b2.get("/account")).url.endswith("/signin?next=/account")


async def test_an_idle_session_ends(site: Site) -> None:
    await site.person()
    b = await site.browser()
    await b.sign_in("ayse@example.com")
    clock = site.portal.clock
    clock.advance(minutes=90)
    assert (await b.get("/account")).url.endswith("/account")  # used within the idle time: still on
    clock.advance(minutes=90)
    assert (await b.get("/account")).url.endswith("/account")
    clock.advance(hours=2, minutes=1)  # auth.session_idle: 2h without a request
    assert (await b.get("/account")).url.endswith("/signin?next=/account")
    user = await site.store.get_user_by_email("ayse@example.com")
    assert await site.store.list_web_sessions(user.id) == []


async def test_a_session_ends_after_its_lifetime_however_busy(site: Site) -> None:
    await site.person()
    b = await site.browser()
    await b.sign_in("ayse@example.com")
    for _ in range(12):
        site.portal.clock.advance(hours=1)
        page = await b.get("/account")
    assert page.url.endswith("/signin?next=/account")  # auth.session_ttl: 12h


async def test_a_suspended_person_is_signed_out(site: Site) -> None:
    await site.person()
    b = await site.browser()
    await b.sign_in("ayse@example.com")
    await site.portal.tenancy("test").set_user_state("ayse@example.com", "suspended")
    assert (await b.get("/account")).url.endswith("/signin?next=/account")
    page = await b.sign_in("ayse@example.com")
    assert page.status == 403 and "suspended" in page.text


async def test_a_planted_pre_sign_in_cookie_forges_nothing_once_signed_in(site: Site) -> None:
    """An attacker who set the browser's llmgw_csrf cookie (a sibling subdomain,
    a plain-HTTP answer) knows that value; once the person signs in it is worth nothing."""
    await site.person()
    b = await site.browser()
    planted = "planted-csrf-token-planted-csrf-tok"
    b.client.session.cookie_jar.update_cookies({"llmgw_csrf": planted})
    signin = await b.get("/signin")
    assert signin.csrf == planted  # before sign-in, the browser's own cookie is the token
    account = await b.sign_in("ayse@example.com")
    assert account.status == 200 and account.csrf and account.csrf != planted
    page = await b.post("/account/keys", {"name": "forged", "csrf": planted})
    assert page.status == 403 and "expired or came from another site" in page.text
    user = await site.store.get_user_by_email("ayse@example.com")
    assert [k for k in await site.store.list_keys(user_id=user.id) if k.name == "forged"] == []
    # The session's own token works, and is not what the store keeps.
    made = await b.post("/account/keys", {"name": "mine", "csrf": account.csrf})
    assert made.status == 200
    session = await site.store.get_web_session(token_hash(b.cookie("llmgw_session")))
    assert session.csrf_token != account.csrf and account.csrf not in session.csrf_token


async def test_each_sign_in_has_a_csrf_token_of_its_own(site: Site) -> None:
    await site.person()
    first, second = await site.browser(), await site.browser(address="192.0.2.11")
    one = await first.sign_in("ayse@example.com")
    two = await second.sign_in("ayse@example.com")
    assert one.csrf and two.csrf and one.csrf != two.csrf
    # One session's token does not work in the other.
    page = await second.post("/account/keys", {"name": "crossed", "csrf": one.csrf})
    assert page.status == 403


async def test_forms_sent_from_another_site_are_refused(site: Site) -> None:
    await site.person()
    b = await site.browser()
    account = await b.sign_in("ayse@example.com")
    for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Sec-Fetch-Site": "same-site"}, {"Sec-Fetch-Site": "cross-site", "Origin": "null"}):
        page = await b.post("/account/keys", {"name": "from-elsewhere", "csrf": account.csrf}, headers=headers)
        assert page.status == 403, headers
    user = await site.store.get_user_by_email("ayse@example.com")
    assert [k for k in await site.store.list_keys(user_id=user.id) if k.name == "from-elsewhere"] == []
    own = site.url.rstrip("/")
    page = await b.post("/account/keys", {"name": "here", "csrf": account.csrf},
                        headers={"Origin": own, "Sec-Fetch-Site": "same-origin"})
    assert page.status == 200
    # What a real browser sends from our own pages (their Referrer-Policy is no-referrer).
    page = await b.post("/account/keys", {"name": "here-too", "csrf": account.csrf},
                        headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"})
    assert page.status == 200
