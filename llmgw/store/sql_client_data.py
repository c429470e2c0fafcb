"""What clients keep with the gateway: the shared SQL both backends use.

Projects' switches, threads and memory notes here; files and batches in
:mod:`llmgw.store.sql_files_batches`, which this class takes in (see
:mod:`llmgw.store.client_data` for the records and the limits). Every
look-up names its project or owner: a thread id, a note's key or a file id
alone reaches nothing of another project.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Any

from . import validate as v
from .client_data import (
    ANONYMOUS_OWNER,
    DEFAULT_THREAD_RETENTION,
    MAX_AGENT_CHARS,
    MAX_NOTE_KEY_BYTES,
    MAX_NOTE_TAGS,
    MAX_NOTE_TEXT_BYTES,
    MAX_NOTES_PER_AGENT,
    MAX_TAG_CHARS,
    MAX_THREAD_ID,
    MAX_THREAD_TURNS,
    MemoryNote,
    SERVER_QUOTA,
    ProjectFeatures,
    ThreadTurn,
)
from .errors import Conflict, Invalid
from .sql_files_batches import SQLFilesBatches
from .sqlbase import Tx, from_json, qmarks

FEATURE_COLS = ("project_id, threads, thread_retention_s, memory, cache, cache_ttl_s, updated_at, actor,"
                " storage_quota_bytes, strict_max_tokens")
NOTE_COLS = "project_id, agent, key, text, tags, created_at, updated_at"

#: Thread ids and agent names: letters, digits and - _ . :
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:\-]+")
_TAG = re.compile(r"[a-z0-9_-]+")


def check_thread_id(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_THREAD_ID or not _PLAIN_ID.fullmatch(value):
        raise Invalid(f"thread id: {str(value)[:40]!r} is not 1 to {MAX_THREAD_ID} letters, digits, '-', '_', '.' or ':'")
    return value


def check_agent(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_AGENT_CHARS or not _PLAIN_ID.fullmatch(value):
        raise Invalid(f"agent: {str(value)[:40]!r} is not 1 to {MAX_AGENT_CHARS} letters, digits, '-', '_', '.' or ':'")
    return value


def check_note_key(value: Any) -> str:
    if isinstance(value, str) and len(value.encode()) > MAX_NOTE_KEY_BYTES:
        raise Invalid(f"note key: at most {MAX_NOTE_KEY_BYTES} bytes, got {len(value.encode())}")
    key = v.check_text(value, "note key", max_len=MAX_NOTE_KEY_BYTES)
    if "/" in key:
        raise Invalid(f"note key: {key[:40]!r} must not contain '/'")
    return key


def check_note_text(value: Any) -> str:
    if not isinstance(value, str):
        raise Invalid(f"note text: expected text, got {type(value).__name__}")
    if not value.strip():
        raise Invalid("note text: must not be empty")
    size = len(value.encode())
    if size > MAX_NOTE_TEXT_BYTES:
        raise Invalid(f"note text: at most {MAX_NOTE_TEXT_BYTES} bytes (16 KiB), got {size}")
    return value


def check_tag(value: Any) -> str:
    if not isinstance(value, str) or not _TAG.fullmatch(value) or len(value) > MAX_TAG_CHARS:
        raise Invalid(f"tag: {str(value)[:40]!r} is not 1 to {MAX_TAG_CHARS} lower-case letters, digits, '-' or '_'")
    return value


def check_tags(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise Invalid(f"tags: expected a list of tags, got {type(value).__name__}")
    tags = tuple(dict.fromkeys(check_tag(t) for t in value))
    if len(tags) > MAX_NOTE_TAGS:
        raise Invalid(f"tags: at most {MAX_NOTE_TAGS}, got {len(tags)}")
    return tags


def _seconds(value: Any, what: str) -> int:
    if not isinstance(value, dt.timedelta):
        raise Invalid(f"{what}: expected a timedelta, got {type(value).__name__}")
    seconds = int(value.total_seconds())
    if seconds < 1:
        raise Invalid(f"{what}: must be at least one second, got {value.total_seconds()}s")
    return seconds


def _like(text: str) -> str:
    """Text to find anywhere, as a LIKE pattern (with ESCAPE '\\')."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _search_text(key: str, text: str) -> str:
    return f"{key}\n{text}".lower()


