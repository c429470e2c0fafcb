"""The batch worker: the lines of batches, through the gateway's own pipeline, at the lowest priority.

Every control plane runs one; the one holding the store lease
`batch-worker` works, the others wait for it to lapse. The holder takes the
open batches oldest first, one at a time:

1. reads the input file a stored piece at a time, line by line, and checks
   every line (a JSON object with a unique
   `custom_id`, `method` POST, the batch's `url`, a `body` naming a
   `model`); a file with any bad line fails the batch, with each problem
   and its line number in `errors`;
2. sends up to `router.batch.concurrency` lines at once through
   `pipeline.serve`, as requests of the key that submitted the batch (its
   limits, budget, allowlist and guardrails apply) in the lowest band, so
   interactive requests get replicas first; usage rows carry `batch=<id>`;
   a line refused for a moment is tried again: as often as it says when
   (Retry-After: a rate limit, a full queue, a busy model) within the
   batch's window, a few times when it does not (502, 503, 504);
3. keeps each line's result in the store as it goes (twice a second), with
   the batch's counts, so a worker taking over skips the lines done;
4. stops starting lines when the batch is cancelled or its window ends,
   and writes the lines not run to the error file (`batch_cancelled`,
   `batch_expired`), so every `custom_id` is in one of the two files;
5. ends the batch: its output and error files, kept
   `router.batch.output_retention`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator
from typing import Any
from unittest import mock

import attrs
from aiohttp import test_utils, web
from aiohttp.streams import StreamReader

from llmgw.auth.principal import ANONYMOUS, AuthError, Principal
from llmgw.obs import logs
from llmgw.router.batches import ENDPOINTS, MESSAGES_ENDPOINT
from llmgw.router.errors import GatewayError, dumps, error_body, loads
from llmgw.router.gateway import GATEWAY, INTERNAL_PRINCIPAL, REQUEST_ID
from llmgw.router.pipeline import new_request_id, serve
from llmgw.store import StoreError
from llmgw.store.client_data import Batch, BatchResult
from llmgw.tasks import cancel_and_wait

log = logs.get("llmgw.router.batches")

LEASE_NAME = "batch-worker"
#: Seconds the lease is held for; it is renewed every third of that while a batch runs.
LEASE_TTL = 30.0
#: Results are written when this many wait, or this often (seconds); the batch's state is read as often.
FLUSH_AT, FLUSH_EVERY = 50, 0.5
#: Tries of a line that failed without saying when to come back, the first pause (doubling), the longest.
LINE_ATTEMPTS, RETRY_PAUSE, MAX_PAUSE = 5, 1.0, 30.0
RETRY_STATUSES = frozenset({429, 502, 503, 504, 529})  # 529: Anthropic's "overloaded" (a message batch's line)
#: Problems listed for a file that fails its check, at most.
MAX_ERRORS = 100
MAX_CUSTOM_ID = 512


@attrs.frozen
class Line:
    number: int  # 1 for the file's first line
    custom_id: str
    body: dict = attrs.field(hash=False)


class InputCheck:
    """A batch's input file checked a line at a time: its lines, and its problems in OpenAI's shape
    ({code, message, param, line})."""

    def __init__(self, endpoint: str, max_lines: int) -> None:
        self.endpoint, self.max_lines = endpoint, max_lines
        self.lines: list[Line] = []
        self.errors: list[dict[str, Any]] = []
        self.full = False  # past max_lines: no need to read on
        self._seen: set[str] = set()

    def problem(self, code: str, message: str, line: int | None, param: str | None = None) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append({"code": code, "message": message, "param": param, "line": line})

    def add(self, number: int, raw_bytes: bytes) -> None:
        """The file's line `number` (1 for the first), without its newline."""
        try:
            raw = raw_bytes.decode("utf-8")
        except UnicodeDecodeError:
            self.problem("invalid_file", "the file is not UTF-8 text", number)
            return
        if not raw.strip():
            return
        if len(self.lines) >= self.max_lines:
            self.problem("too_many_requests",
                         f"a batch holds at most {self.max_lines} requests (router.batch.max_lines)", number)
            self.full = True
            return
        try:
            item = loads(raw)
        except ValueError:
            self.problem("invalid_json_line", "the line is not valid JSON", number)
            return
        if not isinstance(item, dict):
            self.problem("invalid_json_line", "the line is not a JSON object", number)
            return
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID:
            self.problem("missing_custom_id", f"each line needs a `custom_id` of 1 to {MAX_CUSTOM_ID} characters",
                         number, "custom_id")
            return
        if custom_id in self._seen:
            self.problem("duplicate_custom_id", f"the custom_id {custom_id!r} is on an earlier line too", number,
                         "custom_id")
            return
        self._seen.add(custom_id)
        if item.get("method", "POST") != "POST":
            self.problem("invalid_method", "the method must be POST", number, "method")
        if item.get("url", self.endpoint) != self.endpoint:
            self.problem("mismatched_endpoint", f"the url must be the batch's endpoint, {self.endpoint}", number,
                         "url")
        body = item.get("body")
        if not isinstance(body, dict) or not isinstance(body.get("model"), str) or not body["model"]:
            self.problem("invalid_body", "the body must be a JSON object that names a `model`", number, "body")
            return
        self.lines.append(Line(number, custom_id, body))

    def result(self) -> tuple[list[Line], list[dict[str, Any]]]:
        if not self.lines and not self.errors:
            self.problem("empty_file", "the file holds no requests", None)
        return self.lines, self.errors


