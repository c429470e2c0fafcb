"""People's passwords: argon2id hashes, made and checked off the event loop.

An argon2id hash takes tens of milliseconds of CPU and its memory on
purpose, so it never runs on the event loop: it goes to a small thread pool,
and only ``slots`` hashes run at once. A hash that cannot get a turn within
``wait`` seconds raises :class:`Busy`: the server says it is busy instead of
holding a request while sign-ins queue behind a flood of guesses.

The encoded hash (``$argon2id$v=19$m=…,t=…,p=…$salt$hash``) carries its own
parameters, so hashes made with older parameters keep verifying;
:meth:`Passwords.needs_rehash` says when one should be replaced.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os

import argon2
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

#: The shortest password accepted; length is what makes a password hard to guess.
MIN_LENGTH = 10
#: The longest: a bigger one is someone testing what the server will hash.
MAX_LENGTH = 1024


class Busy(Exception):
    """Every hashing turn was taken for longer than the wait allows."""

    def __init__(self) -> None:
        super().__init__("too many sign-ins at once; try again in a moment")


class WeakPassword(ValueError):
    """A new password that is refused; ``code`` says why (``short``, ``long``, ``email``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def check_strength(password: str, *, email: str = "") -> None:
    """Raise WeakPassword for a new password that should not be used."""
    if not isinstance(password, str) or len(password) < MIN_LENGTH:
        raise WeakPassword("short", f"a password needs at least {MIN_LENGTH} characters")
    if len(password) > MAX_LENGTH:
        raise WeakPassword("long", f"a password has at most {MAX_LENGTH} characters")
    if email and password.strip().lower() in {email.lower(), email.split("@", 1)[0].lower()}:
        raise WeakPassword("email", "a password must not be the email address")


def default_slots() -> int:
    """Hashes at once: half the cores, at least two."""
    return max(2, (os.cpu_count() or 2) // 2)


class Passwords:
    """Hashing and checking passwords, bounded.

    ``time_cost``, ``memory_cost`` (KiB) and ``parallelism`` are argon2id's;
    the defaults are argon2-cffi's (RFC 9106's second recommendation). Tests
    pass small ones so a hash takes a millisecond.
    """

    def __init__(
        self,
        *,
        slots: int | None = None,
        wait: float = 10.0,
        time_cost: int | None = None,
        memory_cost: int | None = None,
        parallelism: int | None = None,
    ) -> None:
        kwargs = {k: v for k, v in (("time_cost", time_cost), ("memory_cost", memory_cost),
                                    ("parallelism", parallelism)) if v is not None}
        self._hasher = argon2.PasswordHasher(type=argon2.Type.ID, **kwargs)
        self.slots = max(1, int(slots or default_slots()))
        self.wait = float(wait)
        self._turns: asyncio.Semaphore | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(self.slots, thread_name_prefix="llmgw-argon2")
        # Checked against when an address has no account, so an unknown address
        # costs as long as a known one and the answer's time tells nothing.
        self._dummy: str | None = None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- the bounded turn ------------------------------------------------------

    async def _run(self, fn, *args):
        if self._turns is None:  # made on first use, on the loop that uses it
            self._turns = asyncio.Semaphore(self.slots)
        try:
            await asyncio.wait_for(self._turns.acquire(), timeout=self.wait)
        except TimeoutError:
            raise Busy() from None
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        finally:
            self._turns.release()

    # ---- hashing and checking -------------------------------------------------

    async def hash(self, password: str) -> str:
        """The encoded argon2id hash of a password. Raises Busy."""
        if not isinstance(password, str) or len(password) > MAX_LENGTH:
            raise WeakPassword("long", f"a password has at most {MAX_LENGTH} characters")
        return await self._run(self._hasher.hash, password)

    async def verify(self, encoded: str | None, password: str) -> bool:
        """True when ``password`` matches ``encoded``. A person with no
        password (``None``, single sign-on only) is checked against a dummy
        hash and never matches, so it takes as long. Raises Busy."""
        if not isinstance(password, str) or len(password) > MAX_LENGTH:
            password = ""
        if not encoded:
            if self._dummy is None:
                self._dummy = await self._run(self._hasher.hash, "llmgw: no password here")
            await self._run(self._check, self._dummy, password)
            return False
        return await self._run(self._check, encoded, password)

    def _check(self, encoded: str, password: str) -> bool:
        try:
            return self._hasher.verify(encoded, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return False

    def needs_rehash(self, encoded: str) -> bool:
        """True when a hash was made with other parameters than this hasher's."""
        try:
            return self._hasher.check_needs_rehash(encoded)
        except (InvalidHashError, ValueError):
            return True