class SQLClientData(SQLFilesBatches):
    # ---- records -----------------------------------------------------------

    def _features(self, r: Any) -> ProjectFeatures:
        return ProjectFeatures(
            project_id=r["project_id"], threads=bool(r["threads"]),
            thread_retention=dt.timedelta(seconds=r["thread_retention_s"]), memory=bool(r["memory"]),
            cache=bool(r["cache"]), cache_ttl=dt.timedelta(seconds=r["cache_ttl_s"]),
            storage_quota_bytes=r["storage_quota_bytes"], strict_max_tokens=bool(r["strict_max_tokens"]),
            updated_at=self._dt(r["updated_at"]), actor=r["actor"],
        )

    def _note(self, r: Any) -> MemoryNote:
        return MemoryNote(
            project_id=r["project_id"], agent=r["agent"], key=r["key"], text=r["text"],
            tags=tuple(from_json(r["tags"]) or ()), created_at=self._dt(r["created_at"]),
            updated_at=self._dt(r["updated_at"]),
        )

    # ---- what a project keeps, for its storage quota ----------------------

    async def storage_used(self, owner: str) -> int:
        owner = v.check_text(owner, "owner", max_len=200)

        async def work(tx: Tx) -> int:
            total = 0
            # Responses made without keys are kept under the scope "": they are the anonymous owner's.
            scopes = [owner, ""] if owner == ANONYMOUS_OWNER else [owner]
            for sql, args in (
                ("SELECT COALESCE(SUM(bytes), 0) FROM files WHERE owner = ?", [owner]),
                ("SELECT COALESCE(SUM(LENGTH(r.text)), 0) FROM batch_results r JOIN batches b ON b.id = r.batch_id"
                 " WHERE b.owner = ?", [owner]),
                ("SELECT COALESCE(SUM(LENGTH(messages)), 0) FROM thread_turns WHERE project_id = ?", [owner]),
                ("SELECT COALESCE(SUM(LENGTH(text) + LENGTH(tags)), 0) FROM memory_notes WHERE project_id = ?",
                 [owner]),
                # A personal key's files are its person's (owner_of) while its answers are kept under the
                # key (scope_of): a person's storage counts the answers of every personal key of theirs.
                ("SELECT COALESCE(SUM(LENGTH(messages) + LENGTH(response)), 0) FROM responses"
                 f" WHERE scope IN ({qmarks(len(scopes))})"
                 " OR scope IN (SELECT id FROM api_keys WHERE user_id = ? AND project_id IS NULL)", [*scopes, owner]),
            ):
                total += int(await tx.fetchval(sql, *args) or 0)
            return total

        return await self._read(work)

    # ---- projects' switches ------------------------------------------------

    async def get_project_features(self, project_id: str) -> ProjectFeatures:
        project_id = v.check_id(project_id, "project id")

        async def work(tx: Tx) -> Any:
            return await tx.fetchrow(f"SELECT {FEATURE_COLS} FROM project_features WHERE project_id = ?", project_id)

        r = await self._read(work)
        return ProjectFeatures(project_id=project_id) if r is None else self._features(r)

    async def list_project_features(self) -> list[ProjectFeatures]:
        rows = await self._all(f"SELECT {FEATURE_COLS} FROM project_features ORDER BY project_id")
        return [self._features(r) for r in rows]

    async def set_project_features(
        self,
        project_id: str,
        *,
        actor: str,
        threads: bool | None = None,
        thread_retention: dt.timedelta | None = None,
        memory: bool | None = None,
        cache: bool | None = None,
        cache_ttl: dt.timedelta | None = None,
        storage_quota_bytes: int | None = None,
        strict_max_tokens: bool | None = None,
    ) -> ProjectFeatures:
        project_id = v.check_id(project_id, "project id")
        if storage_quota_bytes is not None and (isinstance(storage_quota_bytes, bool)
                                                or not isinstance(storage_quota_bytes, int)
                                                or storage_quota_bytes < SERVER_QUOTA):
            raise Invalid(f"storage quota: expected a number of bytes (0: no limit), got {storage_quota_bytes!r}")
        actor = v.check_text(actor, "actor")
        for name, flag in (("threads", threads), ("memory", memory), ("cache", cache),
                           ("strict_max_tokens", strict_max_tokens)):
            if flag is not None and not isinstance(flag, bool):
                raise Invalid(f"{name}: expected true or false, got {flag!r}")
        retention_s = None if thread_retention is None else _seconds(thread_retention, "thread retention")
        ttl_s = None if cache_ttl is None else _seconds(cache_ttl, "cache ttl")
        now = self._now()

        async def work(tx: Tx) -> ProjectFeatures:
            await self._must_exist(tx, "project", project_id)
            r = await tx.fetchrow(f"SELECT {FEATURE_COLS} FROM project_features WHERE project_id = ?", project_id)
            old = ProjectFeatures(project_id=project_id) if r is None else self._features(r)
            new = ProjectFeatures(
                project_id=project_id,
                threads=old.threads if threads is None else threads,
                thread_retention=old.thread_retention if retention_s is None else dt.timedelta(seconds=retention_s),
                memory=old.memory if memory is None else memory,
                cache=old.cache if cache is None else cache,
                cache_ttl=old.cache_ttl if ttl_s is None else dt.timedelta(seconds=ttl_s),
                storage_quota_bytes=(old.storage_quota_bytes if storage_quota_bytes is None
                                     else None if storage_quota_bytes == SERVER_QUOTA else storage_quota_bytes),
                strict_max_tokens=old.strict_max_tokens if strict_max_tokens is None else strict_max_tokens,
                updated_at=now, actor=actor,
            )
            await tx.execute(
                f"INSERT INTO project_features ({FEATURE_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (project_id) DO UPDATE SET threads = excluded.threads,"
                " thread_retention_s = excluded.thread_retention_s, memory = excluded.memory,"
                " cache = excluded.cache, cache_ttl_s = excluded.cache_ttl_s,"
                " updated_at = excluded.updated_at, actor = excluded.actor,"
                " storage_quota_bytes = excluded.storage_quota_bytes, strict_max_tokens = excluded.strict_max_tokens",
                project_id, new.threads, int(new.thread_retention.total_seconds()), new.memory, new.cache,
                int(new.cache_ttl.total_seconds()), self._t(now), actor, new.storage_quota_bytes,
                new.strict_max_tokens,
            )
            return new

        return await self._write(work)

    # ---- threads -------------------------------------------------------------

    async def get_thread_turns(self, project_id: str, thread_id: str) -> list[ThreadTurn]:
        project_id = v.check_id(project_id, "project id")
        thread_id = check_thread_id(thread_id)
        now = self._t(self._now())

        async def work(tx: Tx) -> list[Any]:
            live = await tx.fetchval(
                "SELECT 1 FROM threads WHERE project_id = ? AND thread_id = ? AND expires_at > ?",
                project_id, thread_id, now,
            )
            if not live:
                return []
            return list(await tx.fetch(
                "SELECT seq, messages, tokens, created_at FROM thread_turns"
                " WHERE project_id = ? AND thread_id = ? ORDER BY seq", project_id, thread_id,
            ))

        return [
            ThreadTurn(seq=r["seq"], messages=tuple(from_json(r["messages"])), tokens=r["tokens"],
                       created_at=self._dt(r["created_at"]))
            for r in await self._read(work)
        ]

    async def append_thread_turn(
        self,
        project_id: str,
        thread_id: str,
        messages: Sequence[dict[str, Any]],
        *,
        tokens: int,
        retention: dt.timedelta = DEFAULT_THREAD_RETENTION,
        keep_turns: int = MAX_THREAD_TURNS,
        user_id: str | None = None,
    ) -> ThreadTurn:
        project_id = v.check_id(project_id, "project id")
        user_id = v.check_opt_id(user_id, "user_id")
        thread_id = check_thread_id(thread_id)
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
            raise Invalid("messages: expected a list of chat messages")
        if not all(isinstance(m, dict) for m in messages):
            raise Invalid("messages: every message must be a mapping")
        text = v.to_json(list(messages), "messages")
        tokens = v.check_int(tokens, "tokens")
        retention_s = _seconds(retention, "retention")
        keep = v.check_int(keep_turns, "keep_turns", minimum=1)
        now = self._now()
        t_now = self._t(now)
        t_expires = self._t(now + dt.timedelta(seconds=retention_s))

        async def work(tx: Tx) -> ThreadTurn:
            # A thread past its retention that the janitor has not removed yet starts again.
            lapsed = await tx.fetchval(
                "SELECT 1 FROM threads WHERE project_id = ? AND thread_id = ? AND expires_at <= ?",
                project_id, thread_id, t_now,
            )
            if lapsed:
                await self._drop_thread(tx, project_id, thread_id)
            # The upsert locks the thread's row, so two appends to one thread take turns.
            await tx.execute(
                "INSERT INTO threads (project_id, thread_id, created_at, updated_at, expires_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (project_id, thread_id) DO UPDATE SET"
                " updated_at = excluded.updated_at, expires_at = excluded.expires_at",
                project_id, thread_id, t_now, t_now, t_expires,
            )
            last = await tx.fetchval(
                "SELECT MAX(seq) FROM thread_turns WHERE project_id = ? AND thread_id = ?", project_id, thread_id,
            )
            seq = int(last or 0) + 1
            await tx.execute(
                "INSERT INTO thread_turns (project_id, thread_id, seq, messages, tokens, created_at, user_id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)", project_id, thread_id, seq, text, tokens, t_now, user_id,
            )
            await tx.execute(
                "DELETE FROM thread_turns WHERE project_id = ? AND thread_id = ? AND seq <= ?",
                project_id, thread_id, seq - keep,
            )
            return ThreadTurn(seq=seq, messages=tuple(from_json(text)), tokens=tokens, created_at=now)

        return await self._write(work)

    async def _drop_thread(self, tx: Tx, project_id: str, thread_id: str) -> int:
        await tx.execute("DELETE FROM thread_turns WHERE project_id = ? AND thread_id = ?", project_id, thread_id)
        return await tx.execute("DELETE FROM threads WHERE project_id = ? AND thread_id = ?", project_id, thread_id)

    async def delete_thread(self, project_id: str, thread_id: str) -> bool:
        project_id = v.check_id(project_id, "project id")
        thread_id = check_thread_id(thread_id)

        async def work(tx: Tx) -> bool:
            return bool(await self._drop_thread(tx, project_id, thread_id))

        return await self._write(work)

    async def delete_expired_threads(self) -> int:
        now = self._t(self._now())

        async def work(tx: Tx) -> int:
            gone = await tx.fetch("SELECT project_id, thread_id FROM threads WHERE expires_at <= ?", now)
            for r in gone:
                await self._drop_thread(tx, r["project_id"], r["thread_id"])
            return len(gone)

        return await self._write(work)

    # ---- memory notes ----------------------------------------------------------

    async def put_memory_note(
        self,
        project_id: str,
        agent: str,
        key: str,
        text: str,
        tags: Sequence[str] = (),
        *,
        max_notes: int = MAX_NOTES_PER_AGENT,
        user_id: str | None = None,
    ) -> tuple[MemoryNote, bool]:
        """Keep a note (replacing the one under the same key); True when it is new. ``user_id``: who wrote
        it (the last writer), so forgetting them deletes it."""
        project_id = v.check_id(project_id, "project id")
        user_id = v.check_opt_id(user_id, "user_id")
        agent = check_agent(agent)
        key = check_note_key(key)
        text = check_note_text(text)
        tags = check_tags(tags)
        max_notes = v.check_int(max_notes, "max_notes", minimum=1)
        now = self._now()
        t_now = self._t(now)

        async def work(tx: Tx) -> tuple[MemoryNote, bool]:
            r = await tx.fetchrow(
                "SELECT created_at FROM memory_notes WHERE project_id = ? AND agent = ? AND key = ?",
                project_id, agent, key,
            )
            if r is None:
                count = await tx.fetchval(
                    "SELECT COUNT(*) FROM memory_notes WHERE project_id = ? AND agent = ?", project_id, agent,
                )
                if int(count) >= max_notes:
                    raise Conflict(
                        f"agent {agent!r} already keeps {count} notes, the most it may; forget some first"
                    )
                await tx.execute(
                    f"INSERT INTO memory_notes ({NOTE_COLS}, search, user_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    project_id, agent, key, text, v.to_json(list(tags), "tags"), t_now, t_now,
                    _search_text(key, text), user_id,
                )
                created = now
            else:
                await tx.execute(
                    "UPDATE memory_notes SET text = ?, tags = ?, search = ?, updated_at = ?, user_id = ?"
                    " WHERE project_id = ? AND agent = ? AND key = ?",
                    text, v.to_json(list(tags), "tags"), _search_text(key, text), t_now, user_id, project_id, agent,
                    key,
                )
                created = self._dt(r["created_at"])
            note = MemoryNote(project_id=project_id, agent=agent, key=key, text=text, tags=tags,
                              created_at=created, updated_at=now)
            return note, r is None

        return await self._write(work)

    async def get_memory_note(self, project_id: str, agent: str, key: str) -> MemoryNote | None:
        project_id = v.check_id(project_id, "project id")
        agent = check_agent(agent)
        key = check_note_key(key)
        r = await self._one(
            f"SELECT {NOTE_COLS} FROM memory_notes WHERE project_id = ? AND agent = ? AND key = ?",
            project_id, agent, key,
        )
        return None if r is None else self._note(r)

    async def delete_memory_note(self, project_id: str, agent: str, key: str) -> bool:
        project_id = v.check_id(project_id, "project id")
        agent = check_agent(agent)
        key = check_note_key(key)

        async def work(tx: Tx) -> bool:
            return bool(await tx.execute(
                "DELETE FROM memory_notes WHERE project_id = ? AND agent = ? AND key = ?", project_id, agent, key,
            ))

        return await self._write(work)

    async def search_memory_notes(
        self,
        project_id: str,
        agent: str,
        *,
        text: str | None = None,
        tag: str | None = None,
        limit: int = 100,
    ) -> list[MemoryNote]:
        """Notes whose key or text holds ``text`` (any case) and that carry ``tag``, newest first."""
        project_id = v.check_id(project_id, "project id")
        agent = check_agent(agent)
        where = ["project_id = ?", "agent = ?"]
        args: list[Any] = [project_id, agent]
        if text:
            where.append("search LIKE ? ESCAPE '\\'")
            args.append(_like(v.check_text(text, "search text", max_len=1000).lower()))
        if tag is not None:
            where.append("tags LIKE ? ESCAPE '\\'")
            args.append(_like(f'"{check_tag(tag)}"'))
        args.append(v.check_limit(limit))
        rows = await self._all(
            f"SELECT {NOTE_COLS} FROM memory_notes WHERE {' AND '.join(where)}"
            " ORDER BY updated_at DESC, key LIMIT ?", *args,
        )
        return [self._note(r) for r in rows]
