"""What clients keep with the gateway: the shared SQL both backends use.

Projects' switches, threads, memory notes, files and batches (see
:mod:`llmgw.store.client_data` for the records and the limits). Every
look-up names its project or owner: a thread id, a note's key or a file id
alone reaches nothing of another project.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
from collections.abc import Sequence
from typing import Any

from . import validate as v
from .client_data import (
    BATCH_OPEN,
    BATCH_STATUS_TIMES,
    BATCH_STATUSES,
    DEFAULT_CACHE_TTL,
    DEFAULT_THREAD_RETENTION,
    FILE_PURPOSES,
    MAX_AGENT_CHARS,
    MAX_NOTE_KEY_BYTES,
    MAX_NOTE_TAGS,
    MAX_NOTE_TEXT_BYTES,
    MAX_NOTES_PER_AGENT,
    MAX_TAG_CHARS,
    MAX_THREAD_ID,
    MAX_THREAD_TURNS,
    Batch,
    BatchResult,
    MemoryNote,
    ProjectFeatures,
    StoredFile,
    ThreadTurn,
)
from .errors import Conflict, Invalid, NotFound
from .sqlbase import SQLStoreBase, Tx, from_json, new_id, qmarks

FEATURE_COLS = "project_id, threads, thread_retention_s, memory, cache, cache_ttl_s, updated_at, actor"
NOTE_COLS = "project_id, agent, key, text, tags, created_at, updated_at"
FILE_COLS = "id, owner, purpose, filename, bytes, created_at, expires_at"
BATCH_COLS = (
    "id, owner, key_id, principal, endpoint, completion_window, input_file_id, output_file_id, error_file_id, "
    "status, total, completed, failed, errors, metadata, created_at, expires_at, in_progress_at, finalizing_at, "
    "completed_at, failed_at, expired_at, cancelling_at, cancelled_at"
)

#: Thread ids and agent names: letters, digits and - _ . :
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:\-]+")
_TAG = re.compile(r"[a-z0-9_-]+")
_MAX_FILENAME = 255
_MAX_LINE_TEXT = 64 * 1024 * 1024


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


def _check_owner(value: Any) -> str:
    return v.check_id(value, "owner")


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


def new_file_id() -> str:
    return new_id("file")


def new_batch_id() -> str:
    return "batch_" + secrets.token_hex(12)


class SQLClientData(SQLStoreBase):
    # ---- records -----------------------------------------------------------

    def _features(self, r: Any) -> ProjectFeatures:
        return ProjectFeatures(
            project_id=r["project_id"], threads=bool(r["threads"]),
            thread_retention=dt.timedelta(seconds=r["thread_retention_s"]), memory=bool(r["memory"]),
            cache=bool(r["cache"]), cache_ttl=dt.timedelta(seconds=r["cache_ttl_s"]),
            updated_at=self._dt(r["updated_at"]), actor=r["actor"],
        )

    def _note(self, r: Any) -> MemoryNote:
        return MemoryNote(
            project_id=r["project_id"], agent=r["agent"], key=r["key"], text=r["text"],
            tags=tuple(from_json(r["tags"]) or ()), created_at=self._dt(r["created_at"]),
            updated_at=self._dt(r["updated_at"]),
        )

    def _file(self, r: Any) -> StoredFile:
        return StoredFile(
            id=r["id"], owner=r["owner"], purpose=r["purpose"], filename=r["filename"], bytes=r["bytes"],
            created_at=self._dt(r["created_at"]), expires_at=self._dt(r["expires_at"]),
        )

    def _batch(self, r: Any) -> Batch:
        times = {col: self._dt(r[col]) for col in BATCH_STATUS_TIMES.values()}
        return Batch(
            id=r["id"], owner=r["owner"], key_id=r["key_id"], principal=from_json(r["principal"]),
            endpoint=r["endpoint"], completion_window=r["completion_window"], input_file_id=r["input_file_id"],
            output_file_id=r["output_file_id"], error_file_id=r["error_file_id"], status=r["status"],
            total=r["total"], completed=r["completed"], failed=r["failed"], errors=from_json(r["errors"]),
            metadata=from_json(r["metadata"]), created_at=self._dt(r["created_at"]),
            expires_at=self._dt(r["expires_at"]), **times,
        )

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
    ) -> ProjectFeatures:
        project_id = v.check_id(project_id, "project id")
        actor = v.check_text(actor, "actor")
        for name, flag in (("threads", threads), ("memory", memory), ("cache", cache)):
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
                updated_at=now, actor=actor,
            )
            await tx.execute(
                f"INSERT INTO project_features ({FEATURE_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (project_id) DO UPDATE SET threads = excluded.threads,"
                " thread_retention_s = excluded.thread_retention_s, memory = excluded.memory,"
                " cache = excluded.cache, cache_ttl_s = excluded.cache_ttl_s,"
                " updated_at = excluded.updated_at, actor = excluded.actor",
                project_id, new.threads, int(new.thread_retention.total_seconds()), new.memory, new.cache,
                int(new.cache_ttl.total_seconds()), self._t(now), actor,
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
    ) -> ThreadTurn:
        project_id = v.check_id(project_id, "project id")
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
                "INSERT INTO thread_turns (project_id, thread_id, seq, messages, tokens, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)", project_id, thread_id, seq, text, tokens, t_now,
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
    ) -> tuple[MemoryNote, bool]:
        """Keep a note (replacing the one under the same key); True when it is new."""
        project_id = v.check_id(project_id, "project id")
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
                    f"INSERT INTO memory_notes ({NOTE_COLS}, search) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    project_id, agent, key, text, v.to_json(list(tags), "tags"), t_now, t_now,
                    _search_text(key, text),
                )
                created = now
            else:
                await tx.execute(
                    "UPDATE memory_notes SET text = ?, tags = ?, search = ?, updated_at = ?"
                    " WHERE project_id = ? AND agent = ? AND key = ?",
                    text, v.to_json(list(tags), "tags"), _search_text(key, text), t_now, project_id, agent, key,
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

    # ---- files -------------------------------------------------------------------

    async def create_file(
        self,
        owner: str,
        *,
        purpose: str,
        filename: str,
        content: bytes,
        expires_at: dt.datetime | None = None,
    ) -> StoredFile:
        owner = _check_owner(owner)
        purpose = v.check_choice(purpose, FILE_PURPOSES, "purpose")
        filename = v.check_text(filename, "filename", max_len=_MAX_FILENAME)
        if not isinstance(content, (bytes, bytearray, memoryview)):
            raise Invalid(f"content: expected bytes, got {type(content).__name__}")
        content = bytes(content)
        expires_at = v.check_opt_time(expires_at, "expires_at")
        now = self._now()
        record = StoredFile(id=new_file_id(), owner=owner, purpose=purpose, filename=filename,
                            bytes=len(content), created_at=now, expires_at=expires_at)
        await self._write(lambda tx: self._insert_file(tx, record, content))
        return record

    async def _insert_file(self, tx: Tx, f: StoredFile, content: bytes) -> None:
        await tx.execute(
            f"INSERT INTO files ({FILE_COLS}, content) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            f.id, f.owner, f.purpose, f.filename, f.bytes, self._t(f.created_at), self._t(f.expires_at), content,
        )

    def _live(self) -> tuple[str, Any]:
        return " AND (expires_at IS NULL OR expires_at > ?)", self._t(self._now())

    async def get_file(self, owner: str, file_id: str) -> StoredFile | None:
        owner = _check_owner(owner)
        file_id = v.check_id(file_id, "file id")
        live, now = self._live()
        r = await self._one(f"SELECT {FILE_COLS} FROM files WHERE id = ? AND owner = ?{live}", file_id, owner, now)
        return None if r is None else self._file(r)

    async def read_file_content(self, owner: str, file_id: str) -> bytes | None:
        owner = _check_owner(owner)
        file_id = v.check_id(file_id, "file id")
        live, now = self._live()

        async def work(tx: Tx) -> Any:
            return await tx.fetchval(f"SELECT content FROM files WHERE id = ? AND owner = ?{live}", file_id, owner, now)

        content = await self._read(work)
        return None if content is None else bytes(content)

    async def list_files(
        self, owner: str, *, purpose: str | None = None, after: str | None = None, limit: int = 100,
    ) -> list[StoredFile]:
        """Files newest first; ``after`` a file id of an earlier page."""
        owner = _check_owner(owner)
        live, now = self._live()
        where = f"owner = ?{live}"
        args: list[Any] = [owner, now]
        if purpose is not None:
            where += " AND purpose = ?"
            args.append(v.check_choice(purpose, FILE_PURPOSES, "purpose"))
        limit = v.check_limit(limit)

        async def work(tx: Tx) -> list[Any]:
            cond = where
            page = list(args)
            if after is not None:
                mark = await tx.fetchrow("SELECT created_at, id FROM files WHERE id = ? AND owner = ?",
                                         v.check_id(after, "after"), owner)
                if mark is None:
                    raise NotFound(f"no file {after!r} to list after")
                cond += " AND (created_at < ? OR (created_at = ? AND id < ?))"
                page += [mark["created_at"], mark["created_at"], mark["id"]]
            return list(await tx.fetch(
                f"SELECT {FILE_COLS} FROM files WHERE {cond} ORDER BY created_at DESC, id DESC LIMIT ?",
                *page, limit,
            ))

        return [self._file(r) for r in await self._read(work)]

    async def delete_file(self, owner: str, file_id: str) -> bool:
        owner = _check_owner(owner)
        file_id = v.check_id(file_id, "file id")

        async def work(tx: Tx) -> bool:
            return bool(await tx.execute("DELETE FROM files WHERE id = ? AND owner = ?", file_id, owner))

        return await self._write(work)

    async def delete_expired_files(self) -> int:
        now = self._t(self._now())

        async def work(tx: Tx) -> int:
            return await tx.execute("DELETE FROM files WHERE expires_at IS NOT NULL AND expires_at <= ?", now)

        return await self._write(work)

    # ---- batches -------------------------------------------------------------------

    async def create_batch(
        self,
        owner: str,
        *,
        key_id: str,
        principal: dict[str, Any],
        endpoint: str,
        completion_window: str,
        input_file_id: str,
        expires_at: dt.datetime,
        metadata: dict[str, str] | None = None,
    ) -> Batch:
        owner = _check_owner(owner)
        key_id = v.check_text(key_id, "key id", max_len=v.MAX_ID, allow_empty=True)
        principal_text = v.check_detail(principal, "principal")
        endpoint = v.check_text(endpoint, "endpoint")
        completion_window = v.check_text(completion_window, "completion_window", max_len=32)
        input_file_id = v.check_id(input_file_id, "input_file_id")
        expires_at = v.check_time(expires_at, "expires_at")
        metadata_text = v.check_detail(metadata, "metadata")
        now = self._now()
        batch = Batch(
            id=new_batch_id(), owner=owner, key_id=key_id, principal=dict(principal), endpoint=endpoint,
            completion_window=completion_window, input_file_id=input_file_id, status="validating",
            metadata=dict(metadata) if metadata else None, created_at=now, expires_at=expires_at,
        )

        async def work(tx: Tx) -> None:
            await tx.execute(
                "INSERT INTO batches (id, owner, key_id, principal, endpoint, completion_window, input_file_id,"
                " status, total, completed, failed, metadata, created_at, expires_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 'validating', 0, 0, 0, ?, ?, ?)",
                batch.id, owner, key_id, principal_text, endpoint, completion_window, input_file_id,
                metadata_text, self._t(now), self._t(expires_at),
            )

        await self._write(work)
        return batch

    async def get_batch(self, batch_id: str, *, owner: str | None = None) -> Batch | None:
        """The batch; with ``owner`` only when it is theirs (what a client's look-up passes)."""
        batch_id = v.check_id(batch_id, "batch id")
        sql = f"SELECT {BATCH_COLS} FROM batches WHERE id = ?"
        args: list[Any] = [batch_id]
        if owner is not None:
            sql += " AND owner = ?"
            args.append(_check_owner(owner))
        r = await self._one(sql, *args)
        return None if r is None else self._batch(r)

    async def list_batches(self, owner: str, *, after: str | None = None, limit: int = 20) -> list[Batch]:
        """An owner's batches, newest first; ``after`` a batch id of an earlier page."""
        owner = _check_owner(owner)
        limit = v.check_limit(limit)

        async def work(tx: Tx) -> list[Any]:
            cond, args = "owner = ?", [owner]
            if after is not None:
                mark = await tx.fetchrow("SELECT created_at, id FROM batches WHERE id = ? AND owner = ?",
                                         v.check_id(after, "after"), owner)
                if mark is None:
                    raise NotFound(f"no batch {after!r} to list after")
                cond += " AND (created_at < ? OR (created_at = ? AND id < ?))"
                args += [mark["created_at"], mark["created_at"], mark["id"]]
            return list(await tx.fetch(
                f"SELECT {BATCH_COLS} FROM batches WHERE {cond} ORDER BY created_at DESC, id DESC LIMIT ?",
                *args, limit,
            ))

        return [self._batch(r) for r in await self._read(work)]

    async def list_open_batches(self, *, limit: int = 100) -> list[Batch]:
        """Batches the worker still has to run or finish, oldest first."""
        rows = await self._all(
            f"SELECT {BATCH_COLS} FROM batches WHERE status IN ({qmarks(len(BATCH_OPEN))})"
            " ORDER BY created_at, id LIMIT ?", *BATCH_OPEN, v.check_limit(limit),
        )
        return [self._batch(r) for r in rows]

    async def set_batch_status(
        self,
        batch_id: str,
        status: str,
        *,
        expect: Sequence[str] | None = None,
        total: int | None = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> Batch | None:
        """Move a batch to ``status`` (its time recorded), only from one of ``expect`` when given;
        None when it was in another state (a cancellation came first)."""
        batch_id = v.check_id(batch_id, "batch id")
        status = v.check_choice(status, BATCH_STATUSES, "status")
        sets = ["status = ?"]
        now = self._t(self._now())
        args: list[Any] = [status]
        if status in BATCH_STATUS_TIMES:
            sets.append(f"{BATCH_STATUS_TIMES[status]} = ?")
            args.append(now)
        if total is not None:
            sets.append("total = ?")
            args.append(v.check_int(total, "total"))
        if errors is not None:
            sets.append("errors = ?")
            args.append(v.to_json(errors, "errors"))
        cond = "id = ?"
        args.append(batch_id)
        if expect is not None:
            states = [v.check_choice(s, BATCH_STATUSES, "expect") for s in expect]
            cond += f" AND status IN ({qmarks(len(states))})"
            args += states

        async def work(tx: Tx) -> Any:
            if not await tx.execute(f"UPDATE batches SET {', '.join(sets)} WHERE {cond}", *args):
                if not await tx.fetchval("SELECT 1 FROM batches WHERE id = ?", batch_id):
                    raise NotFound(f"no batch {batch_id!r}")
                return None
            return await tx.fetchrow(f"SELECT {BATCH_COLS} FROM batches WHERE id = ?", batch_id)

        r = await self._write(work)
        return None if r is None else self._batch(r)

    async def cancel_batch(self, owner: str, batch_id: str) -> Batch:
        """Ask a batch to stop: ``cancelling`` until the worker has written what it did."""
        owner = _check_owner(owner)
        batch_id = v.check_id(batch_id, "batch id")
        now = self._t(self._now())

        async def work(tx: Tx) -> Any:
            r = await tx.fetchrow(f"SELECT {BATCH_COLS} FROM batches WHERE id = ? AND owner = ?", batch_id, owner)
            if r is None:
                raise NotFound(f"no batch {batch_id!r}")
            if r["status"] in ("validating", "in_progress"):
                await tx.execute("UPDATE batches SET status = 'cancelling', cancelling_at = ? WHERE id = ?",
                                 now, batch_id)
                r = await tx.fetchrow(f"SELECT {BATCH_COLS} FROM batches WHERE id = ?", batch_id)
            elif r["status"] not in ("cancelling", "cancelled"):
                raise Conflict(f"batch {batch_id} is {r['status']} already; there is nothing left to cancel")
            return r

        return self._batch(await self._write(work))

    async def record_batch_results(self, batch_id: str, results: Sequence[BatchResult]) -> Batch:
        """Keep the results of lines done (a line done again replaces its result) and count them."""
        batch_id = v.check_id(batch_id, "batch id")
        rows = []
        for i, res in enumerate(results):
            if not isinstance(res, BatchResult):
                raise Invalid(f"results[{i}]: expected a BatchResult, got {type(res).__name__}")
            if len(res.text) > _MAX_LINE_TEXT:
                raise Invalid(f"results[{i}]: the line is larger than {_MAX_LINE_TEXT} characters")
            rows.append((batch_id, v.check_int(res.line, f"results[{i}].line", minimum=1),
                         v.check_text(res.custom_id, f"results[{i}].custom_id", max_len=1024), bool(res.ok), res.text))

        async def work(tx: Tx) -> Any:
            if not await tx.fetchval("SELECT 1 FROM batches WHERE id = ?", batch_id):
                raise NotFound(f"no batch {batch_id!r}")
            if rows:
                await tx.executemany(
                    "INSERT INTO batch_results (batch_id, line, custom_id, ok, text) VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (batch_id, line) DO UPDATE SET custom_id = excluded.custom_id,"
                    " ok = excluded.ok, text = excluded.text", rows,
                )
            await self._recount(tx, batch_id)
            return await tx.fetchrow(f"SELECT {BATCH_COLS} FROM batches WHERE id = ?", batch_id)

        return self._batch(await self._write(work))

    async def _recount(self, tx: Tx, batch_id: str) -> None:
        counts = await tx.fetchrow(
            "SELECT COUNT(*) AS n, COALESCE(SUM(CASE WHEN ok THEN 1 ELSE 0 END), 0) AS good"
            " FROM batch_results WHERE batch_id = ?", batch_id,
        )
        good = int(counts["good"])
        await tx.execute("UPDATE batches SET completed = ?, failed = ? WHERE id = ?",
                         good, int(counts["n"]) - good, batch_id)

    async def batch_lines_done(self, batch_id: str) -> set[int]:
        """The lines of a batch with a result already (a worker taking over skips them)."""
        batch_id = v.check_id(batch_id, "batch id")
        rows = await self._all("SELECT line FROM batch_results WHERE batch_id = ?", batch_id)
        return {int(r["line"]) for r in rows}

    async def finish_batch(
        self, batch_id: str, status: str, *, output_expires_at: dt.datetime | None = None,
    ) -> Batch:
        """End a batch: its results become its output file (lines that succeeded) and its error
        file (the others), in line order, each only when it has a line; then the results go."""
        batch_id = v.check_id(batch_id, "batch id")
        if status not in ("completed", "expired", "cancelled", "failed"):
            raise Invalid(f"status: a batch ends completed, expired, cancelled or failed, not {status!r}")
        expires_at = v.check_opt_time(output_expires_at, "output_expires_at")
        now = self._now()

        async def work(tx: Tx) -> Any:
            r = await tx.fetchrow("SELECT owner FROM batches WHERE id = ?", batch_id)
            if r is None:
                raise NotFound(f"no batch {batch_id!r}")
            owner = r["owner"]
            rows = await tx.fetch("SELECT ok, text FROM batch_results WHERE batch_id = ? ORDER BY line", batch_id)
            ids: dict[bool, str | None] = {True: None, False: None}
            for ok, name in ((True, "output"), (False, "errors")):
                lines = [row["text"] for row in rows if bool(row["ok"]) is ok]
                if not lines:
                    continue
                content = ("\n".join(lines) + "\n").encode()
                record = StoredFile(id=new_file_id(), owner=owner, purpose="batch_output",
                                    filename=f"{batch_id}_{name}.jsonl", bytes=len(content), created_at=now,
                                    expires_at=expires_at)
                await self._insert_file(tx, record, content)
                ids[ok] = record.id
            await self._recount(tx, batch_id)
            await tx.execute(
                f"UPDATE batches SET status = ?, {BATCH_STATUS_TIMES[status]} = ?, output_file_id = ?,"
                " error_file_id = ? WHERE id = ?", status, self._t(now), ids[True], ids[False], batch_id,
            )
            await tx.execute("DELETE FROM batch_results WHERE batch_id = ?", batch_id)
            return await tx.fetchrow(f"SELECT {BATCH_COLS} FROM batches WHERE id = ?", batch_id)

        return self._batch(await self._write(work))
