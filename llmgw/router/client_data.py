"""What clients keep with the gateway, put together: threads, memory notes and MCP, files and batches, the answer cache.

`install(app, gateway)` (called by `make_router_app`) puts a `ClientData`
on the app and adds its routes; the server starts it on the store once the
gateway runs (`start(store)`), which starts the batch worker and the
janitor that forgets expired threads and files. Without a store (a gateway
built only for a test) every stored feature is refused or off.

The pipeline reaches the per-request parts through small hooks: `threads.attach`
(a stored conversation in front of the new turn), `cache.lookup` (an answer
already given), and the `Call.hooks` they leave, which see the answer
(`wrap_stream`, `saw_answer`) and keep it when the request ends (`end_hooks`).

Shared here: who owns what (`owner_of`, `project_of`), the projects'
switches kept `FEATURES_TTL` seconds and read ahead, store refusals as client
errors, and the per-thread locks that make a thread's turns take turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from aiohttp import web

from llmgw.auth.principal import ANONYMOUS, Principal
from llmgw.obs import logs
from llmgw.router.errors import JSON, GatewayError, bad_request, dumps
from llmgw.router.gateway import GATEWAY, Gateway
from llmgw.router.read_ahead import ReadAhead
from llmgw.store import Conflict, Invalid, NotFound, Store, StoreError, StoreUnavailable
from llmgw.store.client_data import ANONYMOUS_OWNER, ProjectFeatures
from llmgw.tasks import cancel_and_wait

log = logs.get("llmgw.router.client_data")

#: Seconds a project's switches are trusted, read again ahead of a request from half of it on
#: (`llmgw keys threads|memory|cache`).
FEATURES_TTL = 30.0
#: Seconds between two rounds of forgetting expired threads and files.
JANITOR_EVERY = 600.0


class ClientData:
    """The stored features of one gateway: the store, the projects' switches, the answer cache,
    thread locks, the models' context lengths and the batch worker."""

    def __init__(self, gateway: Gateway, *, clock: Callable[[], float] = time.monotonic) -> None:
        from llmgw.router.cache import ResponseCache

        self.gateway = gateway
        self.config = gateway.config
        self.store: Store | None = None
        cache = gateway.config.router.cache
        self.cache = ResponseCache(int(cache.max_bytes), int(cache.max_entry_bytes), clock=clock)
        self.thread_locks = KeyedLocks()
        #: model -> (tokens, monotonic time it was learnt), see llmgw.router.threads.context_length
        self.context_lengths: dict[str, tuple[int, float]] = {}
        self.worker: Any = None  # a llmgw.router.batch_worker.BatchWorker once started on a store
        self._clock = clock
        self._features: ReadAhead[str, ProjectFeatures] = ReadAhead(self._read_features, FEATURES_TTL, clock=clock)
        self._janitor: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------

    async def start(self, store: Store | None, app: web.Application, *, batch_poll: float = 2.0) -> None:
        """Begin serving stored features from `store` (None: they stay off)."""
        self.store = store
        if store is None:
            logs.event(log, "no store: threads, memory notes, files, batches and the answer cache are off",
                       logging.INFO)
            return
        from llmgw.router.batch_worker import BatchWorker

        self.worker = BatchWorker(app, self, poll=batch_poll)
        self.worker.start()
        self._janitor = asyncio.create_task(self._janitor_loop(), name="llmgw-client-data-janitor")

    async def close(self) -> None:
        janitor, self._janitor = self._janitor, None
        await cancel_and_wait(janitor)
        if self.worker is not None:
            await self.worker.stop()
            self.worker = None

    async def _janitor_loop(self) -> None:
        while True:
            await asyncio.sleep(JANITOR_EVERY)
            await self.forget_expired()

    async def forget_expired(self) -> tuple[int, int]:
        """Remove threads past their retention and files past their expiry; (threads, files)."""
        store = self.store
        if store is None:
            return 0, 0
        try:
            threads = await store.delete_expired_threads()
            files = await store.delete_expired_files()
            from llmgw.router.kept_requests import sweep

            await sweep(store)  # kept requests past their rule's time
        except StoreError as exc:
            logs.event(log, "forgetting expired threads and files failed", logging.WARNING, error=str(exc))
            return 0, 0
        if threads or files:
            logs.event(log, "expired threads and files forgotten", threads=threads, files=files)
        return threads, files

    # -- the store and the projects' switches -------------------------------------

    def require_store(self, what: str) -> Store:
        if self.store is None:
            raise GatewayError(503, "store_unavailable", f"this gateway keeps no {what}: it runs without a store")
        return self.store

    async def check_quota(self, owner: str, adding: int = 0) -> None:
        """413 when what `owner` keeps, with `adding` bytes more, would pass router.clients.project_storage_bytes."""
        if self.store is None:
            return
        owner = owner or ANONYMOUS_OWNER  # a gateway without keys: everyone together
        quota = int(self.config.router.clients.project_storage_bytes)
        with store_errors("the storage quota"):
            own = (await self.features(owner)).storage_quota_bytes  # `llmgw keys quota`
            quota = quota if own is None else own
            if not quota:
                return
            used = await self.store.storage_used(owner)
        if used + adding > quota:
            raise GatewayError(
                413, "storage_quota_exceeded",
                f"this project keeps {_mib(used)} and may keep {_mib(quota)} "
                + ("(router.clients.project_storage_bytes)" if own is None else "(its own quota, llmgw keys quota)")
                + (f"; this adds {_mib(adding)}" if adding else "")
                + ": delete files (DELETE /v1/files/{id}), threads or memory notes it no longer needs, "
                  "or ask an operator for more", param=None)

    async def features(self, project_id: str) -> ProjectFeatures:
        """A project's switches, kept FEATURES_TTL seconds and read again ahead of that (llmgw.router.read_ahead)."""
        return await self._features.get(project_id)

    async def _read_features(self, project_id: str) -> ProjectFeatures:
        return await self.require_store("project settings").get_project_features(project_id)

    def forget_features(self, project_id: str | None = None) -> None:
        """Read a project's switches (or every one) again on next use."""
        self._features.forget(project_id)


