"""A message of the portal's mail queue, as the store keeps it (llmgw.store.sql_mail)."""

from __future__ import annotations

import datetime as dt

import attrs


@attrs.frozen(kw_only=True)
class QueuedMail:
    id: str
    kind: str
    to: str
    subject: str
    body: str = attrs.field(repr=False)
    created_at: dt.datetime
    next_at: dt.datetime | None
    attempts: int
    sent_at: dt.datetime | None
    failed_at: dt.datetime | None
    last_error: str | None

    @property
    def state(self) -> str:
        """``waiting``, ``sent`` or ``failed``."""
        return "sent" if self.sent_at else "failed" if self.failed_at else "waiting"
