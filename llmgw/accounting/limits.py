"""Requests and tokens a minute, on every level of a key's chain.

Each level (organization, team, project, person, key) that sets ``rpm`` or
``tpm`` gets its own counter, and a request must fit every one of them: a
project's limit below its organization's is the one that bites, and the
organization's still counts every project's requests. A key with no RPM or
TPM of its own gets ``auth.default_rpm`` / ``auth.default_tpm``.

The counters are token buckets in this process's memory: a bucket holds at
most a minute's allowance and refills continuously (``rpm / 60`` a second),
so a burst of a full minute's allowance is allowed, then the steady rate.
Several gateway processes each count on their own, unless ``limits.store``
names a Redis they share (:mod:`.limits_redis`: the same buckets there).

Tokens are counted at admission on the prompt's estimate and corrected at
settlement by what the request really used (prompt and completion); a
bucket may go below empty then, which delays the next requests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import attrs

from llmgw.accounting.api import LimitExceeded
from llmgw.auth.principal import Principal

WINDOW = 60.0  # seconds: limits are per minute
# Sweep full buckets (they behave exactly like new ones) once this many exist.
_SWEEP_AT = 10_000

_WORDS = {"org": "organization", "team": "team", "project": "project", "user": "person", "key": "key"}


@attrs.define(eq=False)
class TokenBucket:
    """``capacity`` units, refilled at ``capacity / WINDOW`` a second; ``level`` may go negative (debt)."""

    capacity: float
    level: float
    stamp: float

    @property
    def rate(self) -> float:
        return self.capacity / WINDOW

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = max(self.stamp, now)

    def wait_for(self, amount: float, now: float) -> float | None:
        """Seconds until ``amount`` fits (0: now); None when it never can."""
        self.refill(now)
        if amount > self.capacity:
            return None
        if self.level >= amount:
            return 0.0
        return (amount - self.level) / self.rate

    def take(self, amount: float, now: float) -> None:
        self.refill(now)
        self.level -= amount

    def give(self, amount: float, now: float) -> None:
        self.refill(now)
        self.level = min(self.capacity, self.level + amount)

    def resize(self, capacity: float, now: float) -> None:
        """A changed limit: keep what was used, within the new size."""
        self.refill(now)
        used = self.capacity - self.level
        self.capacity = float(capacity)
        self.level = min(self.capacity, self.capacity - used)


@attrs.frozen
class Rule:
    """One limit that applies to a request: ``what`` (rpm or tpm) on one scope."""

    scope_kind: str
    scope_id: str
    what: str  # "rpm" or "tpm"
    limit: int

    @property
    def scope(self) -> str:
        return f"{self.scope_kind}:{self.scope_id}"


@attrs.frozen
class Headroom:
    """What is left of one limit now."""

    rule: Rule
    remaining: int
    resets_in: float  # seconds until the bucket is full again


class RateLimiter:
    """Token buckets per scope and limit. Synchronous: a check and the take
    that follows it cannot be interleaved with another request's on one loop."""

    def __init__(self, *, default_rpm: int = 0, default_tpm: int = 0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.default_rpm = max(0, int(default_rpm or 0))
        self.default_tpm = max(0, int(default_tpm or 0))
        self._monotonic = monotonic
        self._buckets: dict[tuple[str, str, str], TokenBucket] = {}

    def rules(self, principal: Principal) -> list[Rule]:
        """Every RPM and TPM limit on the principal's chain, widest first, with
        the defaults on the key when it has none of its own."""
        out: list[Rule] = []
        own = {"rpm": False, "tpm": False}
        for lim in principal.limits:
            for what in ("rpm", "tpm"):
                value = getattr(lim, what)
                if value:
                    out.append(Rule(lim.scope_kind, lim.scope_id, what, int(value)))
                    if lim.scope_kind == "key":
                        own[what] = True
        if principal.key_id:
            for what, default in (("rpm", self.default_rpm), ("tpm", self.default_tpm)):
                if default and not own[what]:
                    out.append(Rule("key", principal.key_id, what, default))
        return out

    def check(self, rules: Iterable[Rule], tokens: int) -> None:
        """Raise LimitExceeded for the first rule one more request (of
        ``tokens`` estimated tokens) would break; take nothing."""
        now = self._monotonic()
        for rule in rules:
            amount = 1 if rule.what == "rpm" else tokens
            wait = self._bucket(rule, now).wait_for(amount, now)
            if wait == 0.0:
                continue
            raise _refusal(rule, amount, wait)

    def take(self, rules: Iterable[Rule], tokens: int) -> None:
        """Count one request of ``tokens`` estimated tokens against every rule."""
        now = self._monotonic()
        for rule in rules:
            self._bucket(rule, now).take(1 if rule.what == "rpm" else tokens, now)
        if len(self._buckets) > _SWEEP_AT:
            self._sweep(now)

    def admit(self, principal: Principal, tokens: int) -> list[Rule]:
        """check, then take; returns the rules counted (for :meth:`correct`)."""
        rules = self.rules(principal)
        self.check(rules, tokens)
        self.take(rules, tokens)
        return rules

    def correct(self, rules: Iterable[Rule], delta_tokens: int) -> None:
        """Tokens used beyond the estimate (negative: fewer) on the TPM rules."""
        if not delta_tokens:
            return
        now = self._monotonic()
        for rule in rules:
            if rule.what != "tpm":
                continue
            bucket = self._bucket(rule, now)
            if delta_tokens > 0:
                bucket.take(delta_tokens, now)
            else:
                bucket.give(-delta_tokens, now)

    def mirror(self, rules: Iterable[Rule], levels: Iterable[float]) -> None:
        """Set each rule's bucket to the level a shared store (limits.store) left it at, for :meth:`headroom`."""
        now = self._monotonic()
        for rule, level in zip(rules, levels):
            bucket = self._bucket(rule, now)
            bucket.level, bucket.stamp = min(bucket.capacity, float(level)), now

    def headroom(self, principal: Principal) -> list[Headroom]:
        """What is left of each limit on the principal's chain now."""
        now = self._monotonic()
        out = []
        for rule in self.rules(principal):
            b = self._bucket(rule, now)
            b.refill(now)
            out.append(Headroom(rule, max(0, int(b.level)), max(0.0, (b.capacity - b.level) / b.rate)))
        return out

    def _bucket(self, rule: Rule, now: float) -> TokenBucket:
        key = (rule.scope_kind, rule.scope_id, rule.what)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(float(rule.limit), float(rule.limit), now)
        elif bucket.capacity != rule.limit:
            bucket.resize(rule.limit, now)
        return bucket

    def _sweep(self, now: float) -> None:
        for key, bucket in list(self._buckets.items()):
            bucket.refill(now)
            if bucket.level >= bucket.capacity:
                del self._buckets[key]


def _refusal(rule: Rule, amount: int, wait: float | None) -> LimitExceeded:
    where = f"the {_WORDS.get(rule.scope_kind, rule.scope_kind)}'s"
    if rule.what == "rpm":
        return LimitExceeded(
            "rate_limit_exceeded",
            f"{where} limit of {rule.limit} requests a minute is reached; retry in {_secs(wait)}",
            scope=rule.scope, retry_after=wait,
        )
    if wait is None:
        return LimitExceeded(
            "tokens_limit_exceeded",
            f"this request's {amount} prompt tokens are more than {where} limit of {rule.limit} tokens"
            " a minute; send a shorter prompt",
            scope=rule.scope, retry_after=None,
        )
    return LimitExceeded(
        "tokens_limit_exceeded",
        f"{where} limit of {rule.limit} tokens a minute is reached; retry in {_secs(wait)}",
        scope=rule.scope, retry_after=wait,
    )


def _secs(wait: float | None) -> str:
    if wait is None:
        return "never"
    return f"{wait:.1f}s" if wait < 10 else f"{wait:.0f}s"
