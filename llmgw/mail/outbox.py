"""The queue of the portal's mail, in the store, and the loop that sends it.

`Outbox.enqueue` writes a message into the store (so it survives a restart);
`Outbox.run` sends what is due, one message at a time: each is claimed for a
few minutes first, so two control planes never both send it, then recorded
sent, or tried again after a wait that doubles from a minute up to an hour,
or failed once `mail.retry_for` has passed or the server refuses it for good.
Neither a body nor a link is logged; an address only as the queue shows it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable

from llmgw.config.mail import MailConfig
from llmgw.mail.messages import render
from llmgw.mail.smtp import MailRefused, SMTPSender
from llmgw.store import Store, StoreError
from llmgw.store.mail import QueuedMail

log = logging.getLogger("llmgw.mail")

#: How long a claimed message is kept from other senders while it is being sent.
CLAIM = dt.timedelta(minutes=5)
FIRST_WAIT = dt.timedelta(minutes=1)
LONGEST_WAIT = dt.timedelta(hours=1)
#: How often the loop looks for due messages when it found none.
POLL_SECONDS = 2.0
#: Sent and failed messages are kept this long, for llmgw ctl mail to show.
KEEP = dt.timedelta(days=30)


def wait_after(attempts: int) -> dt.timedelta:
    """The wait after the `attempts`-th failed attempt: 1 minute, doubling, at most an hour."""
    return min(FIRST_WAIT * (2 ** max(0, attempts - 1)), LONGEST_WAIT)


class Outbox:
    def __init__(self, store: Store, config: MailConfig, *, sender: SMTPSender | None = None,
                 clock: Callable[[], dt.datetime] | None = None) -> None:
        self.store = store
        self.config = config
        self.sender = sender or SMTPSender(config)
        self._clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self._wake = asyncio.Event()

    @property
    def portal_url(self) -> str:
        return self.config.portal_url.rstrip("/")

    async def enqueue(self, kind: str, to: str, lang: str, **values: str) -> QueuedMail:
        """Queue a message of `kind` to `to`, written in `lang`; it goes out within seconds."""
        subject, body = render(kind, lang, portal=self.portal_url, **values)
        return await self.queue(kind, to, subject, body)

    async def queue(self, kind: str, to: str, subject: str, body: str) -> QueuedMail:
        """Queue a message already written (a notification sink's); it goes out within seconds."""
        mail = await self.store.enqueue_mail(kind=kind, to=to, subject=subject, body=body)
        self._wake.set()
        return mail

    async def send_due(self) -> int:
        """Send every message due now; returns how many were handed over."""
        sent = 0
        while (mail := await self.store.claim_mail(lease=CLAIM)) is not None:
            sent += await self._send(mail)
        return sent

    async def _send(self, mail: QueuedMail) -> int:
        try:
            await self.sender.send(mail.to, mail.subject, mail.body)
        except MailRefused as exc:
            now = self._clock()
            gives_up = not exc.retry or now - mail.created_at >= self.config.retry_for
            retry_at = None if gives_up else now + wait_after(mail.attempts)
            await self.store.mail_failed(mail.id, str(exc), retry_at=retry_at)
            log.warning("mail not sent%s: %s", "; given up" if gives_up else "; tried again later", exc,
                        extra={"fields": {"mail_id": mail.id, "kind": mail.kind, "attempts": mail.attempts}})
            return 0
        await self.store.mail_sent(mail.id)
        log.info("mail sent", extra={"fields": {"mail_id": mail.id, "kind": mail.kind}})
        return 1

    async def run(self) -> None:
        """Send what is due, then wait for more (a new message wakes it at once)."""
        swept = self._clock() - KEEP
        while True:
            try:
                await self.send_due()
                if self._clock() - swept > dt.timedelta(hours=1):
                    swept = self._clock()
                    await self.store.delete_mail_before(swept - KEEP)
            except StoreError as exc:
                log.warning("the mail queue cannot be read now: %s", exc)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), POLL_SECONDS)
            except TimeoutError:
                pass


_current: Outbox | None = None


def bind(outbox: Outbox | None) -> None:
    """Make `outbox` the one this process's email notification sink queues into (None: no more)."""
    global _current
    _current = outbox


def current() -> Outbox | None:
    """The outbox the running server sends mail through, when server.yaml names a mail server."""
    return _current


class PortalMailer:
    """What the portal sends mail with (llmgw.web.portal.Mailer): through the outbox."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.base_url = outbox.portal_url

    async def send_reset_link(self, to: str, link: str, lang: str) -> None:
        await self.outbox.enqueue("reset_link", to, lang, link=link)

    async def send_approved(self, to: str, lang: str) -> None:
        await self.outbox.enqueue("approved", to, lang, link=f"{self.base_url}/signin")


async def queue_approved(store: Store, config, to: str) -> bool:
    """Tell a person whose sign-up was approved, in the portal's language, when server.yaml names a mail
    server (any control plane's loop sends it); False when it does not."""
    if config is None or not config.mail.enabled:
        return False
    lang = str(getattr(getattr(config, "landing", None), "language", "") or "en")
    await PortalMailer(Outbox(store, config.mail)).send_approved(to, lang)
    return True
