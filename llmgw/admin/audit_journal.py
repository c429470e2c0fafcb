"""Audit events the store could not take, kept in a journal beside it
(``audit-journal.jsonl`` in the server's state folder, the same format as
the usage journal: llmgw.accounting.journal) and written to the store with
the next event it takes, in the order they happened.

An event written from the journal carries ``journaled_at`` (when it was
kept) in its detail; the store stamps it with the time it is written.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
from collections.abc import Mapping
from typing import Any

from llmgw.accounting.journal import Journal

log = logging.getLogger("llmgw.admin")

JOURNAL_NAME = "audit-journal.jsonl"
_journals: dict[str, Journal] = {}
_pending: dict[str, list[dict[str, Any]]] = {}


def journal_dir(store: Any) -> str | None:
    """The state folder of a store: a SQLite file's folder, or /var/lib/llmgw with PostgreSQL."""
    from llmgw.store.state_dir import state_dir_of

    return state_dir_of(store)


def _journal(folder: str) -> Journal:
    journal = _journals.get(folder)
    if journal is None:
        journal = Journal(os.path.join(folder, JOURNAL_NAME), reserve=1 << 20)
        _pending[folder] = list(journal.open())
        _journals[folder] = journal
    return journal


def prepare(store: Any) -> None:
    """Open the journal of a store's folder (reserving its room) ahead of need; a failure is logged only."""
    folder = journal_dir(store)
    if folder is None:
        return
    try:
        _journal(folder)
    except OSError as exc:
        log.warning("the audit journal cannot be opened: %s", exc, extra={"fields": {"folder": folder}})


def keep(store: Any, actor: str, action: str, target: str, detail: Mapping[str, Any]) -> bool:
    """Journal an event the store refused; False when there is no journal or it refuses too."""
    folder = journal_dir(store)
    if folder is None:
        return False
    entry = {"actor": actor, "action": action, "target": target,
             "detail": {**detail, "journaled_at": dt.datetime.now(dt.UTC).isoformat()}}
    try:
        _journal(folder).append([entry])
    except (OSError, ValueError) as exc:
        log.error("audit event not journaled either: %s", exc, extra={"fields": {"action": action}})
        return False
    _pending[folder].append(entry)
    return True


async def replay(store: Any) -> int:
    """Write the journaled events to the store (oldest first), then empty the journal; returns how many.
    Stops at the first the store refuses (they stay journaled)."""
    folder = journal_dir(store)
    if folder is None or (folder not in _journals and not os.path.exists(os.path.join(folder, JOURNAL_NAME))):
        return 0
    try:
        journal = _journal(folder)
    except OSError:
        return 0
    pending = _pending.get(folder) or []
    done = 0
    while done < len(pending):
        e = pending[done]
        try:
            await store.append_audit(e["actor"], e["action"], e["target"], e["detail"])
        except Exception as exc:  # noqa: BLE001 - the store still fails: keep them for the next time
            log.debug("journaled audit events not written yet: %s", exc)
            break
        done += 1
    if done == 0:
        return 0
    rest = pending[done:]
    _pending[folder] = []
    try:
        await asyncio.to_thread(journal.clear)
        if rest:
            journal.append(rest)
        _pending[folder] = list(rest)
    except OSError as exc:  # the events are in the store; the next replay may write some of them again
        _pending[folder] = list(rest)
        log.warning("could not empty the audit journal: %s", exc)
    log.info("journaled audit events written to the store", extra={"fields": {"events": done}})
    return done
