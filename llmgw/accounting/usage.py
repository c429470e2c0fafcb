"""The usage writer: one row per request, written to the store in batches,
off the request path.

``record(row)`` puts a row in a bounded buffer and returns: it never waits
and never raises. A background task writes the buffer every
``flush_interval``, or as soon as ``batch_size`` rows are waiting. When the
store is slow or down, rows wait in the buffer (and the write is retried
with a growing pause); once ``buffer_size`` rows wait, each new row pushes
the oldest out, and ``dropped`` counts them. The store skips request ids it
already has, so a batch that failed half-way is simply written again.

``stop()`` writes everything still buffered before it returns, which is
what a gateway does on SIGTERM. A janitor deletes rows older than
``usage_retention`` once a day (the hourly and daily sums stay).
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import logging
import time
from collections.abc import Callable

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
        #: rows pushed out of a full buffer (the oldest first), never written
        self.dropped = 0
        #: rows the store refused as malformed (or repeated in one batch), never written
        self.rejected = 0
        #: rows written (not counting ones the store already had)
        self.written = 0
        #: failed writes (each retried)
        self.failures = 0

    @property
    def pending(self) -> int:
        """Rows waiting to be written."""
        return len(self._buffer)

    # ---- the request path ------------------------------------------------------

    def record(self, row: UsageRow) -> None:
        """Queue one row. Never blocks, never raises."""
        try:
            if self._stopped:
                self.dropped += 1
                log.error("a usage row arrived after the writer stopped; it is lost",
                          extra={"fields": {"request_id": getattr(row, "request_id", None)}})
                return
            self._buffer.append(row)
            self._trim()
            if len(self._buffer) >= self.batch_size:
                self._wake.set()
        except Exception:  # the request must not fail because its record could not be kept
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
            log.warning("usage buffer full: the oldest rows are being dropped; the store is not keeping up",
                        extra={"fields": {"dropped_total": self.dropped, "buffer_size": self.buffer_size}})

    # ---- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        if self._task is None:
            self._stopped = False
            self._task = asyncio.create_task(self._run(), name="llmgw-usage-writer")
        if self._janitor is None and self.retention is not None:
            self._janitor = asyncio.create_task(self._janitor_loop(), name="llmgw-usage-janitor")

    async def stop(self, timeout: float = 30.0) -> None:
        """Write every buffered row (trying for up to ``timeout`` seconds while the store fails), then stop."""
        self._stopped = True
        self._wake.set()
        janitor, self._janitor = self._janitor, None
        await cancel_and_wait(janitor)
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        deadline = time.monotonic() + timeout
        delay = self.flush_interval
        while self._buffer and not await self.flush():
            if time.monotonic() + delay > deadline:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF)
        if self._buffer:
            log.error("usage rows could not be written before stopping; they are lost",
                      extra={"fields": {"rows": len(self._buffer)}})

    async def flush(self) -> bool:
        """Write everything buffered now; False when the store failed (the rows stay buffered)."""
        async with self._lock:
            while self._buffer:
                batch = [self._buffer.popleft() for _ in range(min(self.batch_size, len(self._buffer)))]
                rest = await self._write(batch)
                if rest:
                    self._buffer.extendleft(reversed(rest))
                    self._trim()
                    return False
            return True

    async def _run(self) -> None:
        delay = self.flush_interval
        while not self._stopped:
            if delay > self.flush_interval:
                await asyncio.sleep(delay)  # the store is failing: do not let new rows hurry us
            else:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
                except TimeoutError:
                    pass
            self._wake.clear()
            if self._stopped:
                return  # stop() writes the rest
            ok = await self.flush()
            delay = self.flush_interval if ok else min(max(delay, self.flush_interval) * 2, _MAX_BACKOFF)

    async def _write(self, batch: list[UsageRow]) -> list[UsageRow]:
        """Write a batch; returns the rows still to write (empty: all done)."""
        rows: dict[str, UsageRow] = {}
        for row in batch:
            if getattr(row, "request_id", None) in rows:
                self.rejected += 1
                log.warning("two usage rows with one request id; keeping the first",
                            extra={"fields": {"request_id": row.request_id}})
                continue
            rows[getattr(row, "request_id", None)] = row
        unique = list(rows.values())
        try:
            self.written += await self.store.insert_usage_rows(unique)
            return []
        except Invalid:
            pass  # some row is malformed: write them one by one, leaving out the bad ones
        except Exception as exc:  # noqa: BLE001 - whatever the driver raises, the rows are kept and retried
            self.failures += 1
            log.warning("could not write usage rows; they stay buffered and are retried: %s", exc,
                        extra={"fields": {"rows": len(unique)}})
            return unique
        for i, row in enumerate(unique):
            try:
                self.written += await self.store.insert_usage_rows([row])
            except Invalid as exc:
                self.rejected += 1
                log.error("the store refused a usage row: %s", exc,
                          extra={"fields": {"request_id": getattr(row, "request_id", None)}})
            except Exception as exc:  # noqa: BLE001 - as above
                self.failures += 1
                log.warning("could not write usage rows; they stay buffered and are retried: %s", exc)
                return unique[i:]
        return []

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
