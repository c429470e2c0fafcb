"""API keys: making secrets, and resolving a secret to a principal fast.

A secret is ``llmgw-`` and 40 URL-safe random characters. The store keeps
only its hash (an HMAC with the cluster's secret: llmgw.auth.key_hash; a
plain SHA-256 for keys made without it, moved to the HMAC at first use) and
the first 12 characters, the visible prefix
people recognise a key by; the secret itself is shown once, when made.

:class:`KeyResolver` is what the serving path asks. It answers from a small
in-memory cache (found and not-found keys alike, for a few seconds), joins
concurrent look-ups of the same key into one store query, and writes
"last used" times to the store in bulk every few seconds, so a request
waits on the store only for a key it has not seen lately.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping

import attrs

from llmgw.adapters.names import base_aliases
from llmgw.auth.key_hash import KeyHasher
from llmgw.auth.principal import AuthError, Principal
from llmgw.store import ResolvedKey, Store, StoreError
from llmgw.tasks import cancel_and_wait

log = logging.getLogger("llmgw.auth")

UTC = dt.UTC

#: Every secret llmgw makes starts with this, so a leaked one is recognisable.
KEY_PREFIX = "llmgw-"
#: Random characters after KEY_PREFIX (30 random bytes, URL-safe base64).
SECRET_RANDOM_CHARS = 40
#: Characters of the secret kept and shown: the prefix and 6 random ones.
VISIBLE_PREFIX_LEN = 12
#: Seconds between two warnings that keys are served as last seen (the store not answering), however many requests.
STALE_WARN_EVERY = 30.0
# Longer than anything we issue by far; a bigger "key" is not worth hashing.
_MAX_SECRET_LEN = 512


def new_secret() -> str:
    """A fresh key secret: ``llmgw-`` + 40 URL-safe random characters."""
    return KEY_PREFIX + secrets.token_urlsafe(SECRET_RANDOM_CHARS * 3 // 4)


def hash_secret(secret: str) -> str:
    """The plain SHA-256 of a secret (64 lower-case hex digits): how keys made
    without the cluster's secret are stored (see llmgw.auth.key_hash)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def visible_prefix(secret: str) -> str:
    """The part of a secret that may be shown and stored in clear."""
    return secret[:VISIBLE_PREFIX_LEN]


def looks_like_secret(text: str) -> bool:
    """True when ``text`` has the shape of a secret llmgw issues."""
    return (
        text.startswith(KEY_PREFIX)
        and len(text) == len(KEY_PREFIX) + SECRET_RANDOM_CHARS
        and all(c.isalnum() or c in "-_" for c in text)
    )


# ---- the principal of a resolved key -----------------------------------------


def model_aliases(config) -> dict[str, str]:
    """Every model name and alias in a ServerConfig, mapped to the model's name."""
    names: dict[str, str] = {}
    for model in getattr(config, "models", ()) or ():
        names[model.name] = model.name
        for alias in model.aliases:
            names.setdefault(alias, model.name)
    for name, base in base_aliases(getattr(config, "models", ()) or ()).items():  # adapters: allowed as their base
        names.setdefault(name, base)
    return names


def allowed_models_of(
    resolved: ResolvedKey, aliases: Mapping[str, str] | None = None
) -> frozenset[str] | None:
    """Every allowlist on the key's chain and the key's own, intersected.

    With ``aliases`` (name or alias -> model name) lists are compared by
    model, so ``llama`` in one and ``llama-3.1-8b`` in another is the same
    model; the answer then holds each allowed model's name and aliases, so
    ``Principal.may_use`` accepts either spelling.
    """
    canonical = (lambda m: aliases.get(m, m)) if aliases else (lambda m: m)
    lists: list[Iterable[str]] = [lim.allowed_models for lim in resolved.limits if lim.allowed_models is not None]
    if resolved.key.allowed_models is not None:
        lists.append(resolved.key.allowed_models)
    if not lists:
        return None
    allowed = set.intersection(*({canonical(m) for m in models} for models in lists))
    if aliases:
        allowed |= {name for name, model in aliases.items() if model in allowed}
    return frozenset(allowed)


