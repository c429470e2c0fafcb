"""Changing a password, and setting a forgotten one through a link: once, within the hour, the same answer for all."""

from __future__ import annotations

import asyncio
import io
import re
import sys

from llmgw.cli.main import main

from .conftest import PASSWORD, FakeMailer, Site

NEW = "a brand new passphrase"


async def test_changing_the_password_signs_every_other_browser_out(site: Site) -> None:
    await site.person()
    laptop = await site.browser("192.0.2.1")
    phone = await site.browser("192.0.2.2")
    tablet = await site.browser("192.0.2.3")
    for b in (laptop, phone, tablet):
        await b.sign_in("ayse@example.com")
    b = laptop
    wrong = await b.submit("/account/password", None, {"current": "not it at all", "password": NEW, "password2": NEW})
    assert wrong.status == 403 and "current password is not right" in wrong.text
    weak = await b.submit("/account/password", None, {"current": PASSWORD, "password": "short", "password2": "short"})
    assert weak.status == 400 and "too short" in weak.text
    done = await b.submit("/account/password", None, {"current": PASSWORD, "password": NEW, "password2": NEW})
    assert done.status == 200 and "every other browser is signed out" in done.text
    assert (await b.get("/account")).url.endswith("/account")  # this one stays
    for other in (phone, tablet):
        assert (await other.get("/account")).url.endswith("/signin?next=/account")
    user = await site.store.get_user_by_email("ayse@example.com")
    assert len(await site.store.list_web_sessions(user.id)) == 1
    assert (await (await site.browser()).sign_in("ayse@example.com", NEW)).url.endswith("/account")
    assert (await (await site.browser("192.0.2.9")).sign_in("ayse@example.com")).status == 401
    event = (await site.store.list_audit(action="users.password"))[0]
    assert event.actor == "ayse@example.com" and event.detail["sessions_closed"] == 2
    assert PASSWORD not in str(event.detail) and NEW not in str(event.detail)


async def test_without_mail_the_page_points_to_an_operator_and_says_the_same_for_all(site: Site) -> None:
    await site.person()
    b = await site.browser()
    known = await b.submit("/reset", None, {"email": "ayse@example.com"})
    unknown = await b.submit("/reset", None, {"email": "nobody@example.com"})
    assert known.status == unknown.status == 200
    assert "llmgw users reset-link" in known.text
    assert known.text == unknown.text
    user = await site.store.get_user_by_email("ayse@example.com")
    assert await site.store.list_audit(target=f"user:{user.id}", action="users.reset-link") == []


async def test_a_mailed_link_works_once_within_the_hour(site: Site) -> None:
    mailer = site.portal.mailer = FakeMailer()
    await site.person()
    await site.person("pending@example.com", state="pending", project=None)
    b = await site.browser()
    signed_in = await site.browser("192.0.2.50")
    await signed_in.sign_in("ayse@example.com")

    answers = []
    for email in ("ayse@example.com", "nobody@example.com", "pending@example.com", "AYSE@example.com"):
        answers.append(await b.submit("/reset", None, {"email": email}))
    assert {a.status for a in answers} == {200}
    assert len({a.text for a in answers}) == 1 and "is on its way" in answers[0].text
    # Only the active account got mail; the second request replaced the first link.
    assert [(to, link.startswith("https://llm.example.com/reset/")) for to, link, _ in mailer.sent] == [
        ("ayse@example.com", True), ("ayse@example.com", True)]
    first, link = mailer.sent[0][1], mailer.sent[1][1]
    path = link.removeprefix("https://llm.example.com")
    assert (await b.get(first.removeprefix("https://llm.example.com"))).status == 410

    form = await b.get(path)
    assert form.status == 200 and "Choose a new password" in form.text
    assert form.headers["Cache-Control"] == "no-store" and form.headers["Referrer-Policy"] == "no-referrer"
    mismatch = await b.post(path, {"csrf": form.csrf, "password": NEW, "password2": NEW + "!"})
    assert mismatch.status == 400 and "not the same" in mismatch.text
    done = await b.post(path, {"csrf": form.csrf, "password": NEW, "password2": NEW})
    assert done.status == 200 and "every session is closed" in done.text
    # Once: the link is spent, and the session opened before it is closed.
    assert (await b.get(path)).status == 410
    again = await b.post(path, {"csrf": form.csrf, "password": NEW + "2", "password2": NEW + "2"})
    assert again.status == 410
    assert (await signed_in.get("/account")).url.endswith("/signin?next=/account")
    assert (await b.sign_in("ayse@example.com", NEW)).url.endswith("/account")
    assert [e.action for e in await site.store.list_audit(action="users.password-reset")] == ["users.password-reset"]


