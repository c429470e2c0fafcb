"""The usage writer: one row per request, written to the store in batches,
off the request path, and never lost to a store that refuses it.

``record(row)`` cleans the row (llmgw.accounting.usage_rows: whatever the
request held, the store takes it), puts it in a bounded buffer and returns:
it never waits and never raises. A background task writes the buffer every
``flush_interval``, or as soon as ``batch_size`` rows are waiting.

When a write to the store fails (the store is down, its disk is full, its
file was made read-only), the rows go to the journal (llmgw.accounting.
journal: a file beside the store, fsync'd on every append) each flush
interval, and the store is tried again with a growing pause (up to
``_MAX_BACKOFF`` seconds). When it takes writes again the journal is
written to it and emptied. The journal is also read, and written to the
store, at start. The store skips request ids it already has, so a row
written twice (a batch that failed half-way, a journal replayed after a
crash) counts once. One error is logged when a failure episode begins and
one line when it ends, not one per row; ``write_errors`` counts every
failed write.

Without a journal (none given, or its disk refuses too) rows wait in the
buffer; once ``buffer_size`` rows wait, each new row pushes the oldest out,
and ``dropped`` counts them.

``stop()`` writes everything still buffered, to the store or else to the
journal, before it returns, which is what a gateway does on SIGTERM. A
kill -9 loses at most the rows of the last flush interval. A janitor
deletes rows older than ``usage_retention`` once a day (the hourly and
daily sums stay).
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import logging
import os
import time
from collections.abc import Callable

from llmgw.accounting.journal import Journal
from llmgw.accounting.usage_rows import clean_row, row_from_json, row_to_json
from llmgw.store import Invalid, Store, UsageRow
from llmgw.tasks import cancel_and_wait

log = logging.getLogger("llmgw.accounting")

UTC = dt.UTC
_MAX_BACKOFF = 5.0  # seconds between tries while the store fails
_DAY = 86_400.0
# The first retention run waits this long after start, away from the start-up rush.
_JANITOR_FIRST = 60.0
# A warning about dropped rows at most this often (seconds).
_DROP_WARN_EVERY = 10.0
#: The journal's file name, in the server's state folder (beside a SQLite store).
JOURNAL_NAME = "usage-journal.jsonl"
#: Rows the store refused even cleaned, kept for the operator (never replayed).
REFUSED_NAME = "usage-refused.jsonl"


class UsageWriter:
    """A bounded, batched writer of usage rows (see the module's doc)."""

    def __init__(
        self,
        store: Store,
        *,
        flush_interval: float = 0.2,
        batch_size: int = 500,
        buffer_size: int = 8192,
        retention: dt.timedelta | None = None,
        janitor_every: float = _DAY,
        clock: Callable[[], dt.datetime] | None = None,
        journal_dir: str | None = None,
    ) -> None:
        self.store = store
        self.flush_interval = max(0.001, float(flush_interval))
        self.batch_size = max(1, int(batch_size))
        self.buffer_size = max(self.batch_size, int(buffer_size))
        self.retention = retention if retention and retention > dt.timedelta(0) else None
        self.janitor_every = float(janitor_every)
        self._clock = clock or (lambda: dt.datetime.now(UTC))
        self._buffer: collections.deque[UsageRow] = collections.deque()
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._janitor: asyncio.Task[None] | None = None
        self._stopped = False
        self._drop_warned = 0.0
        self.journal_dir = journal_dir
        self.journal: Journal | None = None
        self._journaled: list[UsageRow] = []  # rows in the journal, not yet in the store
        self._journal_broken = False
        self._failing = False  # a failure episode: the last write to the store failed
        self._next_try = 0.0
        self._delay = self.flush_interval
        #: rows pushed out of a full buffer (the oldest first), never written
        self.dropped = 0
        #: rows the store refused even cleaned (kept in usage-refused.jsonl), or repeated in one batch
        self.rejected = 0
        #: rows written (not counting ones the store already had)
        self.written = 0
        #: failed writes to the store (each retried); the metric llmgw_store_write_errors_total
        self.write_errors = 0

    @property
    def failures(self) -> int:
        return self.write_errors

    @property
    def pending(self) -> int:
        """Rows waiting in memory to be written."""
        return len(self._buffer)

    @property
    def journaled(self) -> int:
        """Rows in the journal, waiting for the store."""
        return len(self._journaled)

    @property
    def lock(self) -> asyncio.Lock:
        """Held while rows move between the buffer, the store and the journal."""
        return self._lock

    @property
    def failing(self) -> bool:
        """Whether the last write to the store failed."""
        return self._failing

    def pending_spend(self, scope_kind: str, scope_id: str, start: dt.datetime, end: dt.datetime) -> int:
        """The cost of rows not yet in the store (buffered or journaled) for a scope in [start, end)."""
        column = f"{scope_kind}_id"
        total = 0
        for row in (*self._buffer, *self._journaled):
            if getattr(row, column, None) == scope_id and start <= row.at < end:
                total += row.cost_micros
        return total

    # ---- the request path ------------------------------------------------------

    def record(self, row: UsageRow) -> None:
        """Queue one row. Never blocks, never raises."""
        try:
            if self._stopped:
                self.dropped += 1
                log.error("a usage row arrived after the writer stopped; it is lost",
                          extra={"fields": {"request_id": getattr(row, "request_id", None)}})
                return
            self._buffer.append(clean_row(row))
            self._trim()
            if len(self._buffer) >= self.batch_size:
                self._wake.set()
        except Exception:  # the request must not fail because its record could not be kept
            self.dropped += 1
            log.exception("could not queue a usage row")

    def _trim(self) -> None:
        over = len(self._buffer) - self.buffer_size
        if over <= 0:
            return
        for _ in range(over):
            self._buffer.popleft()
        self.dropped += over
        now = time.monotonic()
        if now - self._drop_warned >= _DROP_WARN_EVERY:
            self._drop_warned = now
            log.warning("usage buffer full: the oldest rows are being dropped; neither the store nor the journal"
                        " takes them", extra={"fields": {"dropped_total": self.dropped, "buffer_size": self.buffer_size}})

    # ---- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Open the journal (writing what it holds to the store), then start writing in the background."""
        if self.journal is None and self.journal_dir:
            self._open_journal()
        if self._journaled:
            async with self._lock:
                if await self._replay():
                    self._recovered()
                else:
                    self._schedule_retry()
        if self._task is None:
            self._stopped = False
            self._task = asyncio.create_task(self._run(), name="llmgw-usage-writer")
        if self._janitor is None and self.retention is not None:
            self._janitor = asyncio.create_task(self._janitor_loop(), name="llmgw-usage-janitor")

    def _open_journal(self) -> None:
        assert self.journal_dir is not None
        journal = Journal(os.path.join(self.journal_dir, JOURNAL_NAME))
        try:
            entries = journal.open()
        except OSError as exc:
            self._journal_broken = True
            log.error("the usage journal cannot be opened; rows wait in memory while the store fails: %s", exc,
                      extra={"fields": {"path": journal.path}})
            return
        self.journal = journal
        for entry in entries:
            try:
                self._journaled.append(row_from_json(entry))
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("a usage journal entry is not a usage row; skipped: %s", exc)
        if self._journaled:
            log.warning("the usage journal holds rows from before; writing them to the store",
                        extra={"fields": {"rows": len(self._journaled), "path": journal.path}})

    async def stop(self, timeout: float = 30.0) -> None:
        """Write every buffered row, to the store or else to the journal, then stop.

        Without a journal that takes them, the store is tried for up to ``timeout`` seconds."""
        self._stopped = True
        self._wake.set()
        janitor, self._janitor = self._janitor, None
        await cancel_and_wait(janitor)
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        deadline = time.monotonic() + timeout
        delay = self.flush_interval
        while not await self.flush() and self._buffer:
            if time.monotonic() + delay > deadline:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF)
        if self._buffer:
            log.error("usage rows could not be written before stopping, to the store nor to the journal; they are lost",
                      extra={"fields": {"rows": len(self._buffer)}})
        if self._journaled and self.journal is not None:
            log.warning("usage rows stay in the journal; the next start writes them to the store",
                        extra={"fields": {"rows": len(self._journaled), "path": self.journal.path}})
        if self.journal is not None:
            self.journal.close()
            self.journal = None

    async def flush(self) -> bool:
        """Write what is buffered (and journaled) to the store now; False when the store failed (the rows
        are then in the journal, or still buffered without one)."""
        async with self._lock:
            if await self._replay() and await self._drain():
                self._recovered()
                return True
            self._schedule_retry()
            await self._spill()
            return False

    async def _drain(self) -> bool:
        while self._buffer:
            batch = [self._buffer.popleft() for _ in range(min(self.batch_size, len(self._buffer)))]
            rest = await self._write(batch)
            if rest:
                self._buffer.extendleft(reversed(rest))
                self._trim()
                return False
        return True

    async def _replay(self) -> bool:
        """Write the journaled rows to the store and empty the journal; False when the store failed."""
        if not self._journaled:
            return True
        rows = self._journaled
        for i in range(0, len(rows), self.batch_size):
            if await self._write(rows[i:i + self.batch_size]):
                return False
        count = len(rows)
        self._journaled = []
        if self.journal is not None:
            try:
                await asyncio.to_thread(self.journal.clear)
            except OSError as exc:  # the rows are in the store; a replay of them later counts nothing twice
                log.warning("could not empty the usage journal: %s", exc, extra={"fields": {"path": self.journal.path}})
        log.info("journaled usage rows written to the store", extra={"fields": {"rows": count}})
        return True

    async def _spill(self) -> None:
        """Move the buffer to the journal (the store is failing)."""
        if not self._buffer or self.journal is None:
            return
        rows = list(self._buffer)
        try:
            await asyncio.to_thread(self.journal.append, (row_to_json(r) for r in rows))
        except (OSError, ValueError) as exc:
            if not self._journal_broken:
                self._journal_broken = True
                log.error("the usage journal refuses writes too; rows wait in memory: %s", exc,
                          extra={"fields": {"path": self.journal.path}})
            return
        if self._journal_broken:
            self._journal_broken = False
            log.warning("the usage journal takes writes again", extra={"fields": {"path": self.journal.path}})
        for _ in rows:
            self._buffer.popleft()
        self._journaled.extend(rows)

    def _schedule_retry(self) -> None:
        self._delay = min(max(self._delay, self.flush_interval) * 2, _MAX_BACKOFF) if self._failing else self.flush_interval
        self._next_try = time.monotonic() + self._delay

    def _failed(self, exc: BaseException, rows: int) -> None:
        self.write_errors += 1
        if self._failing:
            return
        self._failing = True
        where = f"the journal {self.journal.path}" if self.journal is not None else "memory (no journal)"
        log.error("the store refuses usage rows; they are kept in %s and written when it takes writes again: %s",
                  where, exc, extra={"fields": {"rows": rows, "error_type": type(exc).__name__}})

    def _recovered(self) -> None:
        if self._failing:
            self._failing = False
            log.warning("the store takes usage rows again", extra={"fields": {"write_errors_total": self.write_errors}})
        self._delay = self.flush_interval
        self._next_try = 0.0

    async def _run(self) -> None:
        while not self._stopped:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.flush_interval)
            except TimeoutError:
                pass
            self._wake.clear()
            if self._stopped:
                return  # stop() writes the rest
            if self._failing and time.monotonic() < self._next_try:
                async with self._lock:  # the store is failing: journal the rows, try it again later
                    await self._spill()
                continue
            await self.flush()

    async def _write(self, batch: list[UsageRow]) -> list[UsageRow]:
        """Write a batch; returns the rows still to write (empty: all done)."""
        rows: dict[str, UsageRow] = {}
        for row in batch:
            if row.request_id in rows:
                self.rejected += 1
                log.warning("two usage rows with one request id; keeping the first",
                            extra={"fields": {"request_id": row.request_id}})
                continue
            rows[row.request_id] = row
        unique = list(rows.values())
        try:
            self.written += await self.store.insert_usage_rows(unique)
            return []
        except Invalid:
            pass  # some row is refused even cleaned: write them one by one, keeping the bad ones aside
        except Exception as exc:  # noqa: BLE001 - whatever the driver raises, the rows are kept and retried
            self._failed(exc, len(unique))
            return unique
        for i, row in enumerate(unique):
            try:
                self.written += await self.store.insert_usage_rows([row])
            except Invalid as exc:
                self.rejected += 1
                self._keep_refused(row, exc)
            except Exception as exc:  # noqa: BLE001 - as above
                self._failed(exc, len(unique) - i)
                return unique[i:]
        return []

    def _keep_refused(self, row: UsageRow, exc: Exception) -> None:
        log.error("the store refused a usage row even cleaned: %s", exc,
                  extra={"fields": {"request_id": row.request_id}})
        if not self.journal_dir:
            return
        try:
            refused = Journal(os.path.join(self.journal_dir, REFUSED_NAME), reserve=0)
            refused.open()
            try:
                refused.append([{"error": str(exc), "row": row_to_json(row)}])
            finally:
                refused.close()
        except (OSError, ValueError) as err:
            log.error("could not keep a refused usage row: %s", err)

    # ---- retention ---------------------------------------------------------------

    async def run_janitor(self) -> int:
        """Delete rows older than the retention now; returns how many went."""
        if self.retention is None:
            return 0
        cutoff = self._clock() - self.retention
        try:
            deleted = await self.store.delete_usage_before(cutoff)
        except Exception as exc:  # noqa: BLE001 - the janitor tries again tomorrow
            log.warning("could not delete old usage rows: %s", exc)
            return 0
        if deleted:
            log.info("deleted usage rows past their retention",
                     extra={"fields": {"rows": deleted, "before": cutoff.isoformat()}})
        return deleted

    async def _janitor_loop(self) -> None:
        await asyncio.sleep(min(_JANITOR_FIRST, self.janitor_every))
        while True:
            await self.run_janitor()
            await asyncio.sleep(self.janitor_every)