def principal_of(resolved: ResolvedKey, aliases: Mapping[str, str] | None = None) -> Principal:
    """The principal of a key as the store resolved it (usable or not)."""
    key = resolved.key
    ends = [t for t in (key.expires_at, key.revoked_at) if t is not None]
    return Principal(
        key_id=key.id,
        key_prefix=key.prefix,
        key_name=key.name,
        kind=key.kind,
        org_id=resolved.org_id,
        team_id=resolved.team_id,
        project_id=key.project_id,
        user_id=key.user_id,
        band=key.priority_band,
        allowed_models=allowed_models_of(resolved, aliases),
        limits=tuple(resolved.limits),
        expires_at=min(ends) if ends else None,
        in_cluster=resolved.in_cluster,
        routing=resolved.routing,  # routing profiles: the narrowest set over the key
    )


def refuse_unusable(resolved: ResolvedKey, now: dt.datetime) -> None:
    """Raise the AuthError for a key that cannot be used at ``now``; nothing otherwise."""
    key = resolved.key
    if key.revoked_at is not None and key.revoked_at <= now:
        raise AuthError(
            401, "invalid_api_key",
            f"API key {key.prefix}… was revoked on {_when(key.revoked_at)}; ask for a new one",
        )
    if key.expires_at is not None and key.expires_at <= now:
        raise AuthError(
            401, "invalid_api_key",
            f"API key {key.prefix}… expired on {_when(key.expires_at)}; ask for a new one",
        )
    if key.user_id is not None and resolved.user_state not in (None, "active"):
        state = "awaiting approval" if resolved.user_state == "pending" else resolved.user_state
        raise AuthError(
            403, "account_suspended",
            f"the account that owns API key {key.prefix}… is {state}; ask an administrator",
        )


