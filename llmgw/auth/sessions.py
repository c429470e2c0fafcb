"""Portal sessions: a random cookie value, its hash in the store, two clocks.

A session ends at the first of: ``ttl`` after sign-in (``auth.session_ttl``),
``idle`` without a request (``auth.session_idle``), sign-out, the person's
password changing (every session of theirs), or the person no longer being
active. The cookie's value is 32 random bytes; the store keeps only its
SHA-256, so a copy of the store opens no session. Each session has its own
CSRF token, which every form posted in it must carry: it is derived from the
cookie's value (an HMAC), so it is new at every sign-in, belongs to that one
session, and the store keeps only its hash.

The last-seen time is written at most every ``touch_every`` seconds (a
tenth of the idle timeout, at most a minute), not on every request.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, Sequence

import attrs

from llmgw.store import Store, StoreError, WebSession

UTC = dt.UTC

#: Random bytes in a cookie value and in a CSRF token.
TOKEN_BYTES = 32

Closed = Callable[[Sequence[WebSession]], Awaitable[None]]


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> str:
    """The SHA-256 (hex) the store keeps of a cookie value or a link's token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def session_csrf(cookie_token: str) -> str:
    """The CSRF token of the session whose cookie value is ``cookie_token``.

    An HMAC keyed by the cookie's value: whoever cannot read the session
    cookie cannot work it out, a cookie planted before sign-in says nothing
    about it, and a new sign-in (a new cookie) gives a new one.
    """
    mac = hmac.new(cookie_token.encode("utf-8"), b"llmgw portal csrf v1", hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def same_token(a: str | None, b: str | None) -> bool:
    """Constant-time comparison of two tokens; False when either is missing."""
    if not a or not b:
        return False
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def _looks_like_token(value: str) -> bool:
    return 20 <= len(value) <= 100 and all(c.isalnum() or c in "-_" for c in value)


@attrs.frozen
class Opened:
    """A session just opened: the cookie value (sent once, never stored) and the record."""

    token: str = attrs.field(repr=False)
    session: WebSession


class Sessions:
    """Opens, finds and closes portal sessions against the store.

    ``on_closed`` is told of every session that ends (sign-out, password
    change, expiry), so what hangs on it (the chat page's key) can go too.
    ``clock`` gives aware datetimes (tests move it).
    """

    def __init__(
        self,
        store: Store,
        *,
        ttl: dt.timedelta,
        idle: dt.timedelta,
        on_closed: Closed | None = None,
        clock: Callable[[], dt.datetime] | None = None,
        touch_every: float | None = None,
    ) -> None:
        self.store = store
        self.ttl = ttl if ttl > dt.timedelta(0) else dt.timedelta(hours=12)
        self.idle = idle if idle > dt.timedelta(0) else self.ttl
        self.on_closed = on_closed
        self._clock = clock or (lambda: dt.datetime.now(UTC))
        every = touch_every if touch_every is not None else min(60.0, self.idle.total_seconds() / 10)
        self.touch_every = dt.timedelta(seconds=max(0.0, every))

    def now(self) -> dt.datetime:
        return self._clock().astimezone(UTC)

    async def open(self, user_id: str, *, client: str = "", user_agent: str = "") -> Opened:
        token = new_token()
        session = await self.store.create_web_session(
            token_hash=token_hash(token), user_id=user_id, csrf_token=token_hash(session_csrf(token)),
            expires_at=self.now() + self.ttl, client=client[:64], user_agent=user_agent,
        )
        return Opened(token, session)

    def alive(self, session: WebSession, now: dt.datetime | None = None) -> bool:
        now = now or self.now()
        return now < session.expires_at and now - session.last_seen_at < self.idle

    async def resolve(self, token: str | None) -> WebSession | None:
        """The live session of a cookie value, its last-seen time moved on; None
        for a missing, unknown, expired or idle one (an ended one is removed)."""
        if not token or not _looks_like_token(token):
            return None
        key = token_hash(token)
        session = await self.store.get_web_session(key)
        if session is None:
            return None
        now = self.now()
        if not self.alive(session, now):
            await self._closed([s for s in [await self.store.delete_web_session(key)] if s is not None])
            return None
        if now - session.last_seen_at >= self.touch_every:
            try:
                await self.store.touch_web_session(key, now)
                session = attrs.evolve(session, last_seen_at=now)
            except StoreError:
                pass  # a missed touch costs at most one interval of idleness
        return session

    async def close(self, token: str | None) -> WebSession | None:
        """Sign one session out (the cookie's)."""
        if not token or not _looks_like_token(token):
            return None
        session = await self.store.delete_web_session(token_hash(token))
        if session is not None:
            await self._closed([session])
        return session

    async def close_all(self, user_id: str, *, keep: WebSession | None = None) -> list[WebSession]:
        """Sign a person out everywhere, except the session ``keep``."""
        closed = await self.store.delete_user_web_sessions(user_id, keep=keep.token_hash if keep else None)
        await self._closed(closed)
        return closed

    async def sweep(self) -> list[WebSession]:
        """Remove every session that has ended by now; returns them."""
        now = self.now()
        closed = await self.store.delete_stale_web_sessions(now=now, idle_before=now - self.idle)
        await self._closed(closed)
        return closed

    async def _closed(self, sessions: Sequence[WebSession]) -> None:
        if sessions and self.on_closed is not None:
            await self.on_closed(sessions)


# ---- password reset links ------------------------------------------------------

#: How long a reset link works.
RESET_TTL = dt.timedelta(hours=1)
#: Where a reset link points on the portal: RESET_PATH + token.
RESET_PATH = "/reset/"


async def issue_reset(store: Store, user_id: str, now: dt.datetime) -> str:
    """A new reset link's token for a person (their earlier links stop working).
    Only its hash is stored; the token goes into the link and nowhere else."""
    token = new_token()
    await store.create_password_reset(token_hash=token_hash(token), user_id=user_id, expires_at=now + RESET_TTL)
    return token


def reset_link(base_url: str, token: str) -> str:
    return base_url.rstrip("/") + RESET_PATH + token


def looks_like_token(value: str | None) -> bool:
    """True for something shaped like a token this module makes (cheap check before any hashing)."""
    return bool(value) and _looks_like_token(value)  # type: ignore[arg-type]
