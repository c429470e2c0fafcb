"""The portal's mail queue (``mail_outbox``): the shared SQL both backends use.

A message waits with ``next_at`` set. A sender claims the oldest due one by
moving its ``next_at`` forward by a lease only if nobody moved it first, so
two control planes never both send it; then records it sent, or tried again
later, or given up. Once sent or given up its body is emptied.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs

from . import validate as v
from .errors import Invalid, NotFound
from .mail import QueuedMail
from .sqlbase import SQLStoreBase, Tx, new_id

MAIL_COLS = "id, kind, to_addr, subject, body, created_at, next_at, attempts, sent_at, failed_at, last_error"
#: The largest body kept: a mail from llmgw is a few lines.
MAX_BODY = 64 * 1024


class SQLMail(SQLStoreBase):
    def _mail(self, r: Any) -> QueuedMail:
        return QueuedMail(id=r["id"], kind=r["kind"], to=r["to_addr"], subject=r["subject"], body=r["body"],
                          created_at=self._dt(r["created_at"]), next_at=self._dt(r["next_at"]),
                          attempts=int(r["attempts"]), sent_at=self._dt(r["sent_at"]),
                          failed_at=self._dt(r["failed_at"]), last_error=r["last_error"])

    async def enqueue_mail(self, *, kind: str, to: str, subject: str, body: str) -> QueuedMail:
        """Queue a message, due now."""
        kind = v.check_text(kind, "kind", max_len=40)
        to = v.check_email(to)
        subject = v.check_text(subject, "subject", max_len=300)
        if not isinstance(body, str) or not body or len(body) > MAX_BODY:
            raise Invalid(f"body: expected text of 1 to {MAX_BODY} characters")
        now = self._now()
        mail = QueuedMail(id=new_id("mail"), kind=kind, to=to, subject=subject, body=body, created_at=now,
                          next_at=now, attempts=0, sent_at=None, failed_at=None, last_error=None)

        async def work(tx: Tx) -> None:
            await tx.execute(f"INSERT INTO mail_outbox ({MAIL_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             mail.id, kind, to, subject, body, self._t(now), self._t(now), 0, None, None, None)

        await self._write(work)
        return mail

    async def claim_mail(self, *, lease: dt.timedelta) -> QueuedMail | None:
        """The oldest message due now, claimed for ``lease`` (its attempt counted); None when none is due."""
        now = self._now()

        async def work(tx: Tx) -> QueuedMail | None:
            r = await tx.fetchrow(f"SELECT {MAIL_COLS} FROM mail_outbox WHERE next_at IS NOT NULL AND next_at <= ?"
                                  " ORDER BY next_at, id LIMIT 1", self._t(now))
            if r is None:
                return None
            mail = self._mail(r)
            moved = await tx.execute("UPDATE mail_outbox SET next_at = ?, attempts = attempts + 1"
                                     " WHERE id = ? AND next_at = ?", self._t(now + lease), mail.id, r["next_at"])
            return attrs.evolve(mail, attempts=mail.attempts + 1, next_at=now + lease) if moved else None

        return await self._write(work)

    async def mail_sent(self, mail_id: str) -> None:
        now = self._t(self._now())

        async def work(tx: Tx) -> None:
            if not await tx.execute("UPDATE mail_outbox SET sent_at = ?, next_at = NULL, body = '', last_error = NULL"
                                    " WHERE id = ?", now, v.check_id(mail_id, "mail id")):
                raise NotFound(f"no mail with id {mail_id!r}")

        await self._write(work)

    async def mail_failed(self, mail_id: str, error: str, *, retry_at: dt.datetime | None) -> None:
        """An attempt failed: tried again at ``retry_at``, or (None) given up."""
        error = str(error)[:500] or "failed"
        now = self._t(self._now())

        async def work(tx: Tx) -> None:
            if retry_at is None:
                sql, args = ("UPDATE mail_outbox SET failed_at = ?, next_at = NULL, body = '', last_error = ?"
                             " WHERE id = ?", (now, error, mail_id))
            else:
                sql, args = ("UPDATE mail_outbox SET next_at = ?, last_error = ? WHERE id = ?",
                             (self._t(retry_at), error, mail_id))
            if not await tx.execute(sql, *args):
                raise NotFound(f"no mail with id {mail_id!r}")

        await self._write(work)

    async def list_mail(self, *, state: str | None = None, limit: int = 100) -> list[QueuedMail]:
        """Messages newest first: all, or only those ``waiting``, ``sent`` or ``failed``."""
        limit = v.check_int(limit, "limit", minimum=1, maximum=10_000)
        where = {None: "", "waiting": " WHERE next_at IS NOT NULL", "sent": " WHERE sent_at IS NOT NULL",
                 "failed": " WHERE failed_at IS NOT NULL"}
        if state not in where:
            raise Invalid(f"state: {state!r} is not one of waiting, sent, failed")
        rows = await self._all(f"SELECT {MAIL_COLS} FROM mail_outbox{where[state]} ORDER BY created_at DESC, id"
                               " LIMIT ?", limit)
        return [self._mail(r) for r in rows]

    async def delete_mail_before(self, cutoff: dt.datetime) -> int:
        """Remove messages sent or given up before ``cutoff``; returns how many."""
        at = self._t(v.check_time(cutoff, "cutoff"))

        async def work(tx: Tx) -> int:
            return await tx.execute("DELETE FROM mail_outbox WHERE next_at IS NULL AND created_at < ?", at)

        return await self._write(work)