def parse_input(content: bytes, endpoint: str, max_lines: int) -> tuple[list[Line], list[dict[str, Any]]]:
    """A batch's lines, and its problems in OpenAI's shape ({code, message, param, line})."""
    check = InputCheck(endpoint, max_lines)
    for number, raw in enumerate(content.split(b"\n"), 1):
        check.add(number, raw)
        if check.full:
            break
    return check.result()


async def read_input(pieces: AsyncIterator[bytes], endpoint: str,
                     max_lines: int) -> tuple[list[Line], list[dict[str, Any]]]:
    """parse_input over a stored file read a piece at a time: a line may run across pieces, and
    only the line being read is held as bytes."""
    check = InputCheck(endpoint, max_lines)
    rest = b""
    number = 0
    async for piece in pieces:
        start = 0
        buffer = rest + piece if rest else piece
        while (end := buffer.find(b"\n", start)) >= 0:
            number += 1
            check.add(number, buffer[start:end])
            if check.full:
                return check.result()
            start = end + 1
        rest = buffer[start:]
    if rest:
        check.add(number + 1, rest)
    return check.result()


def _payload(raw: bytes) -> StreamReader:
    reader = StreamReader(mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop())
    reader.feed_data(raw)
    reader.feed_eof()
    return reader


class BatchWorker:
    """Runs open batches while this process holds the lease; `wake()` when one is made or cancelled."""

    def __init__(self, app: web.Application, data: Any, *, poll: float = 2.0, lease_ttl: float = LEASE_TTL,
                 holder: str | None = None, line_attempts: int = LINE_ATTEMPTS,
                 retry_pause: float = RETRY_PAUSE) -> None:
        self.app = app
        self.data = data
        self.gw = app[GATEWAY]
        self.settings = self.gw.config.router.batch
        self.poll = poll
        self.lease_ttl = lease_ttl
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.line_attempts = max(1, line_attempts)
        self.retry_pause = retry_pause
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: lines sent so far (for tests and logs)
        self.lines_sent = 0

    @property
    def store(self):
        return self.data.store

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="llmgw-batch-worker")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        await cancel_and_wait(task)
        with contextlib.suppress(Exception):
            await self.store.release_lease(LEASE_NAME, self.holder)

    def wake(self) -> None:
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            try:
                await self.round()
            except Exception:
                log.exception("the batch worker's round failed; it tries again")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll)
            self._wake.clear()

    async def round(self) -> None:
        """Run the open batches, while the lease is ours."""
        if not await self.store.list_open_batches(limit=1):
            return
        lease = await self.store.try_acquire_lease(LEASE_NAME, self.holder, self.lease_ttl)
        if lease is None:
            return
        renewing = asyncio.create_task(self._renew(lease.epoch))
        try:
            for batch in await self.store.list_open_batches(limit=100):
                run = asyncio.create_task(BatchRun(self, batch).run())
                try:
                    await asyncio.wait({run, renewing}, return_when=asyncio.FIRST_COMPLETED)
                except asyncio.CancelledError:  # shutting down: the lines in flight stop with us
                    run.cancel()
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        await run
                    raise
                if not run.done():  # the lease is gone: another control plane goes on from the lines kept
                    run.cancel()
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        await run
                    logs.event(log, "batch worker lease lost", logging.WARNING, batch_id=batch.id)
                    return
                if run.exception() is not None:
                    log.error("batch run failed; it is tried again next round", exc_info=run.exception(),
                              extra={"fields": {"batch_id": batch.id}})
        finally:
            await cancel_and_wait(renewing)

    async def _renew(self, epoch: int) -> None:
        """Keep the lease; returns when it is lost (or cannot be renewed before it lapses)."""
        last = time.monotonic()
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            try:
                if await self.store.renew_lease(LEASE_NAME, self.holder, self.lease_ttl, epoch=epoch) is None:
                    return
                last = time.monotonic()
            except StoreError as exc:
                logs.event(log, "batch worker lease not renewed", logging.WARNING, error=str(exc))
                if time.monotonic() - last > self.lease_ttl * 0.9:
                    return

    # -- one line through the pipeline ---------------------------------------------------

    def lowest_band(self) -> str:
        return self.gw.admission.bands[-1].name

    async def send(self, batch: Batch, body: bytes, principal: Principal) -> tuple[int, bytes, str, float | None]:
        """One request through the pipeline: (status, body, request id, Retry-After)."""
        dialect = None
        if batch.endpoint == MESSAGES_ENDPOINT:  # Anthropic's message batches: each line a /v1/messages request
            from llmgw.router.handlers_anthropic import MessagesDialect

            kind, path, dialect = "chat", "/chat/completions", MessagesDialect()
        else:
            kind, path = ENDPOINTS[batch.endpoint]
        request_id = new_request_id()
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body)),
                   "x-llmgw-tags": f"batch={batch.id}", "x-llmgw-band": self.lowest_band()}
        request = test_utils.make_mocked_request(
            "POST", batch.endpoint, headers=headers, app=self.app, payload=_payload(body),
            client_max_size=len(body) + 1)
        request[REQUEST_ID] = request_id
        request[INTERNAL_PRINCIPAL] = principal
        self.lines_sent += 1
        try:
            response = await serve(request, kind, path, dialect=dialect)
        except Exception:
            log.exception("a batch line failed in the gateway", extra={"fields": {"batch_id": batch.id}})
            return 500, error_body("the gateway failed on this request", "server_error", "internal_error"), \
                request_id, None
        raw = response.body if isinstance(response, web.Response) and isinstance(response.body, bytes) else b""
        retry_after = response.headers.get("Retry-After")
        return response.status, raw, request_id, float(retry_after) if retry_after and retry_after.isdigit() else None


