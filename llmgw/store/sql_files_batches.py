"""Files and batches of the Files and Batch APIs: the shared SQL both backends use.

A file's bytes are kept in its row, so a backup of the store carries them.
Every look-up of a client names the owner (the key's project, else its
person, else ``anonymous``); only the batch worker reads a batch by its id
alone. Taken in by :class:`llmgw.store.sql_client_data.SQLClientData`.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import AsyncIterator, Sequence
from typing import Any, BinaryIO

from . import validate as v
from .client_data import (
    BATCH_OPEN,
    BATCH_STATUS_TIMES,
    BATCH_STATUSES,
    FILE_PURPOSES,
    Batch,
    BatchResult,
    StoredFile,
)
from .errors import Conflict, Invalid, NotFound
from .sqlbase import SQLStoreBase, Tx, from_json, new_id, qmarks

FILE_COLS = "id, owner, purpose, filename, bytes, created_at, expires_at"
BATCH_COLS = (
    "id, owner, key_id, principal, endpoint, completion_window, input_file_id, output_file_id, error_file_id, "
    "status, total, completed, failed, errors, metadata, created_at, expires_at, in_progress_at, finalizing_at, "
    "completed_at, failed_at, expired_at, cancelling_at, cancelled_at"
)
_MAX_FILENAME = 255
#: The largest piece of an uploaded file kept in one row of file_chunks.
FILE_CHUNK_BYTES = 1024 * 1024
_MAX_LINE_TEXT = 64 * 1024 * 1024


def _check_owner(value: Any) -> str:
    return v.check_id(value, "owner")


def new_file_id() -> str:
    return new_id("file")


def new_batch_id() -> str:
    return "batch_" + secrets.token_hex(12)


class SQLFilesBatches(SQLStoreBase):
    # ---- records -----------------------------------------------------------

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

    # ---- files -------------------------------------------------------------------

    async def create_file(
        self,
        owner: str,
        *,
        purpose: str,
        filename: str,
        content: bytes | BinaryIO,
        expires_at: dt.datetime | None = None,
    ) -> StoredFile:
        owner = _check_owner(owner)
        purpose = v.check_choice(purpose, FILE_PURPOSES, "purpose")
        filename = v.check_text(filename, "filename", max_len=_MAX_FILENAME)
        start = 0
        if isinstance(content, (bytes, bytearray, memoryview)):
            whole: bytes | None = bytes(content)
            size = len(whole)
        elif callable(getattr(content, "read", None)) and callable(getattr(content, "seek", None)):
            whole = None  # read a piece at a time, from where it is now to its end
            start = content.tell()
            size = content.seek(0, 2) - start
            content.seek(start)
        else:
            raise Invalid(f"content: expected bytes or a file, got {type(content).__name__}")
        expires_at = v.check_opt_time(expires_at, "expires_at")
        now = self._now()
        record = StoredFile(id=new_file_id(), owner=owner, purpose=purpose, filename=filename,
                            bytes=size, created_at=now, expires_at=expires_at)

        async def work(tx: Tx) -> None:
            await self._insert_file(tx, record, whole if whole is not None else b"")
            if whole is None:
                content.seek(start)  # type: ignore[union-attr]  # from its start again if the write is retried
                seq = 0
                while piece := content.read(FILE_CHUNK_BYTES):  # type: ignore[union-attr]
                    await tx.execute("INSERT INTO file_chunks (file_id, seq, data) VALUES (?, ?, ?)",
                                     record.id, seq, piece)
                    seq += 1

        await self._write(work)
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
        pieces = await self.iter_file_content(owner, file_id)
        return None if pieces is None else b"".join([piece async for piece in pieces])

    async def iter_file_content(self, owner: str, file_id: str) -> AsyncIterator[bytes] | None:
        """The file's bytes a piece (at most 1 MiB) at a time, each piece read on its own; None when
        the owner has no such file. A file deleted while it is read ends where it was."""
        owner = _check_owner(owner)
        file_id = v.check_id(file_id, "file id")
        live, now = self._live()

        async def head(tx: Tx) -> Any:
            r = await tx.fetchrow(f"SELECT bytes, LENGTH(content) AS kept FROM files WHERE id = ? AND owner = ?{live}",
                                  file_id, owner, now)
            if r is None:
                return None
            if r["bytes"] and not r["kept"]:
                return int(await tx.fetchval("SELECT COUNT(*) FROM file_chunks WHERE file_id = ?", file_id))
            return -1  # kept whole in its row

        pieces = await self._read(head)
        if pieces is None:
            return None

        async def chunks() -> AsyncIterator[bytes]:
            if pieces < 0:
                r = await self._one("SELECT content FROM files WHERE id = ?", file_id)
                content = bytes(r["content"]) if r is not None and r["content"] is not None else b""
                for at in range(0, len(content), FILE_CHUNK_BYTES):
                    yield content[at:at + FILE_CHUNK_BYTES]
                return
            for seq in range(pieces):
                r = await self._one("SELECT data FROM file_chunks WHERE file_id = ? AND seq = ?", file_id, seq)
                if r is None:
                    return
                yield bytes(r["data"])

        return chunks()

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
            gone = bool(await tx.execute("DELETE FROM files WHERE id = ? AND owner = ?", file_id, owner))
            if gone:
                await tx.execute("DELETE FROM file_chunks WHERE file_id = ?", file_id)
            return gone

        return await self._write(work)

    async def delete_expired_files(self) -> int:
        now = self._t(self._now())

        async def work(tx: Tx) -> int:
            await tx.execute("DELETE FROM file_chunks WHERE file_id IN (SELECT id FROM files"
                             " WHERE expires_at IS NOT NULL AND expires_at <= ?)", now)
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

    async def delete_batch(self, owner: str, batch_id: str) -> bool:
        """Forget an ended batch, its results and its files (input, output, errors) in one transaction."""
        owner = _check_owner(owner)
        batch_id = v.check_id(batch_id, "batch id")

        async def work(tx: Tx) -> bool:
            r = await tx.fetchrow(f"SELECT {BATCH_COLS} FROM batches WHERE id = ? AND owner = ?", batch_id, owner)
            if r is None:
                return False
            if r["status"] in BATCH_OPEN:
                raise Conflict(f"batch {batch_id} is {r['status']}: it can be deleted once it has ended "
                               "(cancel it first)")
            for file_id in (r["input_file_id"], r["output_file_id"], r["error_file_id"]):
                if file_id:
                    await tx.execute("DELETE FROM file_chunks WHERE file_id = ?", file_id)
                    await tx.execute("DELETE FROM files WHERE id = ? AND owner = ?", file_id, owner)
            await tx.execute("DELETE FROM batch_results WHERE batch_id = ?", batch_id)
            await tx.execute("DELETE FROM batches WHERE id = ?", batch_id)
            return True

        return await self._write(work)

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
        good, n = int(counts["good"]), int(counts["n"])
        await tx.execute("UPDATE batches SET completed = ?, failed = ?,"
                         " total = CASE WHEN total < ? THEN ? ELSE total END WHERE id = ?",
                         good, n - good, n, n, batch_id)

    async def batch_lines_done(self, batch_id: str) -> set[int]:
        """The lines of a batch with a result already (a worker taking over skips them)."""
        batch_id = v.check_id(batch_id, "batch id")
        rows = await self._all("SELECT line FROM batch_results WHERE batch_id = ?", batch_id)
        return {int(r["line"]) for r in rows}

    async def finish_batch(
        self, batch_id: str, status: str, *, output_expires_at: dt.datetime | None = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> Batch:
        """End a batch: its results become its output file (lines that succeeded) and its error
        file (the others), in line order, each only when it has a line; then the results go."""
        batch_id = v.check_id(batch_id, "batch id")
        if status not in ("completed", "expired", "cancelled", "failed"):
            raise Invalid(f"status: a batch ends completed, expired, cancelled or failed, not {status!r}")
        expires_at = v.check_opt_time(output_expires_at, "output_expires_at")
        errors_text = None if errors is None else v.to_json(errors, "errors")
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
                " error_file_id = ?, errors = COALESCE(?, errors) WHERE id = ?",
                status, self._t(now), ids[True], ids[False], errors_text, batch_id,
            )
            await tx.execute("DELETE FROM batch_results WHERE batch_id = ?", batch_id)
            return await tx.fetchrow(f"SELECT {BATCH_COLS} FROM batches WHERE id = ?", batch_id)

        return self._batch(await self._write(work))
