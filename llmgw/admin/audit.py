"""Recording changes made through the admin API in the store's audit log.

Every change (POST, PUT, PATCH, DELETE) that passed the token check is
recorded once, with who (the actor), through what (`api`, `ctl`, `console`,
`portal` or `cli`, from X-Llmgw-Via), the fields given with anything secret
taken out, and how it ended: `ok`, or `refused` with the reason and status.

Tenancy writes its own events (users.create, keys.revoke, ...); through the
API it is handed an `AuditedStore`, which adds the same `via`, `fields` and
`outcome` to those, so a change is still one event.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from llmgw.store import AuditEvent, Store

log = logging.getLogger("llmgw.admin")

VIAS = ("api", "ctl", "console", "portal", "cli")
REMOVED = "[removed]"
_SECRET_KEY = re.compile(r"secret|password|passwd|token|api_?key|private|credential|authorization", re.IGNORECASE)
_MAX_TEXT = 1000
_MAX_ITEMS = 100
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")


def _printable(text: str) -> str:
    """A target as the store keeps it: a control character a request put in a path is written as \\xNN."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


__all__ = ["REMOVED", "VIAS", "AuditedStore", "record", "redact", "split_detail"]


def redact(value: Any, depth: int = 0) -> Any:
    """`value` with every field named like a secret replaced, long text cut and long lists shortened."""
    if depth > 8:
        return "…"
    if isinstance(value, Mapping):
        return {
            str(k): (REMOVED if _SECRET_KEY.search(str(k)) and v not in (None, "") else redact(v, depth + 1))
            for k, v in list(value.items())[:_MAX_ITEMS]
        }
    if isinstance(value, (list, tuple)):
        items = [redact(v, depth + 1) for v in value[:_MAX_ITEMS]]
        return items + (["…"] if len(value) > _MAX_ITEMS else [])
    if isinstance(value, str) and len(value) > _MAX_TEXT:
        return value[:_MAX_TEXT] + "…"
    return value


async def record(
    store: Store,
    *,
    actor: str,
    via: str,
    action: str,
    target: str,
    fields: Mapping[str, Any] | None,
    outcome: str,
    reason: str | None = None,
    status: int | None = None,
) -> AuditEvent | None:
    """Append one event; a failure to write it is logged, never raised (the change has happened), and the
    event is kept in the audit journal beside the store, written with the next event the store takes."""
    detail: dict[str, Any] = {"via": via, "outcome": outcome, "fields": redact(dict(fields or {}))}
    if reason is not None:
        detail["reason"] = reason[:_MAX_TEXT]
    if status is not None:
        detail["status"] = status
    from llmgw.admin import audit_journal

    await audit_journal.replay(store)
    try:
        return await store.append_audit(actor, action, _printable(target)[:500], detail)
    except Exception as exc:  # noqa: BLE001 - the audit must not turn a done change into an error
        kept = audit_journal.keep(store, actor, action, _printable(target)[:500], detail)
        log.error("audit event not written to the store%s: %s", "; kept in the audit journal" if kept else "", exc,
                  extra={"fields": {"action": action, "target": target}})
        return None


class AuditedStore:
    """A store whose audit events carry the request's `via`, `fields` and outcome `ok`."""

    def __init__(self, store: Store, *, via: str, fields: Mapping[str, Any] | None) -> None:
        self._store = store
        self._via = via
        self._fields = redact(dict(fields or {}))
        #: events written through this store (0: the caller records the change itself)
        self.written = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def append_audit(
        self, actor: str, action: str, target: str, detail: Mapping[str, Any] | None = None
    ) -> AuditEvent:
        from llmgw.admin import audit_journal

        merged = {**redact(dict(detail or {})), "via": self._via, "outcome": "ok", "fields": self._fields}
        await audit_journal.replay(self._store)  # events kept while the store refused them go first
        event = await self._store.append_audit(actor, action, target, merged)
        self.written += 1
        return event


def split_detail(detail: Mapping[str, Any] | None) -> tuple[str | None, str | None, str | None, dict | None]:
    """(via, outcome, reason, the rest) of an event's detail."""
    if not detail:
        return None, None, None, None
    rest = dict(detail)
    via = rest.pop("via", None)
    outcome = rest.pop("outcome", None)
    reason = rest.pop("reason", None)
    return (via if isinstance(via, str) else None, outcome if isinstance(outcome, str) else None,
            reason if isinstance(reason, str) else None, rest or None)