def _when(t: dt.datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


UNKNOWN_KEY = "the API key is not valid: check that it was copied whole, or ask for a new one"
NO_KEY = "no API key given: send it as `Authorization: Bearer <key>`"


# ---- the resolver ------------------------------------------------------------


@attrs.define(eq=False)
class _Entry:
    resolved: ResolvedKey | None  # None: no such key
    principal: Principal | None
    loaded: float  # monotonic time of the look-up


class KeyResolver:
    """Secrets to principals, cached; implements ``KeyResolverProtocol``.

    ``ttl``: seconds a found key is trusted before it is read again (changes
    made by another process, such as ``llmgw keys revoke``, apply within it);
    ``negative_ttl``: the same for a secret no key has; ``max_entries``
    bounds the cache (least recently used go first); ``touch_interval``:
    how often last-used times are written; ``stale_grace``: how long a cached
    key still answers while the store cannot be reached. ``aliases`` maps
    model names and aliases to model names (see :func:`model_aliases`).
    ``hasher`` hashes secrets as the store keeps them; a key still stored
    under the plain SHA-256 is found by it and moved to the keyed hash.
    ``clock`` (aware datetimes) and ``monotonic`` are for tests.
    """

    def __init__(
        self,
        store: Store,
        *,
        ttl: float = 5.0,
        negative_ttl: float = 5.0,
        max_entries: int = 50_000,
        touch_interval: float = 5.0,
        stale_grace: float = 300.0,
        aliases: Mapping[str, str] | None = None,
        hasher: KeyHasher | None = None,
        clock: Callable[[], dt.datetime] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.hasher = hasher or KeyHasher()
        self.ttl = float(ttl)
        self.negative_ttl = float(negative_ttl)
        self.max_entries = max(1, int(max_entries))
        self.touch_interval = float(touch_interval)
        self.stale_grace = float(stale_grace)
        self.aliases = dict(aliases) if aliases else None
        self._clock = clock or (lambda: dt.datetime.now(UTC))
        self._monotonic = monotonic
        self._cache: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        self._hash_of: dict[str, str] = {}  # key id -> hash, for invalidate(key_id)
        self._inflight: dict[str, asyncio.Task[_Entry]] = {}
        self._moving: dict[str, asyncio.Task[_Entry]] = {}  # plain hash -> its move to the keyed hash
        self._last_used: dict[str, dt.datetime] = {}
        self._touch_task: asyncio.Task[None] | None = None
        #: keys served as last seen while the store does not answer: said in the log at most every STALE_WARN_EVERY
        self._stale_warned_at = float("-inf")
        self._stale_served = 0
        #: store look-ups made (for tests and metrics)
        self.lookups = 0

    # ---- KeyResolverProtocol -------------------------------------------------

    async def resolve(self, secret: str) -> Principal:
        if not isinstance(secret, str) or not secret.strip():
            raise AuthError(401, "invalid_api_key", NO_KEY)
        secret = secret.strip()
        if len(secret) > _MAX_SECRET_LEN or any(c.isspace() for c in secret):
            raise AuthError(401, "invalid_api_key", UNKNOWN_KEY)
        key_hash = self.hasher.hash(secret)
        entry = await self._entry(key_hash)
        if entry.resolved is None and self.hasher.keyed:
            entry = await self._upgrade(secret, key_hash, entry)
        if entry.resolved is None or entry.principal is None:
            raise AuthError(401, "invalid_api_key", UNKNOWN_KEY)
        now = self._clock()
        refuse_unusable(entry.resolved, now)
        self._last_used[entry.resolved.key.id] = now
        return entry.principal

    async def _upgrade(self, secret: str, keyed_hash: str, missing: _Entry) -> _Entry:
        """A key stored under its plain SHA-256: found by it and moved to the keyed hash."""
        plain = hash_secret(secret)
        before, asked = self._cache.get(plain), self._monotonic()
        entry = await self._entry(plain)
        if entry.resolved is None:
            # found by its plain hash until now, or not found by it just now: it may have been moved by another
            # gateway or worker since the keyed hash was looked up, so that is looked up again (once: both "not
            # found" entries are then cached, and an unknown key costs no more queries until they expire)
            if (before is not None and before.resolved is not None) or entry.loaded >= asked:
                self._cache.pop(keyed_hash, None)  # its "not found" entry, maybe older than the move
                return await self._entry(keyed_hash)
            return missing
        # One move a key at a time: a busy key's first requests all find it under its plain hash, and each
        # moving it itself was one write transaction each, queued in the store one after another.
        task = self._moving.get(plain)
        if task is None:
            task = asyncio.create_task(self._move(entry, plain, keyed_hash))
            self._moving[plain] = task
            task.add_done_callback(lambda _t, p=plain: self._moving.pop(p, None))
        return await asyncio.shield(task)

    async def _move(self, entry: _Entry, plain: str, keyed_hash: str) -> _Entry:
        key_id = entry.resolved.key.id
        try:
            moved = await self.store.rehash_key(key_id, plain, keyed_hash)
        except StoreError as exc:
            log.warning("could not move a key to the keyed hash; it still works and is tried again at its next use",
                        extra={"fields": {"key_id": key_id, "error": str(exc)}})
            return entry
        if moved:
            log.info("key moved to the keyed hash", extra={"fields": {"key_id": key_id}})
            self._cache.pop(plain, None)
            self._cache.pop(keyed_hash, None)  # its "not found" entry
            self._hash_of.pop(key_id, None)
        else:  # moved by another gateway or worker first: found under the keyed hash from the next request on
            self._cache.pop(keyed_hash, None)
        return entry

    def invalidate(self, key_id: str | None = None) -> None:
        if key_id is None:
            self._cache.clear()
            self._hash_of.clear()
            # A look-up already running may hold the old state: let it finish
            # for its waiters, but do not keep its answer.
            self._inflight.clear()
            return
        key_hash = self._hash_of.pop(key_id, None)
        if key_hash is not None:
            self._cache.pop(key_hash, None)
            self._inflight.pop(key_hash, None)

    # ---- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Start writing last-used times every ``touch_interval`` seconds."""
        if self._touch_task is None:
            self._touch_task = asyncio.create_task(self._touch_loop(), name="llmgw-key-touch")

    async def stop(self) -> None:
        """Stop the writer and write what is left."""
        task, self._touch_task = self._touch_task, None
        await cancel_and_wait(task)
        await self.flush_last_used()

    async def flush_last_used(self) -> int:
        """Write the last-used times gathered so far; returns how many keys changed."""
        if not self._last_used:
            return 0
        batch, self._last_used = self._last_used, {}
        try:
            return await self.store.touch_keys(batch)
        except StoreError as exc:
            # Keep them for the next round; a newer use since then wins.
            for key_id, when in batch.items():
                if self._last_used.get(key_id, when) <= when:
                    self._last_used[key_id] = when
            log.warning("could not record when keys were last used: %s", exc,
                        extra={"fields": {"keys": len(batch)}})
            return 0

    async def _touch_loop(self) -> None:
        while True:
            await asyncio.sleep(self.touch_interval)
            await self.flush_last_used()

    # ---- the cache ---------------------------------------------------------------

    @property
    def cached(self) -> int:
        """How many secrets (found or not) the cache holds."""
        return len(self._cache)

    async def _entry(self, key_hash: str) -> _Entry:
        now = self._monotonic()
        entry = self._cache.get(key_hash)
        if entry is not None:
            age = now - entry.loaded
            limit = self.ttl if entry.resolved is not None else self.negative_ttl
            if age < limit:
                self._cache.move_to_end(key_hash)
                if entry.resolved is not None and age >= limit / 2:
                    self._lookup(key_hash)  # refresh ahead, so a busy key never waits
                return entry
        try:
            return await asyncio.shield(self._lookup(key_hash))
        except StoreError as exc:
            if entry is not None and entry.resolved is not None and now - entry.loaded < self.stale_grace:
                self._stale_served += 1
                if now - self._stale_warned_at >= STALE_WARN_EVERY:  # once a while, not once a request
                    log.warning("the store did not answer; using keys as last seen: %s", exc,
                                extra={"fields": {"key_id": entry.resolved.key.id,
                                                  "requests": self._stale_served}})
                    self._stale_warned_at, self._stale_served = now, 0
                return entry
            raise AuthError(
                503, "auth_unavailable", "API keys cannot be checked right now (the store does not answer); retry shortly"
            ) from exc

    def _lookup(self, key_hash: str) -> asyncio.Task[_Entry]:
        """The running look-up of this hash, or a new one: one store query per key at a time."""
        task = self._inflight.get(key_hash)
        if task is None:
            task = asyncio.create_task(self._load(key_hash))
            self._inflight[key_hash] = task
            task.add_done_callback(lambda t, h=key_hash: self._loaded(h, t))
        return task

    async def _load(self, key_hash: str) -> _Entry:
        self.lookups += 1
        resolved = await self.store.resolve_key(key_hash)
        principal = None if resolved is None else principal_of(resolved, self.aliases)
        return _Entry(resolved, principal, self._monotonic())

    def _loaded(self, key_hash: str, task: asyncio.Task[_Entry]) -> None:
        if self._inflight.get(key_hash) is not task:
            return  # invalidated while it ran: its answer may be stale
        del self._inflight[key_hash]
        if task.cancelled() or task.exception() is not None:
            return
        entry = task.result()
        if entry.resolved is None and getattr(self._cache.get(key_hash), "resolved", None) is not None:
            # a key gone from this hash (deleted, or moved by another gateway or worker to the keyed hash):
            # "not found" entries older than that may be wrong now, so they are looked up again
            for stale in [h for h, e in self._cache.items() if e.resolved is None]:
                del self._cache[stale]
        self._cache[key_hash] = entry
        self._cache.move_to_end(key_hash)
        if entry.resolved is not None:
            self._hash_of[entry.resolved.key.id] = key_hash
        while len(self._cache) > self.max_entries:
            old_hash, old = self._cache.popitem(last=False)
            if old.resolved is not None and self._hash_of.get(old.resolved.key.id) == old_hash:
                del self._hash_of[old.resolved.key.id]
