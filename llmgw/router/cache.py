"""The answer cache: the same request of the same project answered again from memory.

Opt-in per project with a TTL (`llmgw keys cache PROJECT --on --ttl 10m`).
A request's key is a hash of its project, its endpoint, the model it names
(aliases resolved) and its body written the same way every time (keys
sorted; `user` and `metadata`, which do not change an answer, left out),
so only an exact repeat hits. What is kept is the answer as the client got
it: a whole answer's bytes, or a stream's pieces, replayed as the same
pieces. Answers live in this process's memory only, least recently used
first out, within `router.cache.max_bytes`; an answer larger than
`router.cache.max_entry_bytes` is not kept.

Every answer of a project with the cache on says `x-llmgw-cache: hit` or
`miss`. A hit is recorded as a usage row with outcome `cache_hit`, no
tokens and no cost; it has passed the key's limits like any request (the
pipeline looks here after the limits and the guardrails' input check) but
waits for no replica. `Cache-Control: no-cache` skips the look-up (the
answer is kept anew), `no-store` skips the cache altogether. Requests on a
thread, and keys under a guardrails policy with `no_store`, never use it.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import attrs
from aiohttp import web

from llmgw.obs import logs
from llmgw.router.client_data import CLIENT_DATA, Recorder, no_store
from llmgw.router.errors import JSON, OK
from llmgw.router.gateway import Gateway
from llmgw.router.proxy import SSE_HEADERS
from llmgw.router.threads import THREAD, THREAD_HEADER
from llmgw.store import StoreError

log = logs.get("llmgw.router.cache")

CACHE_HEADER = "x-llmgw-cache"
#: The usage row's outcome of an answer from the cache.
CACHE_HIT = "cache_hit"
#: The endpoints whose answers are kept: OpenAI's, whose bytes the client gets as the engine sent them.
CACHED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})
#: Body fields that do not change the answer.
_IGNORED_FIELDS = ("user", "metadata")
#: What an entry costs besides its bytes (the key, the record).
_ENTRY_OVERHEAD = 256


@attrs.define(slots=True)
class CachedAnswer:
    status: int
    content_type: str
    body: bytes | None  # a whole answer
    chunks: tuple[bytes, ...] | None  # a stream, piece by piece
    expires: float  # monotonic
    size: int


class ResponseCache:
    """Answers by key, least recently used first out, within a byte budget."""

    def __init__(self, max_bytes: int, max_entry_bytes: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes = max(0, max_bytes)
        self.max_entry_bytes = max(0, min(max_entry_bytes, self.max_bytes))
        self.clock = clock
        self.bytes = 0
        self.hits = self.misses = 0
        self._entries: OrderedDict[str, CachedAnswer] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> CachedAnswer | None:
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        if entry.expires <= self.clock():
            self._drop(key)
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry

    def put(self, key: str, *, status: int, content_type: str, ttl: float, body: bytes | None = None,
            chunks: tuple[bytes, ...] | None = None) -> bool:
        """Keep an answer for `ttl` seconds; False when it is too large to keep."""
        size = _ENTRY_OVERHEAD + len(key) + (len(body) if body is not None else sum(len(c) for c in chunks or ()))
        if ttl <= 0 or size > self.max_entry_bytes:
            return False
        if key in self._entries:
            self._drop(key)
        self._entries[key] = CachedAnswer(status, content_type, body, chunks, self.clock() + ttl, size)
        self.bytes += size
        while self.bytes > self.max_bytes and self._entries:
            self._drop(next(iter(self._entries)))
        return True

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key)
        self.bytes -= entry.size


def cache_key(project: str, path: str, model: str, body: dict) -> str:
    """The hash a request is kept and found under."""
    request = {k: v for k, v in body.items() if k not in _IGNORED_FIELDS}
    request["model"] = model
    try:
        import orjson

        text = orjson.dumps(request, option=orjson.OPT_SORT_KEYS)
    except ImportError:  # pragma: no cover - orjson is in the build
        import json

        text = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    digest = hashlib.sha256()
    for part in (project.encode(), path.encode(), text):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


async def lookup(gw: Gateway, call: Any, request: web.Request, body: dict) -> web.StreamResponse | None:
    """The kept answer to this request, sent; else None, and the answer is kept when it comes."""
    data = request.app.get(CLIENT_DATA)
    principal = call.principal
    if data is None or data.store is None or principal is None or not principal.project_id:
        return None
    if request.path not in CACHED_PATHS or request.get(THREAD) or THREAD_HEADER in request.headers:
        return None  # a thread's answer depends on what is stored, not only on the request
    try:
        features = await data.features(principal.project_id)
    except StoreError as exc:  # the cache is a nicety: without the setting, the request goes on
        logs.event(log, "cache setting not read", error=str(exc), request_id=call.request_id)
        return None
    if not features.cache or (call.guard is not None and getattr(call.guard, "no_store", False)) \
            or no_store(gw, principal):
        return None
    control = request.headers.get("Cache-Control", "").lower()
    call.headers[CACHE_HEADER] = "miss"
    if "no-store" in control:
        return None
    key = cache_key(principal.project_id, request.path, call.model, body)
    if "no-cache" not in control:
        entry = data.cache.get(key)
        if entry is not None:
            return await _replay(call, request, entry)
    call.hooks.append(CacheKeeper(data.cache, key, features.cache_ttl.total_seconds()))
    return None


async def _replay(call: Any, request: web.Request, entry: CachedAnswer) -> web.StreamResponse:
    call.status, call.outcome = entry.status, CACHE_HIT
    call.headers[CACHE_HEADER] = "hit"
    headers = dict(call.headers)
    if entry.chunks is None:
        return web.Response(status=entry.status, body=entry.body, headers={**headers, "Content-Type": entry.content_type})
    response = web.StreamResponse(status=entry.status, headers={**SSE_HEADERS, **headers})
    await response.prepare(request)
    for chunk in entry.chunks:
        await response.write(chunk)
    await response.write_eof()
    return response


class CacheKeeper:
    """Sees an answer as the client gets it and keeps it when the request ended well."""

    def __init__(self, cache: ResponseCache, key: str, ttl: float) -> None:
        self.cache = cache
        self.key = key
        self.ttl = ttl
        self.body: bytes | None = None
        self.chunks: list[bytes] | None = None
        self.relay: Any = None
        self._size = 0
        self._too_big = False

    def wrap(self, relay: Any) -> Any:
        self.chunks, self._size, self._too_big = [], 0, False
        self.relay = relay
        return Recorder(relay, self._piece)

    def _piece(self, data: bytes) -> None:
        if self._too_big or self.chunks is None:
            return
        self._size += len(data)
        if self._size > self.cache.max_entry_bytes:
            self._too_big, self.chunks = True, None
            return
        self.chunks.append(data)

    def whole(self, status: int, raw: bytes) -> None:
        if status == 200:
            self.body = raw

    async def end(self, call: Any) -> None:
        if call.outcome != OK or call.status != 200:
            return
        if self.body is not None:
            self.cache.put(self.key, status=200, content_type=JSON, ttl=self.ttl, body=self.body)
        elif self.chunks and not self._too_big and getattr(self.relay, "done", False):
            # Only a stream that ran to its [DONE] is kept: a cut one would be replayed cut.
            self.cache.put(self.key, status=200, content_type=SSE_HEADERS["Content-Type"], ttl=self.ttl,
                           chunks=tuple(self.chunks))


__all__ = ["CACHED_PATHS", "CACHE_HEADER", "CACHE_HIT", "CacheKeeper", "CachedAnswer", "ResponseCache", "cache_key",
           "lookup"]