def client_data(request: web.Request) -> ClientData:
    data = request.app.get(CLIENT_DATA)
    if data is None:
        raise GatewayError(503, "store_unavailable", "this gateway keeps nothing for clients")
    return data


# ---------------------------------------------------------------- who owns what


async def authenticate(request: web.Request) -> Principal:
    return await request.app[GATEWAY].authenticate(request)


def owner_of(principal: Principal) -> str:
    """Files and batches belong to the key's project, else its person, else everyone (no keys)."""
    if principal is ANONYMOUS:
        return ANONYMOUS_OWNER
    return principal.project_id or principal.user_id or principal.key_id or ANONYMOUS_OWNER


def project_of(principal: Principal, what: str) -> str:
    """The key's project; a 400 for a key of no project (a personal key, or none at all)."""
    if principal.project_id:
        return principal.project_id
    if principal is ANONYMOUS:
        raise bad_request(f"{what} belong to a project, and this gateway takes no keys: there is no project",
                          code="project_required")
    raise bad_request(f"{what} belong to a project: use a key of a project, not a personal key",
                      code="project_required")


def no_store(gw: Gateway, principal: Principal) -> bool:
    """True when a guardrails policy with `no_store` applies to the key: nothing of it is kept."""
    guard = getattr(gw, "guard", None)
    book = getattr(guard, "book", None)
    if book is None:
        return False
    try:
        effective = book.effective(principal)
    except Exception:  # the guardrails' own failures are theirs to report
        log.exception("reading the guardrails' no_store failed")
        return False
    return bool(effective is not None and getattr(effective.enforced, "no_store", False))


@contextlib.contextmanager
def store_errors(what: str) -> Iterator[None]:
    """The store's refusals as the client's errors: 400, 404, 409, 503."""
    try:
        yield
    except Invalid as exc:
        raise bad_request(str(exc)) from None
    except NotFound as exc:
        raise GatewayError(404, "not_found", str(exc)) from None
    except Conflict as exc:
        raise GatewayError(409, "conflict", str(exc)) from None
    except StoreUnavailable as exc:
        raise GatewayError(503, "store_unavailable", f"{what} cannot be reached right now; retry shortly",
                           retry_after=2) from exc
    except StoreError as exc:
        log.warning("store failed: %s", exc)
        raise GatewayError(503, "store_unavailable", f"{what} cannot be reached right now; retry shortly",
                           retry_after=2) from exc


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=dumps(value), content_type=JSON, headers=headers)


async def read_json_object(request: web.Request, what: str, operation: str | None = None) -> dict:
    """The body as a JSON object, through every check of llmgw.router.body (and `operation`'s schema)."""
    from llmgw.router.body import read_json_body

    try:
        _, body = await read_json_body(request, request.app[GATEWAY], operation)
    except GatewayError as exc:
        exc.message = f"{what}: {exc.message}"
        raise
    return body


def _mib(n: int) -> str:
    return f"{n / 1024**2:.1f} MiB"


# ---------------------------------------------------------------- locks per thread


