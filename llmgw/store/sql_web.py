"""The portal's sessions and password reset links: the shared SQL both backends use.

Only hashes of the secrets are kept (the cookie's value, the link's token),
so whoever reads the store cannot sign in with what they find. Every time
is given by the caller (the portal's clock), which also judges expiry.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from . import validate as v
from .errors import Invalid, NotFound
from .records import PasswordReset, WebSession
from .sqlbase import SQLStoreBase, Tx

SESSION_COLS = (
    "token_hash, user_id, csrf_token, created_at, last_seen_at, expires_at, client, user_agent, chat_key_id"
)
RESET_COLS = "token_hash, user_id, created_at, expires_at, used_at"
_MAX_USER_AGENT = 300


def _check_hash(value: Any, what: str) -> str:
    try:
        return v.check_key_hash(value)
    except Invalid:
        raise Invalid(f"{what}: expected a SHA-256 as 64 lower-case hex digits") from None


def _clean(value: Any, what: str, max_len: int) -> str:
    """Free text a browser sent (its user agent): cut to length, control characters dropped."""
    if not isinstance(value, str):
        raise Invalid(f"{what}: expected text, got {type(value).__name__}")
    return "".join(c for c in value if c.isprintable())[:max_len]


class SQLWeb(SQLStoreBase):
    def _web_session(self, r: Any) -> WebSession:
        return WebSession(
            token_hash=r["token_hash"], user_id=r["user_id"], csrf_token=r["csrf_token"],
            created_at=self._dt(r["created_at"]), last_seen_at=self._dt(r["last_seen_at"]),
            expires_at=self._dt(r["expires_at"]), client=r["client"], user_agent=r["user_agent"],
            chat_key_id=r["chat_key_id"],
        )

    def _password_reset(self, r: Any) -> PasswordReset:
        return PasswordReset(
            token_hash=r["token_hash"], user_id=r["user_id"], created_at=self._dt(r["created_at"]),
            expires_at=self._dt(r["expires_at"]), used_at=self._dt(r["used_at"]),
        )

    # ---- sessions ------------------------------------------------------------

    async def create_web_session(
        self,
        *,
        token_hash: str,
        user_id: str,
        csrf_token: str,
        expires_at: dt.datetime,
        client: str = "",
        user_agent: str = "",
    ) -> WebSession:
        token_hash = _check_hash(token_hash, "token_hash")
        user_id = v.check_id(user_id, "user_id")
        csrf_token = v.check_text(csrf_token, "csrf_token", max_len=128)
        expires_at = v.check_time(expires_at, "expires_at")
        client = v.check_text(client, "client", max_len=64, allow_empty=True)
        user_agent = _clean(user_agent, "user_agent", _MAX_USER_AGENT)
        now = self._now()

        async def work(tx: Tx) -> WebSession:
            if not await tx.fetchval("SELECT 1 FROM users WHERE id = ?", user_id):
                raise NotFound(f"no user with id {user_id!r}")
            await tx.execute(
                f"INSERT INTO web_sessions ({SESSION_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)",
                token_hash, user_id, csrf_token, self._t(now), self._t(now), self._t(expires_at),
                client, user_agent,
            )
            return WebSession(
                token_hash=token_hash, user_id=user_id, csrf_token=csrf_token, created_at=now,
                last_seen_at=now, expires_at=expires_at, client=client, user_agent=user_agent,
            )

        return await self._write(work)

    async def get_web_session(self, token_hash: str) -> WebSession | None:
        token_hash = _check_hash(token_hash, "token_hash")

        async def work(tx: Tx) -> Any:
            return await tx.fetchrow(f"SELECT {SESSION_COLS} FROM web_sessions WHERE token_hash = ?", token_hash)

        r = await self._read(work)
        return None if r is None else self._web_session(r)

    async def touch_web_session(self, token_hash: str, at: dt.datetime) -> bool:
        token_hash = _check_hash(token_hash, "token_hash")
        at_t = self._t(v.check_time(at, "at"))

        async def work(tx: Tx) -> bool:
            if not await tx.fetchval("SELECT 1 FROM web_sessions WHERE token_hash = ?", token_hash):
                return False
            await tx.execute(
                "UPDATE web_sessions SET last_seen_at = ? WHERE token_hash = ? AND last_seen_at < ?",
                at_t, token_hash, at_t,
            )
            return True

        return await self._write(work)

    async def set_web_session_key(self, token_hash: str, key_id: str | None) -> bool:
        token_hash = _check_hash(token_hash, "token_hash")
        key_id = v.check_opt_id(key_id, "key_id")

        async def work(tx: Tx) -> bool:
            return bool(await tx.execute(
                "UPDATE web_sessions SET chat_key_id = ? WHERE token_hash = ?", key_id, token_hash))

        return await self._write(work)

    async def list_web_sessions(self, user_id: str) -> list[WebSession]:
        user_id = v.check_id(user_id, "user_id")

        async def work(tx: Tx) -> list[Any]:
            return list(await tx.fetch(
                f"SELECT {SESSION_COLS} FROM web_sessions WHERE user_id = ? ORDER BY created_at DESC, token_hash",
                user_id,
            ))

        return [self._web_session(r) for r in await self._read(work)]

    async def delete_web_session(self, token_hash: str) -> WebSession | None:
        token_hash = _check_hash(token_hash, "token_hash")

        async def work(tx: Tx) -> Any:
            return await tx.fetchrow(
                f"DELETE FROM web_sessions WHERE token_hash = ? RETURNING {SESSION_COLS}", token_hash)

        r = await self._write(work)
        return None if r is None else self._web_session(r)

    async def delete_user_web_sessions(self, user_id: str, *, keep: str | None = None) -> list[WebSession]:
        user_id = v.check_id(user_id, "user_id")
        keep = "" if keep is None else _check_hash(keep, "keep")

        async def work(tx: Tx) -> list[Any]:
            return list(await tx.fetch(
                f"DELETE FROM web_sessions WHERE user_id = ? AND token_hash <> ? RETURNING {SESSION_COLS}",
                user_id, keep,
            ))

        return [self._web_session(r) for r in await self._write(work)]

    async def delete_stale_web_sessions(self, *, now: dt.datetime, idle_before: dt.datetime) -> list[WebSession]:
        now_t = self._t(v.check_time(now, "now"))
        idle_t = self._t(v.check_time(idle_before, "idle_before"))

        async def work(tx: Tx) -> list[Any]:
            return list(await tx.fetch(
                f"DELETE FROM web_sessions WHERE expires_at <= ? OR last_seen_at < ? RETURNING {SESSION_COLS}",
                now_t, idle_t,
            ))

        return [self._web_session(r) for r in await self._write(work)]

    # ---- password reset links ---------------------------------------------------

    async def create_password_reset(self, *, token_hash: str, user_id: str, expires_at: dt.datetime) -> PasswordReset:
        token_hash = _check_hash(token_hash, "token_hash")
        user_id = v.check_id(user_id, "user_id")
        expires_at = v.check_time(expires_at, "expires_at")
        now = self._now()

        async def work(tx: Tx) -> PasswordReset:
            if not await tx.fetchval("SELECT 1 FROM users WHERE id = ?", user_id):
                raise NotFound(f"no user with id {user_id!r}")
            await tx.execute("DELETE FROM password_resets WHERE user_id = ? AND used_at IS NULL", user_id)
            await tx.execute(
                f"INSERT INTO password_resets ({RESET_COLS}) VALUES (?, ?, ?, ?, NULL)",
                token_hash, user_id, self._t(now), self._t(expires_at),
            )
            return PasswordReset(token_hash=token_hash, user_id=user_id, created_at=now, expires_at=expires_at)

        return await self._write(work)

    async def get_password_reset(self, token_hash: str) -> PasswordReset | None:
        token_hash = _check_hash(token_hash, "token_hash")

        async def work(tx: Tx) -> Any:
            return await tx.fetchrow(f"SELECT {RESET_COLS} FROM password_resets WHERE token_hash = ?", token_hash)

        r = await self._read(work)
        return None if r is None else self._password_reset(r)

    async def use_password_reset(self, token_hash: str, at: dt.datetime) -> PasswordReset | None:
        token_hash = _check_hash(token_hash, "token_hash")
        at_t = self._t(v.check_time(at, "at"))

        async def work(tx: Tx) -> Any:
            # One statement: of two uses at once, only one finds used_at still empty.
            return await tx.fetchrow(
                "UPDATE password_resets SET used_at = ?"
                f" WHERE token_hash = ? AND used_at IS NULL AND expires_at > ? RETURNING {RESET_COLS}",
                at_t, token_hash, at_t,
            )

        r = await self._write(work)
        return None if r is None else self._password_reset(r)

    async def delete_stale_password_resets(self, before: dt.datetime) -> int:
        before_t = self._t(v.check_time(before, "before"))

        async def work(tx: Tx) -> int:
            return await tx.execute("DELETE FROM password_resets WHERE expires_at < ?", before_t)

        return await self._write(work)
