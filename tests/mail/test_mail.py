"""The portal's mail through an SMTP server the tests run: parsed, its links followed through the portal."""

from __future__ import annotations

import asyncio
import datetime as dt
import re

import pytest

from llmgw.config import parse_server_config
from llmgw.mail.outbox import Outbox, wait_after
from llmgw.store import open_store

from .smtp_server import SMTPServer, free_port, self_signed

NEW = "a brand new passphrase"
PORTAL = "https://llm.example.com"


async def _until(predicate, timeout: float = 10.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not (value := predicate()):
        if loop.time() > end:
            raise AssertionError(f"not within {timeout}s")
        await asyncio.sleep(0.05)
    return value


def _mail(port: int, **more) -> dict:
    return {"host": "127.0.0.1", "port": port, "security": "none", "from": "LLM gateway <llm@example.com>",
            "portal_url": PORTAL, **more}


@pytest.fixture
def smtp():
    servers: list[SMTPServer] = []

    def make(**kw) -> SMTPServer:
        server = SMTPServer(**kw).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


async def test_a_reset_link_is_mailed_and_sets_a_new_password_through_the_portal(make_site, smtp) -> None:
    server = smtp()
    site = await make_site(mail=_mail(server.port))
    await site.person("ayse@example.com")
    b = await site.browser()
    sent = await b.submit("/reset", None, {"email": "ayse@example.com"})
    assert "a link to set a new password is on its way" in sent.text
    (message,) = await _until(lambda: server.inbox.messages)
    assert message["To"] == "ayse@example.com" and message["From"] == "LLM gateway <llm@example.com>"
    assert message["Subject"] == "Set a new password" and message["Message-ID"]
    body = message.get_content()
    link = re.search(r"https://llm\.example\.com/reset/\S+", body).group(0)
    form = await b.get(link.removeprefix(PORTAL))
    assert form.status == 200
    done = await b.post(link.removeprefix(PORTAL), {"csrf": form.csrf, "password": NEW, "password2": NEW})
    assert done.status == 200
    assert (await b.sign_in("ayse@example.com", NEW)).url.endswith("/account")
    (queued,) = await site.store.list_mail()
    assert (queued.state, queued.kind, queued.attempts, queued.body) == ("sent", "reset_link", 1, "")


async def test_the_mail_is_in_the_pages_language_and_an_approval_is_mailed(make_site, smtp) -> None:
    server = smtp()
    site = await make_site(mail=_mail(server.port))
    await site.person("ayse@example.com")
    b = await site.browser(lang="tr")
    await b.submit("/reset", None, {"email": "ayse@example.com"})
    (message,) = await _until(lambda: server.inbox.messages)
    assert message["Subject"] == "Yeni parola belirleyin" and "bir saat boyunca" in message.get_content()

    waiting = await site.person("new@example.com", state="pending", project=None)
    await site.person("root@example.com", role="admin", project=None)
    admin = await site.browser("192.0.2.50")
    await admin.sign_in("root@example.com")
    page = await admin.get("/admin/people")
    await admin.post(f"/admin/people/{waiting.id}", {"csrf": page.csrf, "action": "approve"})
    approved = (await _until(lambda: server.inbox.messages[1:]))[0]
    assert approved["To"] == "new@example.com" and approved["Subject"] == "Your account is ready"
    assert f"{PORTAL}/signin" in approved.get_content()


async def test_starttls_and_a_password_are_used_and_a_server_without_starttls_is_refused(
        tmp_path, store, clock, smtp) -> None:
    cert = self_signed(tmp_path)
    server = smtp(cert=cert)
    config = parse_server_config({"mail": _mail(server.port, security="starttls", username=SMTPServer.USER,
                                                password=SMTPServer.PASSWORD, ca_file=str(cert[0]))}).mail
    outbox = Outbox(store, config, clock=clock)
    await outbox.enqueue("reset_link", "ayse@example.com", "en", link=f"{PORTAL}/reset/abc")
    assert await outbox.send_due() == 1
    assert server.inbox.logins == [SMTPServer.USER] and len(server.inbox.messages) == 1

    plain = smtp()  # offers no STARTTLS: the password is not sent in clear
    config = parse_server_config({"mail": _mail(plain.port, security="starttls", username="gateway",
                                                password="pw")}).mail
    outbox = Outbox(store, config, clock=clock)
    await outbox.enqueue("reset_link", "bob@example.com", "en", link=f"{PORTAL}/reset/def")
    assert await outbox.send_due() == 0
    (waiting,) = await store.list_mail(state="waiting")
    assert "offers no STARTTLS" in waiting.last_error and plain.inbox.messages == []


async def test_a_message_waits_while_the_server_is_down_and_goes_once_it_is_back(store, clock, smtp) -> None:
    port = free_port()
    config = parse_server_config({"mail": _mail(port)}).mail
    outbox = Outbox(store, config, clock=clock)
    await outbox.enqueue("approved", "ayse@example.com", "en", link=f"{PORTAL}/signin")
    assert await outbox.send_due() == 0
    (waiting,) = await store.list_mail(state="waiting")
    assert waiting.attempts == 1 and "Connection" in waiting.last_error
    assert waiting.next_at == clock.now + wait_after(1) == clock.now + dt.timedelta(minutes=1)
    assert await outbox.send_due() == 0  # not due yet: nothing tried
    server = smtp(port=port)
    clock.advance(61)
    assert await outbox.send_due() == 1
    assert len(server.inbox.messages) == 1 and (await store.list_mail(state="sent"))[0].attempts == 2
    assert await outbox.send_due() == 0  # sent once


async def test_a_refused_recipient_fails_for_good_and_the_queue_outlives_a_restart(store_dsn, clock, smtp) -> None:
    server = smtp()
    config = parse_server_config({"mail": _mail(server.port, retry_for="1h")}).mail
    first = await open_store(store_dsn, clock=clock)
    try:
        await Outbox(first, config, clock=clock).enqueue("approved", "gone@example.com", "en", link="x")
        await Outbox(first, config, clock=clock).enqueue("approved", "ayse@example.com", "en", link="y")
    finally:
        await first.close()
    again = await open_store(store_dsn, clock=clock)  # a restart: what was queued is still there
    try:
        server.inbox.refuse = 550
        outbox = Outbox(again, config, clock=clock)
        assert await outbox.send_due() == 0
        failed = await again.list_mail(state="failed")
        assert len(failed) == 2 and all("550" in m.last_error and m.body == "" for m in failed)
        assert await again.list_mail(state="waiting") == []
    finally:
        await again.close()
    assert wait_after(3) == dt.timedelta(minutes=4) and wait_after(20) == dt.timedelta(hours=1)


def test_config_check_names_a_mail_key_that_cannot_work(tmp_path) -> None:
    from llmgw.config import ConfigError

    with pytest.raises(ConfigError) as refused:
        parse_server_config({"mail": {"host": "smtp.example.com", "username": "gw", "security": "none",
                                      "ca_file": str(tmp_path / "missing.pem")}})
    problems = [str(p) for p in refused.value.problems]
    assert any(p.startswith("mail.from: expected the sender's address") for p in problems), problems
    assert any(p.startswith("mail.portal_url: expected the portal's address") for p in problems)
    assert any(p.startswith("mail.password: empty, and username is set") for p in problems)
    assert any(p.startswith("mail.security: none would send the password in clear") for p in problems)
    assert any(p.startswith("mail.ca_file:") and "is not a file" in p for p in problems)
    assert not parse_server_config({}).mail.enabled  # no mail: section, no mail and no complaint


def test_users_approve_queues_the_mail_with_a_mail_server_and_says_so_without(tmp_path, capsys) -> None:
    from ctl_live import run_ok

    db = f"sqlite:///{tmp_path}/store.db"
    config = tmp_path / "server.yaml"
    config.write_text(f"store:\n  dsn: {db}\nmail:\n  host: 127.0.0.1\n  security: none\n"
                      f"  from: llm@example.com\n  portal_url: {PORTAL}\n")
    run_ok(capsys, "users", "create", "gil@example.com", "--pending", "--store", db)
    run_ok(capsys, "users", "create", "hal@example.com", "--pending", "--store", db)
    out = run_ok(capsys, "users", "approve", "gil@example.com", "--config", str(config))
    assert "a mail telling them is on its way" in out
    out = run_ok(capsys, "users", "approve", "hal@example.com", "--store", db)
    assert "tell hal@example.com they may sign in now" in out

    async def queued():
        store = await open_store(db)
        try:
            return await store.list_mail()
        finally:
            await store.close()

    (mail,) = asyncio.run(queued())
    assert (mail.to, mail.kind, mail.state) == ("gil@example.com", "approved", "waiting")
    assert f"{PORTAL}/signin" in mail.body


async def test_a_budget_notice_is_mailed_by_the_email_sink_through_the_same_queue(make_site, smtp) -> None:
    from llmgw.notify.events import budget_spent
    from llmgw.notify.notifier import build_notifier

    server = smtp()
    site = await make_site(mail=_mail(server.port), notify={"sinks": [
        {"kind": "email", "name": "finance", "url": "mailto:finance@example.com,ops@example.com",
         "events": ["budget_spent"]}]})
    event = budget_spent("team", "tm-1", period="month", budget="250.00 USD", budget_micros=250_000_000,
                         renews_at=dt.datetime(2027, 1, 1, tzinfo=dt.UTC), spent_micros=250_000_000)
    notifier = build_notifier(site.portal.config)  # as llmgw server builds it, with the plugins' sinks
    await notifier.start()
    try:
        assert notifier.emit(event)
        messages = await _until(lambda: server.inbox.messages[1:] and server.inbox.messages)
    finally:
        await notifier.stop()
    assert sorted(m["To"] for m in messages) == ["finance@example.com", "ops@example.com"]
    assert all(m["Subject"].startswith("[llmgw] Budget spent: team:tm-1") for m in messages)
    assert "250.00 USD" in messages[0].get_content()
    assert {m.kind for m in await site.store.list_mail(state="sent")} == {"budget_spent"}


def test_an_email_sink_needs_a_mailto_url_and_a_mail_server() -> None:
    from llmgw.config import ConfigError

    with pytest.raises(ConfigError) as refused:
        parse_server_config({"notify": {"sinks": [{"kind": "email", "url": "https://x.example.com"}]}})
    problems = [str(p) for p in refused.value.problems]
    assert any(p.startswith("notify.sinks[0].url: expected mailto:ADDRESS") for p in problems), problems
    assert any(p.startswith("notify.sinks[0].kind: email sends through server.yaml's mail: server") for p in problems)


async def test_two_senders_on_one_store_send_each_message_once_and_old_ones_are_cleared(store, clock, smtp) -> None:
    server = smtp()
    config = parse_server_config({"mail": _mail(server.port)}).mail
    one, two = Outbox(store, config, clock=clock), Outbox(store, config, clock=clock)
    for i in range(6):
        await one.enqueue("approved", f"p{i}@example.com", "en", link=f"{PORTAL}/signin")
    sent = await asyncio.gather(one.send_due(), two.send_due())
    assert sum(sent) == 6 and sorted(m["To"] for m in server.inbox.messages) == [f"p{i}@example.com" for i in range(6)]
    assert await store.delete_mail_before(clock.now + dt.timedelta(days=31)) == 6
    assert await store.list_mail() == []


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")  # it is TLS: see smtp_server
async def test_tls_from_the_first_byte_with_a_password(tmp_path, store, clock, smtp) -> None:
    cert = self_signed(tmp_path)
    server = smtp(cert=cert, implicit_tls=True)
    config = parse_server_config({"mail": _mail(server.port, security="tls", username=SMTPServer.USER,
                                                password=SMTPServer.PASSWORD, ca_file=str(cert[0]))}).mail
    outbox = Outbox(store, config, clock=clock)
    await outbox.enqueue("approved", "ayse@example.com", "tr", link=f"{PORTAL}/signin")
    assert await outbox.send_due() == 1
    (message,) = server.inbox.messages
    assert message["Subject"] == "Hesabınız hazır" and server.inbox.logins == [SMTPServer.USER]

    untrusted = parse_server_config({"mail": _mail(server.port, security="tls", username=SMTPServer.USER,
                                                   password=SMTPServer.PASSWORD)}).mail  # the system's CAs
    outbox = Outbox(store, untrusted, clock=clock)
    await outbox.enqueue("approved", "bob@example.com", "en", link=f"{PORTAL}/signin")
    assert await outbox.send_due() == 0
    (waiting,) = await store.list_mail(state="waiting")
    assert "CERTIFICATE_VERIFY_FAILED" in waiting.last_error and len(server.inbox.messages) == 1