class BatchRun:
    """One batch, from its input file to its output files."""

    def __init__(self, worker: BatchWorker, batch: Batch) -> None:
        self.worker = worker
        self.batch = batch
        self.store = worker.store
        self.stop = asyncio.Event()
        self.reason: str | None = None  # why lines stopped: cancelled, expired, storage_quota
        self.quota_error: dict[str, Any] | None = None  # the batch's error when its results passed the quota
        self._pending: list[BatchResult] = []
        self._flushing = asyncio.Lock()

    async def run(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            # Shutting down or the lease lost: keep what is done, so whoever goes on does not run it again.
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(self._flush())
            raise

    async def _run(self) -> None:
        b = self.batch
        if b.status == "finalizing":  # everything was run before a take-over
            await self._finish("completed")
            return
        pieces = await self.store.iter_file_content(b.owner, b.input_file_id)
        if pieces is None:
            await self._fail([{"code": "file_not_found", "message": f"the input file {b.input_file_id} is gone",
                               "param": "input_file_id", "line": None}])
            return
        lines, errors = await read_input(pieces, b.endpoint, self.worker.settings.max_lines)
        if errors:
            await self._fail(errors)
            return
        if b.status == "validating":
            moved = await self.store.set_batch_status(b.id, "in_progress", expect=["validating"], total=len(lines))
            b = self.batch = moved or await self.store.get_batch(b.id)
        if b.status == "cancelling":
            self.reason = "cancelled"
        elif dt.datetime.now(dt.UTC) >= b.expires_at:
            self.reason = "expired"
        done = await self.store.batch_lines_done(b.id)
        todo = [line for line in lines if line.number not in done]
        if self.reason is None and todo:
            logs.event(log, "batch running", batch_id=b.id, lines=len(todo), of=len(lines))
            try:
                principal = await self._principal()
            except AuthError as exc:
                self._pending = [self._refused(line, exc) for line in todo]
            else:
                await self._run_lines(todo, principal)
            await self._flush()
        if self.quota_error is not None:  # what was written is kept; nothing more, the quota is full
            await self._finish("failed", errors=[self.quota_error])
            return
        done = await self.store.batch_lines_done(b.id)
        left = [line for line in lines if line.number not in done]
        if left:
            await self.store.record_batch_results(b.id, [self._not_run(line) for line in left])
        final = {"cancelled": "cancelled", "expired": "expired"}.get(self.reason or "", "completed")
        if final == "completed" and await self.store.set_batch_status(b.id, "finalizing",
                                                                      expect=["in_progress"]) is None:
            final = "cancelled"  # a cancellation came as the last line finished
        await self._finish(final)

    async def _fail(self, errors: list[dict[str, Any]]) -> None:
        if self.batch.status == "cancelling":
            await self._finish("cancelled")
            return
        await self.store.set_batch_status(self.batch.id, "failed", expect=["validating", "in_progress"], errors=errors)
        logs.event(log, "batch failed its check", logging.WARNING, batch_id=self.batch.id, problems=len(errors))

    async def _finish(self, status: str, errors: list[dict[str, Any]] | None = None) -> None:
        retention = self.worker.settings.output_retention
        expires = dt.datetime.now(dt.UTC) + retention if retention.total_seconds() > 0 else None
        done = await self.store.finish_batch(self.batch.id, status, output_expires_at=expires, errors=errors)
        logs.event(log, "batch ended", batch_id=done.id, status=done.status, completed=done.completed,
                   failed=done.failed)

    async def _principal(self) -> Principal:
        """The submitting key as it is now (revoked or expired: AuthError), in the lowest band."""
        from llmgw.auth.keys import principal_of, refuse_unusable

        b = self.batch
        if not b.key_id:
            return ANONYMOUS
        principal = None
        key = await self.store.get_key(b.key_id)
        if key is not None:
            resolved = await self.store.resolve_key(key.key_hash)
            if resolved is not None:
                refuse_unusable(resolved, dt.datetime.now(dt.UTC))
                principal = principal_of(resolved, self.worker.gw.model_aliases())
        if principal is None:  # a key the store does not hold (a resolver of its own): as it was at submission
            snap = dict(b.principal)
            models = snap.pop("allowed_models", None)
            principal = Principal(**snap, allowed_models=frozenset(models) if models is not None else None)
        return attrs.evolve(principal, band=self.worker.lowest_band())

    async def _run_lines(self, todo: list[Line], principal: Principal) -> None:
        queue = iter(todo)

        async def sender() -> None:
            for line in queue:
                if self.stop.is_set():
                    return
                result = await self._line(line, principal)
                if result is not None:
                    self._pending.append(result)  # after the await: a flush meanwhile swaps the list
                if len(self._pending) >= FLUSH_AT:
                    await self._flush()

        senders_done = asyncio.Event()
        watcher = asyncio.create_task(self._watch(senders_done))
        try:
            await asyncio.gather(*(sender() for _ in range(max(1, self.worker.settings.concurrency))))
        finally:
            # Told, not cancelled: a store write cut in the middle could be kept and still look failed.
            senders_done.set()
            await watcher

    async def _watch(self, senders_done: asyncio.Event) -> None:
        """Write results as they come, and stop starting lines when the batch is cancelled or out of time."""
        while not (self.stop.is_set() or senders_done.is_set()):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(senders_done.wait(), FLUSH_EVERY)
            if senders_done.is_set():
                return
            try:
                await self._flush()
                now = await self.store.get_batch(self.batch.id)
            except StoreError as exc:
                logs.event(log, "batch progress not written", logging.WARNING, batch_id=self.batch.id, error=str(exc))
                continue
            if now is None or now.status == "cancelling":
                self.reason = "cancelled"
                self.stop.set()
            elif dt.datetime.now(dt.UTC) >= now.expires_at:
                self.reason = "expired"
                self.stop.set()

    async def _flush(self) -> None:
        async with self._flushing:
            if not self._pending:
                return
            ready, self._pending = self._pending, []
            if self.quota_error is not None or not await self._within_quota(ready):
                return  # past the quota: these are not kept, and the batch stops
            try:
                self.batch = await self.store.record_batch_results(self.batch.id, ready)
            except BaseException:
                self._pending[:0] = ready  # kept for the next try
                raise

    async def _within_quota(self, ready: list[BatchResult]) -> bool:
        """False, and the batch told to stop with its error, when keeping `ready` would take the
        batch's owner past its storage quota."""
        try:
            await self.worker.data.check_quota(self.batch.owner, sum(len(r.text.encode()) for r in ready))
        except GatewayError as exc:
            if exc.code != "storage_quota_exceeded":  # the store could not say: kept for the next try
                self._pending[:0] = ready
                raise StoreError(exc.message) from exc
            first = min(r.line for r in ready)
            self.quota_error = {"code": "storage_quota_exceeded", "param": None, "line": first,
                                "message": f"the batch stopped at line {first}: keeping its results would pass "
                                           f"the storage quota; {exc.message}"}
            self.reason = "storage_quota"
            self.stop.set()
            logs.event(log, "batch stopped at the storage quota", logging.WARNING, batch_id=self.batch.id,
                       line=first)
            return False
        return True

    async def _line(self, line: Line, principal: Principal) -> BatchResult | None:
        """A line's result; None when the batch stopped while the line waited to be tried again.

        A refusal that says when to come back (a rate limit, a full queue, a
        busy model: Retry-After) is waited out as often as it comes, within
        the batch's window; a failure without one is tried LINE_ATTEMPTS
        times; a 429 without one (a spent budget) is final."""
        body = dumps({k: v for k, v in line.body.items() if k not in ("stream", "stream_options")})
        attempt = 0
        while True:
            attempt += 1
            status, raw, request_id, retry_after = await self.worker.send(self.batch, body, principal)
            if status not in RETRY_STATUSES or self.stop.is_set():
                break
            if retry_after is not None:
                pause = min(MAX_PAUSE, max(0.1, retry_after))
            elif status == 429 or attempt >= self.worker.line_attempts:
                break
            else:
                pause = min(MAX_PAUSE, self.worker.retry_pause * 2 ** (attempt - 1))
            if dt.datetime.now(dt.UTC) + dt.timedelta(seconds=pause) >= self.batch.expires_at:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), pause)
            if self.stop.is_set():
                return None
        try:
            answer = loads(raw) if raw else None
        except ValueError:
            answer = {"error": {"message": "the answer was not JSON", "type": "server_error", "code": "bad_answer"}}
        record = {"id": "batch_req_" + secrets.token_hex(12), "custom_id": line.custom_id,
                  "response": {"status_code": status, "request_id": request_id, "body": answer}, "error": None}
        return BatchResult(line=line.number, custom_id=line.custom_id, ok=200 <= status < 300,
                           text=dumps(record).decode())

    def _not_run(self, line: Line) -> BatchResult:
        code, said = {
            "cancelled": ("batch_cancelled", "the batch was cancelled before this request ran"),
            "expired": ("batch_expired", "the batch's completion window ended before this request ran"),
        }.get(self.reason or "", ("batch_failed", "this request was not run"))
        record = {"id": "batch_req_" + secrets.token_hex(12), "custom_id": line.custom_id, "response": None,
                  "error": {"code": code, "message": said}}
        return BatchResult(line=line.number, custom_id=line.custom_id, ok=False, text=dumps(record).decode())

    def _refused(self, line: Line, exc: AuthError) -> BatchResult:
        record = {"id": "batch_req_" + secrets.token_hex(12), "custom_id": line.custom_id,
                  "response": {"status_code": exc.status, "request_id": None,
                               "body": loads(error_body(exc.message, "authentication_error", exc.code))},
                  "error": None}
        return BatchResult(line=line.number, custom_id=line.custom_id, ok=False, text=dumps(record).decode())


__all__ = ["LEASE_NAME", "BatchRun", "BatchWorker", "InputCheck", "Line", "parse_input", "read_input"]
