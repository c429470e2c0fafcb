"""The mail endpoint: what the portal's mail queue holds, sent, waiting and failed (llmgw.mail)."""

from __future__ import annotations

from llmgw.admin.dispatch import Call
from llmgw.admin.mail_types import MailInfo, MailList


async def list_mail(call: Call) -> MailList:
    """The portal's mail, newest first: reset links, approvals and budget notices, with each one's state and
    the mail server's last answer; never a body."""
    q = call.query
    messages = await call.store.list_mail(state=q.state, limit=q.limit)
    return MailList(configured=call.admin.config.mail.enabled, messages=[
        MailInfo(id=m.id, kind=m.kind, to=m.to, subject=m.subject, state=m.state, attempts=m.attempts,
                 created_at=m.created_at, next_at=m.next_at, sent_at=m.sent_at, failed_at=m.failed_at,
                 last_error=m.last_error) for m in messages])


__all__ = ["list_mail"]
