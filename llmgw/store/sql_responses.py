"""Answers of the Responses API kept for `previous_response_id`: the shared SQL both backends use.

A row is one answer with the conversation that led to it, kept until it
expires; the gateway (:mod:`llmgw.router.response_log`) decides what goes
in and prunes the table to a bounded size. Here the conversation and the
response object are JSON text, read back whole.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from . import validate as v
from .errors import Invalid
from .records import StoredResponse
from .sqlbase import SQLStoreBase, Tx, from_json

RESPONSE_COLS = "id, scope, model, messages, response, created_at, expires_at"


def _check_id(value: Any) -> str:
    return v.check_text(value, "response id", max_len=v.MAX_ID)


class SQLResponses(SQLStoreBase):
    def _stored_response(self, r: Any) -> StoredResponse:
        return StoredResponse(
            id=r["id"],
            scope=r["scope"],
            model=r["model"],
            messages=from_json(r["messages"]),
            response=from_json(r["response"]),
            created_at=self._dt(r["created_at"]),
            expires_at=self._dt(r["expires_at"]),
        )

    async def put_response(
        self,
        response_id: str,
        *,
        scope: str,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        response: Mapping[str, Any],
        ttl: dt.timedelta,
    ) -> StoredResponse:
        response_id = _check_id(response_id)
        scope = v.check_text(scope, "scope", max_len=v.MAX_ID, allow_empty=True)
        model = v.check_text(model, "model", max_len=v.MAX_ID)
        if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
            raise Invalid(f"messages: expected a list, got {type(messages).__name__}")
        if not isinstance(response, Mapping):
            raise Invalid(f"response: expected a mapping, got {type(response).__name__}")
        if not isinstance(ttl, dt.timedelta) or ttl.total_seconds() <= 0:
            raise Invalid(f"ttl: expected a positive duration, got {ttl!r}")
        messages_text = v.to_json([dict(m) for m in messages], f"response {response_id} messages")
        response_text = v.to_json(dict(response), f"response {response_id}")
        now = self._now()
        expires = now + ttl

        async def work(tx: Tx) -> None:
            await tx.execute("DELETE FROM responses WHERE id = ?", response_id)
            await tx.execute(
                f"INSERT INTO responses ({RESPONSE_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                response_id, scope, model, messages_text, response_text, self._t(now), self._t(expires),
            )

        await self._write(work)
        return StoredResponse(
            id=response_id, scope=scope, model=model, messages=from_json(messages_text),
            response=from_json(response_text), created_at=now, expires_at=expires,
        )

    async def get_response(self, response_id: str) -> StoredResponse | None:
        response_id = _check_id(response_id)
        now = self._t(self._now())

        async def work(tx: Tx) -> Any:
            return await tx.fetchrow(
                f"SELECT {RESPONSE_COLS} FROM responses WHERE id = ? AND expires_at > ?", response_id, now
            )

        r = await self._read(work)
        return None if r is None else self._stored_response(r)

    async def delete_response(self, response_id: str) -> bool:
        response_id = _check_id(response_id)

        async def work(tx: Tx) -> bool:
            return bool(await tx.execute("DELETE FROM responses WHERE id = ?", response_id))

        return await self._write(work)

    async def prune_responses(self, *, keep_at_most: int) -> int:
        keep = v.check_int(keep_at_most, "keep_at_most")
        now = self._t(self._now())

        async def work(tx: Tx) -> int:
            removed = await tx.execute("DELETE FROM responses WHERE expires_at <= ?", now)
            count = int(await tx.fetchval("SELECT COUNT(*) FROM responses"))
            if count > keep:
                removed += await tx.execute(
                    "DELETE FROM responses WHERE id IN"
                    " (SELECT id FROM responses ORDER BY created_at, id LIMIT ?)",
                    count - keep,
                )
            return removed

        return await self._write(work)
