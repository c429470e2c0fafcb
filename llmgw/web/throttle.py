"""Counting attempts per key in fixed windows, in bounded memory.

The sign-in throttle counts every attempt three ways (see
:class:`SignInThrottle`): per address *and* client, so ten wrong guesses
from one place hold that place back but not the owner signing in from
another; per address alone, ten times looser, so guesses spread over many
clients are still bounded; and per client over every address, so one
client cannot spray the whole directory.

The counts live in this process's memory: a restart forgets them, and two
control planes each count their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs


@attrs.define
class _Window:
    count: int
    started: float


class Throttle:
    """At most ``limit`` hits per key per ``window`` seconds.

    When more than ``max_keys`` keys are tracked, finished windows go first,
    then the keys with the fewest hits: flooding the table with made-up keys
    evicts other made-up keys, never the one being guessed at.
    """

    def __init__(self, *, window: float, max_keys: int = 20_000,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.window = float(window)
        self.max_keys = max(10, int(max_keys))
        self._monotonic = monotonic
        self._windows: dict[str, _Window] = {}

    def __len__(self) -> int:
        return len(self._windows)

    def _current(self, key: str, now: float) -> _Window | None:
        w = self._windows.get(key)
        if w is not None and now - w.started >= self.window:
            del self._windows[key]
            return None
        return w

    def allowed(self, key: str, limit: int) -> bool:
        """True while ``key`` has had fewer than ``limit`` hits in its window (counts nothing)."""
        w = self._current(key, self._monotonic())
        return w is None or w.count < limit

    def hit(self, key: str, limit: int) -> bool:
        """Count one hit; False when it is beyond ``limit`` in the window."""
        now = self._monotonic()
        w = self._current(key, now)
        if w is None:
            w = self._windows[key] = _Window(0, now)
            if len(self._windows) > self.max_keys:
                self._prune(now, keep=key)
        w.count += 1
        return w.count <= limit

    def clear(self, key: str) -> None:
        self._windows.pop(key, None)

    def forgive(self, key: str) -> None:
        """Take one hit back (an attempt that turned out to be the owner's)."""
        w = self._windows.get(key)
        if w is not None and w.count > 0:
            w.count -= 1

    def retry_after(self, key: str) -> float:
        """Seconds until ``key``'s window ends (0 when it has none)."""
        w = self._windows.get(key)
        if w is None:
            return 0.0
        return max(0.0, self.window - (self._monotonic() - w.started))

    def _prune(self, now: float, keep: str) -> None:
        for k in [k for k, w in self._windows.items() if now - w.started >= self.window]:
            del self._windows[k]
        excess = len(self._windows) - int(self.max_keys * 0.9)
        if excess <= 0:
            return
        lightest = sorted((w.count, w.started, k) for k, w in self._windows.items() if k != keep)
        for _, _, k in lightest[:excess]:
            del self._windows[k]


class SignInThrottle:
    """The limits on sign-in, sign-up, reset requests and password changes.

    ``per_pair`` tries per address and client in a window; ``per_address``
    is ten times that unless given; ``per_client`` bounds one client over
    every address. A right password clears its address-and-client count.
    """

    def __init__(self, *, per_pair: int = 5, per_address: int | None = None, per_client: int = 100,
                 window: float = 900.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.per_pair = per_pair
        self.per_address = per_address if per_address is not None else 10 * per_pair
        self.per_client = per_client
        self.counts = Throttle(window=window, monotonic=monotonic)

    def sign_in(self, email: str, client: str) -> bool:
        """Count a sign-in attempt; False when it must be refused unchecked."""
        email = email.strip().lower()
        results = [
            self.counts.hit(f"pair|{email}|{client}", self.per_pair),
            self.counts.hit(f"addr|{email}", self.per_address),
            self.counts.hit(f"client|{client}", self.per_client),
        ]
        return all(results)

    def signed_in(self, email: str, client: str) -> None:
        """The password was right: this client was not guessing, and this
        attempt does not count against the address or the client."""
        email = email.strip().lower()
        self.counts.clear(f"pair|{email}|{client}")
        self.counts.forgive(f"addr|{email}")
        self.counts.forgive(f"client|{client}")

    def retry_after(self, email: str, client: str) -> float:
        email = email.strip().lower()
        return max(self.counts.retry_after(k) for k in (f"pair|{email}|{client}", f"addr|{email}", f"client|{client}"))

    def sign_up(self, client: str) -> bool:
        return self.counts.hit(f"signup|{client}", 5)

    def reset_request(self, email: str, client: str) -> bool:
        """A few links per address (each may send a mail), a few more per client."""
        return all([self.counts.hit(f"reset|{email.strip().lower()}", 3),
                    self.counts.hit(f"reset-client|{client}", 10)])

    def password_change(self, user_id: str) -> bool:
        return self.counts.hit(f"pw|{user_id}", self.per_pair)
