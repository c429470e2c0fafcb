"""Kept requests (`llmgw keys requests`): the rules saying whose requests are kept, and the requests kept.

A rule is a key's or a project's: keep each request for `keep_seconds`.
Nothing is kept without one. A kept request is the body the model was sent
(after the guardrails' redaction, with a thread's stored turns in it) and
the answer the client got, with what its usage row says of it (model,
status, tokens); the gateway (:mod:`llmgw.router.kept_requests`) decides
what goes in. Rows are deleted when they expire (`delete_expired_kept_requests`,
the gateway's sweep) and with their person (`forget_user`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import attrs

from . import validate as v
from .errors import Invalid
from .sqlbase import SQLStoreBase, Tx, from_json

#: The scopes a rule is set on.
RULE_KINDS = ("key", "project")
#: The longest a request may be kept: a year.
MAX_KEEP = dt.timedelta(days=366)

_COLS = ("id, at, expires_at, key_id, project_id, org_id, user_id, endpoint, kind, model, model_served, status, "
         "outcome, streamed, prompt_tokens, completion_tokens, guard_action, request, answer")


@attrs.frozen(kw_only=True)
class KeepRule:
    """A key's or a project's ask to keep its requests."""

    scope_kind: str
    scope_id: str
    keep: dt.timedelta
    updated_at: dt.datetime
    updated_by: str = ""


@attrs.frozen(kw_only=True)
class KeptRequest:
    """One request kept: what the model was sent and what the client got."""

    id: str
    at: dt.datetime
    expires_at: dt.datetime
    key_id: str
    project_id: str | None
    org_id: str | None
    user_id: str | None
    endpoint: str
    kind: str
    model: str
    model_served: str
    status: int
    outcome: str
    streamed: bool
    prompt_tokens: int
    completion_tokens: int
    guard_action: str | None
    request: dict[str, Any]
    answer: dict[str, Any] | None


def check_keep(keep: Any) -> dt.timedelta:
    if not isinstance(keep, dt.timedelta) or keep.total_seconds() < 1:
        raise Invalid(f"keep: expected a duration of at least 1s, got {keep!r}")
    if keep > MAX_KEEP:
        raise Invalid(f"keep: at most {MAX_KEEP.days} days, got {keep.days} days")
    return keep


class SQLKept(SQLStoreBase):
    # ---- the rules -----------------------------------------------------------

    async def set_keep_rule(self, scope_kind: str, scope_id: str, keep: dt.timedelta | None, *,
                            actor: str = "") -> KeepRule | None:
        """Keep the scope's requests for `keep` (None: stop keeping them; what is kept ages out)."""
        kind = _check_kind(scope_kind)
        scope_id = v.check_id(scope_id, "scope_id")
        keep = None if keep is None else check_keep(keep)
        actor = v.check_text(actor, "actor", max_len=1000, allow_empty=True)
        now = self._now()

        async def work(tx: Tx) -> None:
            await tx.execute("DELETE FROM kept_request_rules WHERE scope_kind = ? AND scope_id = ?", kind, scope_id)
            if keep is not None:
                await tx.execute(
                    "INSERT INTO kept_request_rules (scope_kind, scope_id, keep_seconds, updated_at, updated_by)"
                    " VALUES (?, ?, ?, ?, ?)", kind, scope_id, int(keep.total_seconds()), self._t(now), actor)

        await self._write(work)
        if keep is None:
            return None
        return KeepRule(scope_kind=kind, scope_id=scope_id, keep=keep, updated_at=now, updated_by=actor)

    async def get_keep_rule(self, scope_kind: str, scope_id: str) -> KeepRule | None:
        kind = _check_kind(scope_kind)
        scope_id = v.check_id(scope_id, "scope_id")

        async def work(tx: Tx) -> Any:
            return await tx.fetchrow(
                "SELECT scope_kind, scope_id, keep_seconds, updated_at, updated_by FROM kept_request_rules"
                " WHERE scope_kind = ? AND scope_id = ?", kind, scope_id)

        row = await self._read(work)
        return None if row is None else self._keep_rule(row)

    async def keep_rules_of(self, key_id: str, project_id: str | None) -> dict[str, KeepRule]:
        """The rules that bear on a key: {"key": …, "project": …}, those set."""
        key_id = v.check_text(key_id, "key_id", max_len=v.MAX_ID, allow_empty=True)

        async def work(tx: Tx) -> Any:
            return await tx.fetch(
                "SELECT scope_kind, scope_id, keep_seconds, updated_at, updated_by FROM kept_request_rules"
                " WHERE (scope_kind = 'key' AND scope_id = ?) OR (scope_kind = 'project' AND scope_id = ?)",
                key_id, project_id or "")

        return {r["scope_kind"]: self._keep_rule(r) for r in await self._read(work)}

    def _keep_rule(self, r: Any) -> KeepRule:
        return KeepRule(scope_kind=r["scope_kind"], scope_id=r["scope_id"],
                        keep=dt.timedelta(seconds=int(r["keep_seconds"])),
                        updated_at=self._dt(r["updated_at"]), updated_by=r["updated_by"] or "")

    # ---- the requests ----------------------------------------------------------

    async def put_kept_request(self, *, id: str, at: dt.datetime, keep: dt.timedelta, key_id: str,
                               project_id: str | None, org_id: str | None, user_id: str | None, endpoint: str,
                               kind: str, model: str, model_served: str, status: int, outcome: str,
                               streamed: bool, prompt_tokens: int, completion_tokens: int,
                               guard_action: str | None, request: Mapping[str, Any],
                               answer: Mapping[str, Any] | None) -> KeptRequest:
        request_id = v.check_id(id, "id")
        keep = check_keep(keep)
        if not isinstance(request, Mapping):
            raise Invalid(f"request: expected a JSON object, got {type(request).__name__}")
        request_text = v.to_json(dict(request), f"kept request {request_id}")
        answer_text = None if answer is None else v.to_json(dict(answer), f"kept request {request_id} answer")
        expires = at + keep
        values = (request_id, self._t(at), self._t(expires), key_id or "", project_id, org_id, user_id,
                  v.check_text(endpoint, "endpoint", max_len=1000), v.check_text(kind, "kind", max_len=32),
                  v.check_text(model, "model", max_len=1000),
                  v.check_text(model_served, "model_served", max_len=1000, allow_empty=True),
                  int(status), outcome, bool(streamed), max(0, int(prompt_tokens)), max(0, int(completion_tokens)),
                  guard_action or None, request_text, answer_text)

        async def work(tx: Tx) -> None:
            await tx.execute("DELETE FROM kept_requests WHERE id = ?", request_id)
            await tx.execute(f"INSERT INTO kept_requests ({_COLS}) VALUES ({', '.join('?' * len(values))})",
                             *values)

        await self._write(work)
        return KeptRequest(id=request_id, at=at, expires_at=expires, key_id=key_id or "", project_id=project_id,
                           org_id=org_id, user_id=user_id, endpoint=endpoint, kind=kind, model=model,
                           model_served=model_served, status=int(status), outcome=outcome, streamed=bool(streamed),
                           prompt_tokens=max(0, int(prompt_tokens)), completion_tokens=max(0, int(completion_tokens)),
                           guard_action=guard_action or None, request=from_json(request_text),
                           answer=None if answer_text is None else from_json(answer_text))

    async def get_kept_request(self, request_id: str) -> KeptRequest | None:
        """A kept request not yet expired; None when there is none."""
        request_id = v.check_text(request_id, "id", max_len=v.MAX_ID)
        now = self._t(self._now())

        async def work(tx: Tx) -> Any:
            return await tx.fetchrow(f"SELECT {_COLS} FROM kept_requests WHERE id = ? AND expires_at > ?",
                                     request_id, now)

        row = await self._read(work)
        return None if row is None else self._kept_row(row)

    async def list_kept_requests(self, *, key_id: str | None = None, project_id: str | None = None,
                                 since: dt.datetime | None = None, limit: int = 100) -> list[KeptRequest]:
        """Kept requests not yet expired, newest first: a key's, a project's, or every one."""
        limit = v.check_int(limit, "limit", minimum=1)
        cond, args = ["expires_at > ?"], [self._t(self._now())]
        if key_id:
            cond.append("key_id = ?")
            args.append(key_id)
        if project_id:
            cond.append("project_id = ?")
            args.append(project_id)
        if since is not None:
            cond.append("at >= ?")
            args.append(self._t(since))

        async def work(tx: Tx) -> Any:
            return await tx.fetch(f"SELECT {_COLS} FROM kept_requests WHERE {' AND '.join(cond)}"
                                  " ORDER BY at DESC, id DESC LIMIT ?", *args, limit)

        return [self._kept_row(r) for r in await self._read(work)]

    async def delete_expired_kept_requests(self) -> int:
        """Remove the kept requests whose time is up; how many."""
        now = self._t(self._now())

        async def work(tx: Tx) -> int:
            return await tx.execute("DELETE FROM kept_requests WHERE expires_at <= ?", now)

        return await self._write(work)

    async def _forget_kept_requests(self, tx: Tx, user_id: str, key_ids: list[str]) -> int:
        """forget_user's part: the kept requests of a person and of their keys, and their keys' rules."""
        gone = await tx.execute("DELETE FROM kept_requests WHERE user_id = ?", user_id)
        for key_id in key_ids:
            gone += await tx.execute("DELETE FROM kept_requests WHERE key_id = ?", key_id)
            await tx.execute("DELETE FROM kept_request_rules WHERE scope_kind = 'key' AND scope_id = ?", key_id)
        return gone

    def _kept_row(self, r: Any) -> KeptRequest:
        return KeptRequest(
            id=r["id"], at=self._dt(r["at"]), expires_at=self._dt(r["expires_at"]), key_id=r["key_id"] or "",
            project_id=r["project_id"], org_id=r["org_id"], user_id=r["user_id"], endpoint=r["endpoint"],
            kind=r["kind"], model=r["model"], model_served=r["model_served"] or "", status=int(r["status"]),
            outcome=r["outcome"], streamed=bool(r["streamed"]), prompt_tokens=int(r["prompt_tokens"]),
            completion_tokens=int(r["completion_tokens"]), guard_action=r["guard_action"],
            request=from_json(r["request"]), answer=None if r["answer"] is None else from_json(r["answer"]))


def _check_kind(kind: Any) -> str:
    if kind not in RULE_KINDS:
        raise Invalid(f"scope: requests are kept for a key or a project, not {kind!r}")
    return kind


__all__ = ["KeepRule", "KeptRequest", "MAX_KEEP", "RULE_KINDS", "SQLKept", "check_keep"]