async def test_a_link_stops_working_after_an_hour(site: Site) -> None:
    mailer = site.portal.mailer = FakeMailer()
    await site.person()
    b = await site.browser()
    await b.submit("/reset", None, {"email": "ayse@example.com"})
    path = mailer.sent[0][1].removeprefix(mailer.base_url)
    site.portal.clock.advance(minutes=59)
    form = await b.get(path)
    assert form.status == 200
    site.portal.clock.advance(minutes=2)
    assert (await b.get(path)).status == 410
    late = await b.post(path, {"csrf": form.csrf, "password": NEW, "password2": NEW})
    assert late.status == 410 and "more than an hour old" in late.text
    assert (await b.sign_in("ayse@example.com")).url.endswith("/account")  # the old password stands


async def test_reset_requests_are_throttled_per_address(site: Site) -> None:
    site.portal.mailer = FakeMailer()
    await site.person()
    b = await site.browser()
    statuses = [(await b.submit("/reset", None, {"email": "ayse@example.com"})).status for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    assert len(site.portal.mailer.sent) == 3


async def test_made_garbage_tokens_are_refused(site: Site) -> None:
    b = await site.browser()
    for token in ("x", "a" * 43, "../../etc", "%00" * 20):
        assert (await b.get(f"/reset/{token}")).status in (404, 410)


def _cli(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr, sys.stdin
    sys.stdout, sys.stderr = out, err
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    try:
        code = main(list(args))
    finally:
        sys.stdout, sys.stderr, sys.stdin = old
    return code, out.getvalue(), err.getvalue()


async def test_an_operator_makes_the_link_with_the_cli(site: Site) -> None:
    db = site.portal.config.store.dsn.reveal()
    code, out, err = await asyncio.to_thread(
        _cli, "users", "create", "ilker@example.com", "--password", "-", "--store", db, "--actor", "root",
        stdin="a long enough password\n")
    assert code == 0, err
    user = await site.store.get_user_by_email("ilker@example.com")
    assert user.password_hash.startswith("$argon2id$")
    b = await site.browser()
    assert (await b.sign_in("ilker@example.com", "a long enough password")).url.endswith("/account")

    code, out, err = await asyncio.to_thread(
        _cli, "users", "reset-link", "ilker@example.com", "--base-url", "https://llm.example.com",
        "--store", db, "--actor", "root")
    assert code == 0, err
    link = out.strip()
    assert re.fullmatch(r"https://llm\.example\.com/reset/[A-Za-z0-9_-]{40,}", link)
    assert "works once" in err
    page = await b.get(link.removeprefix("https://llm.example.com"))
    assert page.status == 200
    events = await site.store.list_audit(action="users.reset-link")
    assert events[0].actor == "root"

    code, out, err = await asyncio.to_thread(_cli, "users", "create", "weak@example.com", "--password", "short",
                                             "--store", db)
    assert code == 2 and "at least 10 characters" in err
    assert await site.store.get_user_by_email("weak@example.com") is None
    code, out, err = await asyncio.to_thread(_cli, "users", "create", "sso@example.com", "--store", db)
    assert code == 0
    code, out, err = await asyncio.to_thread(_cli, "users", "reset-link", "sso@example.com", "--store", db)
    assert code == 2 and "single sign-on" in err
