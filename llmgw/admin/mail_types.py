"""What the mail endpoint answers: the portal's mail queue (llmgw.mail), bodies never shown."""

from __future__ import annotations

import datetime as dt

import attrs

from llmgw.admin.fields import field


@attrs.frozen(kw_only=True)
class MailQuery:
    state: str | None = field("Only messages waiting, sent or failed.", None,
                              schema={"enum": ["waiting", "sent", "failed"]})
    limit: int = field("At most this many, newest first.", 100, schema={"minimum": 1, "maximum": 10000})


@attrs.frozen(kw_only=True)
class MailInfo:
    """One message of the queue; its body (which may hold a reset link) is never shown."""

    id: str = field("Its id, mail-….")
    kind: str = field("reset_link, approved or budget.")
    to: str = field("Who it is for.")
    subject: str = field("Its subject.")
    state: str = field("waiting (to be sent, or tried again at next_at), sent or failed (given up).")
    attempts: int = field("Attempts made so far.")
    created_at: dt.datetime = field("When it was queued.")
    next_at: dt.datetime | None = field("When it is tried next; null once sent or failed.")
    sent_at: dt.datetime | None = field("When the mail server took it.")
    failed_at: dt.datetime | None = field("When it was given up.")
    last_error: str | None = field("What the mail server (or the connection to it) said last time.")


@attrs.frozen(kw_only=True)
class MailList:
    """The portal's mail, newest first."""

    configured: bool = field("server.yaml names a mail server (mail.host); without one nothing is sent.")
    messages: list[MailInfo] = field("The messages.")


__all__ = ["MailInfo", "MailList", "MailQuery"]