class KeyedLocks:
    """One asyncio lock per key, made on first use and dropped when no one holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[Any, list] = {}  # key -> [lock, users]

    async def acquire(self, key: Any) -> Callable[[], None]:
        """Wait for the key's lock; returns the function that releases it (once)."""
        entry = self._locks.setdefault(key, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            await entry[0].acquire()
        except BaseException:
            self._drop(key, entry)
            raise
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                entry[0].release()
                self._drop(key, entry)

        return release

    def _drop(self, key: Any, entry: list) -> None:
        entry[1] -= 1
        if entry[1] == 0 and self._locks.get(key) is entry:
            del self._locks[key]

    def __len__(self) -> int:
        return len(self._locks)


# ---------------------------------------------------------------- the pipeline's hooks


class Recorder:
    """A stream relay that passes everything on and shows each piece it released to `sink`.

    Wraps whatever relay the pipeline built (the guardrails' one included,
    whose `feed` may return an awaitable); any other attribute is the
    wrapped relay's."""

    __slots__ = ("_inner", "_sink")

    def __init__(self, inner: Any, sink: Callable[[bytes], None]) -> None:
        self._inner = inner
        self._sink = sink

    def feed(self, data: bytes) -> Any:
        return self._seen(self._inner.feed(data))

    def close(self) -> Any:
        return self._seen(self._inner.close())

    def _seen(self, out: Any) -> Any:
        if isinstance(out, (bytes, bytearray)):
            if out:
                self._sink(bytes(out))
            return out
        return self._later(out)

    async def _later(self, pending: Awaitable[bytes]) -> bytes:
        out = await pending
        if out:
            self._sink(bytes(out))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def wrap_stream(call: Any, relay: Any) -> Any:
    """The relay each hook of the request wants to see the stream through."""
    if relay is None:
        return None
    for hook in call.hooks:
        relay = hook.wrap(relay)
    return relay


def saw_answer(call: Any, status: int, raw: bytes) -> None:
    """Show a whole (not streamed) answer, as the client gets it, to the request's hooks."""
    for hook in call.hooks:
        try:
            hook.whole(status, raw)
        except Exception:
            log.exception("an answer hook failed", extra={"fields": {"request_id": call.request_id}})


async def end_hooks(call: Any, hooks: list[Any] | None = None) -> None:
    """Let each hook (of `hooks`, else all the call's) keep what it saw (or not, by the request's outcome)
    and let go of what it holds.

    A hook's work runs to its end even when the request is cancelled
    meanwhile; the cancellation is asked for again afterwards, so the
    pipeline's own settling sees it as it would have."""
    interrupted = False
    for hook in call.hooks if hooks is None else hooks:
        task = asyncio.ensure_future(hook.end(call))
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                interrupted = True
            except Exception:  # noqa: BLE001 - the hook's failure is logged just below
                break
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.error("an answer hook failed: %s", task.exception(),
                      extra={"fields": {"request_id": call.request_id}})
    if interrupted:
        current = asyncio.current_task()
        if current is not None:
            current.cancel()


# ---------------------------------------------------------------- the app


def install(app: web.Application, gateway: Gateway) -> ClientData:
    """Put a ClientData on the router app and add the routes of threads, memory, MCP, files and batches."""
    from llmgw.router import batches, files, mcp, memory, threads

    data = ClientData(gateway)
    app[CLIENT_DATA] = data
    app.router.add_routes([
        web.delete("/v1/threads/{thread_id}", threads.delete_thread),
        web.get("/v1/memory", memory.search_notes),
        web.get("/v1/memory/{key}", memory.get_note),
        web.put("/v1/memory/{key}", memory.put_note),
        web.delete("/v1/memory/{key}", memory.delete_note),
        web.post("/mcp", mcp.handle),
        web.post("/v1/files", files.upload),
        web.get("/v1/files", files.list_files),
        web.get("/v1/files/{file_id}", files.get_file),
        web.get("/v1/files/{file_id}/content", files.file_content),
        web.delete("/v1/files/{file_id}", files.delete_file),
        web.post("/v1/batches", batches.create_batch),
        web.get("/v1/batches", batches.list_batches),
        web.get("/v1/batches/{batch_id}", batches.get_batch),
        web.post("/v1/batches/{batch_id}/cancel", batches.cancel_batch),
    ])
    return data


CLIENT_DATA = web.AppKey("client_data", ClientData)

__all__ = [
    "ANONYMOUS_OWNER", "CLIENT_DATA", "ClientData", "KeyedLocks", "Recorder", "authenticate", "client_data",
    "end_hooks", "install", "json_response", "no_store", "owner_of", "project_of", "read_json_object",
    "saw_answer", "store_errors", "wrap_stream",
]
