"""`email`: each event in words, mailed to the addresses of the sink's url (`mailto:a@example.com,b@…`).

It goes through the portal's mail queue and its one SMTP sender
(llmgw.mail: server.yaml's `mail:` section), so an event mailed is sent once,
tried again while the mail server cannot take it, and listed by
`llmgw ctl mail`. A delivery is done once the messages are queued.
"""

from __future__ import annotations

import aiohttp

from llmgw.config.mail import mail_addresses
from llmgw.plugins.types import Delivery, Event, Sink, SinkTarget
from llmgw_notify_sinks.slack import TITLES

__all__ = ["EmailSink", "email_text"]


def email_text(event: Event) -> tuple[str, str]:
    """(subject, body) of the mail for `event`."""
    title = TITLES.get(event.kind, event.kind.replace("_", " ").capitalize())
    lines = [event.summary, ""]
    lines += [f"{key}: {value}" for key, value in event.details.items()]
    when = event.time.strftime("%Y-%m-%d %H:%M UTC") if event.time is not None else ""
    lines += ["", f"{event.subject} · {event.source} · {when} · {event.id}".strip(" ·")]
    return f"[llmgw] {title}: {event.subject}"[:300], "\n".join(lines) + "\n"


class EmailSink(Sink):
    name = "email"
    description = "the event in words, mailed through server.yaml's mail: server to the url's mailto: addresses"

    async def send(self, target: SinkTarget, event: Event, session: aiohttp.ClientSession) -> Delivery:
        from llmgw.mail.outbox import current

        outbox = current()
        if outbox is None:
            return Delivery(ok=False, error="no mail server: server.yaml's mail.host is empty, or this process "
                                            "keeps no store")
        try:
            addresses = mail_addresses(target.url)
        except ValueError as exc:
            return Delivery(ok=False, error=str(exc))
        subject, body = email_text(event)
        try:
            for address in addresses:
                await outbox.queue(event.kind, address, subject, body)
        except Exception as exc:  # noqa: BLE001 - a failed delivery is answered, not raised
            return Delivery(ok=False, error=f"the mail queue did not take it: {exc}")
        return Delivery(ok=True)
