"""RPM, TPM and budget holds counted in a Redis that every worker and gateway shares (``limits.store``).

One admission is one round trip: a Lua script (``ADMIT``) that, on the
Redis's own clock, checks every budget level and every rate rule of the
request and, only when all of them fit, takes them all — so two processes
can never both take the last request of a minute or the last dollar of a
budget. What follows the answer (the hold given back, the cost added to the
spend, the TPM estimate corrected) is a second script sent without waiting
for it (``SETTLE``).

Keys, all under ``llmgw:lim:``:

- ``b:{kind}:{id}:{what}``: one token bucket (hash: level ``l``, stamp ``s``,
  capacity ``c``), expiring once it would be full again (a full bucket is
  a new one);
- ``s:{kind}:{id}:{period}:{start}``: a budget's period (hash: ``spent``,
  ``held``), expiring a day after the period ends;
- ``h:{kind}:{id}:{period}:{start}``: its holds (sorted set, member
  ``HOLDID:AMOUNT``, score the Unix time the hold dies), so the hold of a
  gateway that crashed is dropped ``limits.hold_ttl`` after it was taken, by
  the next admission on that budget, and not kept for ever.

The spend a process reads from the store is sent with each admission as a
floor (``spent`` becomes the larger of the two), so the Redis starts from
the store's sums and a flushed Redis catches up at the next admission.

When the Redis cannot be reached (``StoreDown``), the accountant refuses
(``limits.on_store_down: refuse``) or counts in its own memory (``local``);
:class:`SharedLimits` tries the Redis again at most once a second meanwhile,
says it in ``llmgw_limits_store_up`` and ``llmgw_limits_local_total``, and
logs once per outage.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import uuid
from collections.abc import Iterable, Sequence

import attrs

from llmgw.accounting.api import LimitExceeded
from llmgw.accounting.limits import WINDOW, Rule
from llmgw.obs import logs

log = logs.get("llmgw.accounting.limits")

PREFIX = "llmgw:lim:"
#: While the Redis is down, try it again at most this often (seconds); requests in between count locally or are refused.
RETRY_DOWN_S = 1.0
#: A budget period's keys live this long after the period ends (seconds).
_PERIOD_KEEP_S = 86400

# ARGV: n_budgets, n_rules, then per budget: budget, worst, floor, keep_until (unix s), hold member, hold death (unix s);
# per rule: capacity, amount. KEYS: per budget its spend hash and holds set, then per rule its bucket.
# Returns {0, levels...} (admitted; each rule's level after the take, as strings), {1, j, spent, held} (budget j
# refuses), {2, i, wait} (rule i refuses; wait -1: never fits).
ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local nb, nr = tonumber(ARGV[1]), tonumber(ARGV[2])
local a = 3
for j = 1, nb do
  local hk, zk = KEYS[2 * j - 1], KEYS[2 * j]
  local budget, worst, floor = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local dead = redis.call('ZRANGEBYSCORE', zk, '-inf', now)
  if #dead > 0 then
    local sum = 0
    for _, m in ipairs(dead) do sum = sum + tonumber(string.match(m, ':(%d+)$')) end
    redis.call('ZREMRANGEBYSCORE', zk, '-inf', now)
    redis.call('HINCRBY', hk, 'held', -sum)
  end
  local spent = tonumber(redis.call('HGET', hk, 'spent') or '0')
  if floor > spent then
    redis.call('HSET', hk, 'spent', floor)
    spent = floor
  end
  local held = math.max(0, tonumber(redis.call('HGET', hk, 'held') or '0'))
  if spent + held + worst > budget then
    return {1, j, tostring(spent), tostring(held)}
  end
  a = a + 6
end
local base = 2 * nb
local levels = {}
for i = 1, nr do
  local cap, amt = tonumber(ARGV[a + 2 * (i - 1)]), tonumber(ARGV[a + 2 * (i - 1) + 1])
  local h = redis.call('HMGET', KEYS[base + i], 'l', 's', 'c')
  local level, stamp, was = tonumber(h[1]), tonumber(h[2]), tonumber(h[3])
  if level == nil then
    level, stamp, was = cap, now, cap
  end
  if was ~= cap then
    level = math.min(cap, cap - (was - level))
  end
  local rate = cap / WINDOW
  if now > stamp then
    level = math.min(cap, level + (now - stamp) * rate)
    stamp = now
  end
  if amt > cap then
    return {2, i, '-1'}
  end
  if level < amt then
    return {2, i, tostring((amt - level) / rate)}
  end
  levels[i] = level - amt
  levels[nr + i] = stamp
end
a = 3
for j = 1, nb do
  local hk, zk = KEYS[2 * j - 1], KEYS[2 * j]
  redis.call('ZADD', zk, tonumber(ARGV[a + 5]), ARGV[a + 4])
  redis.call('HINCRBY', hk, 'held', tonumber(ARGV[a + 1]))
  redis.call('EXPIREAT', hk, tonumber(ARGV[a + 3]))
  redis.call('EXPIREAT', zk, tonumber(ARGV[a + 3]))
  a = a + 6
end
local out = {0}
for i = 1, nr do
  local cap = tonumber(ARGV[a + 2 * (i - 1)])
  local level = levels[i]
  redis.call('HSET', KEYS[base + i], 'l', tostring(level), 's', tostring(levels[nr + i]), 'c', tostring(cap))
  redis.call('EXPIRE', KEYS[base + i], math.ceil((cap - level) / (cap / WINDOW)) + 1)
  out[i + 1] = tostring(level)
end
return out
""".replace("WINDOW", repr(WINDOW))

# ARGV: n_holds, n_charges, n_tpm, then per hold: member, amount; per charge: cost; per tpm rule: capacity, delta.
# KEYS: per hold its spend hash and holds set; per charge a spend hash; per tpm rule its bucket.
SETTLE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local nh, nc, nt = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local a, k = 4, 1
for j = 1, nh do
  if redis.call('ZREM', KEYS[k + 1], ARGV[a]) == 1 then
    redis.call('HINCRBY', KEYS[k], 'held', -tonumber(ARGV[a + 1]))
  end
  a, k = a + 2, k + 2
end
for j = 1, nc do
  if redis.call('EXISTS', KEYS[k]) == 1 then
    redis.call('HINCRBY', KEYS[k], 'spent', tonumber(ARGV[a]))
  end
  a, k = a + 1, k + 1
end
for i = 1, nt do
  local cap, delta = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local h = redis.call('HMGET', KEYS[k], 'l', 's')
  local level, stamp = tonumber(h[1]), tonumber(h[2])
  if level ~= nil then
    local rate = cap / WINDOW
    if now > stamp then
      level = math.min(cap, level + (now - stamp) * rate)
      stamp = now
    end
    level = math.min(cap, level - delta)
    redis.call('HSET', KEYS[k], 'l', tostring(level), 's', tostring(stamp))
    redis.call('EXPIRE', KEYS[k], math.max(1, math.ceil((cap - level) / rate) + 1))
  end
  a, k = a + 2, k + 1
end
return 0
""".replace("WINDOW", repr(WINDOW))


class StoreDown(Exception):
    """The limits store (a Redis) could not be reached or answer in time."""


class LimitsUnavailable(LimitExceeded):
    """limits.on_store_down is refuse and the Redis is down: answered 503 with the reason."""

    def __init__(self, reason: str):
        super().__init__(
            "limits_unavailable",
            f"the gateway cannot count this request against its limits ({reason}); retry shortly",
            scope="", retry_after=RETRY_DOWN_S,
        )
        self.status = 503


@attrs.frozen
class BudgetLevel:
    """One budgeted level of a request, as the admission script is told it."""

    kind: str
    scope_id: str
    period: str
    start: float  # unix seconds: the period's start (part of the key)
    end: float  # unix seconds: the period's end
    budget: int
    floor: int  # what this process knows is spent (the store's sums and its own charges)

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.scope_id}:{self.period}:{int(self.start)}"


@attrs.frozen
class SharedHold:
    """A hold taken in the Redis, given back by member name at settlement."""

    level: str  # BudgetLevel.name
    member: str
    amount: int


@attrs.frozen
class Refused:
    """The admission script's no: which budget (index, spent, held) or which rule (index, wait; None: never)."""

    budget_index: int | None = None
    spent: int = 0
    held: int = 0
    rule_index: int | None = None
    wait: float | None = None


def connect(url: str, *, password_file: str = "", ca_file: str = "", timeout: float = 1.0):
    """A redis-py asyncio client for ``limits.store`` (redis://, rediss://, unix://)."""
    import redis.asyncio as aioredis

    options: dict = {"socket_timeout": timeout, "socket_connect_timeout": timeout, "retry_on_timeout": False,
                     "health_check_interval": 30, "decode_responses": True, "max_connections": 1024}
    if password_file:
        with open(password_file, encoding="utf-8") as fh:
            options["password"] = fh.read().strip()
    if url.startswith("rediss://"):
        options["ssl_cert_reqs"] = ssl.CERT_REQUIRED
        if ca_file:
            options["ssl_ca_certs"] = ca_file
    return aioredis.Redis.from_url(url, **options)


def where(url: str) -> str:
    """The Redis's address without a password, for logs and refusals."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rpartition('@')[2]}"


class SharedLimits:
    """The Redis side of the accountant: one script per admission, one unawaited script per settlement."""

    def __init__(self, client, *, address: str, on_store_down: str = "refuse", hold_ttl: float = 2100.0,
                 monotonic=time.monotonic) -> None:
        self.client = client
        self.address = address
        self.on_store_down = on_store_down
        self.hold_ttl = float(hold_ttl)
        self._monotonic = monotonic
        self._admit = client.register_script(ADMIT)
        self._settle = client.register_script(SETTLE)
        self.up = True  #: the last call reached the Redis
        self.down_reason = ""
        self._down_since = 0.0
        self._tried_at = 0.0
        self.local_count = 0  #: admissions counted locally while down (llmgw_limits_local_total)
        self._tasks: set[asyncio.Task] = set()

    @classmethod
    def from_config(cls, limits) -> SharedLimits:
        url = limits.store
        client = connect(url, password_file=limits.password_file, ca_file=limits.ca_file,
                         timeout=limits.timeout.total_seconds())
        return cls(client, address=where(url), on_store_down=limits.on_store_down,
                   hold_ttl=limits.hold_ttl.total_seconds())

    # ---- up and down -------------------------------------------------------

    def worth_trying(self) -> bool:
        """False while the Redis is down and was tried less than a second ago (no timeout paid per request)."""
        return self.up or self._monotonic() - self._tried_at >= RETRY_DOWN_S

    def _failed(self, exc: BaseException) -> StoreDown:
        self._tried_at = self._monotonic()
        reason = f"the limits store {self.address} is unreachable: {type(exc).__name__}"
        if self.up:
            self.up = False
            # the pooled connections are to a Redis that is gone: new ones when it is back
            task = asyncio.ensure_future(self.client.connection_pool.disconnect())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            self._down_since = self._tried_at
            self.down_reason = reason
            what = "refusing requests" if self.on_store_down == "refuse" else "counting limits in this process alone"
            logs.event(log, f"limits store down; {what} until it is back (limits.on_store_down: {self.on_store_down})",
                       logging.WARNING, store=self.address, error=str(exc) or type(exc).__name__)
        return StoreDown(self.down_reason)

    def _reached(self) -> None:
        if not self.up:
            self.up = True
            logs.event(log, "limits store back; limits are shared again", store=self.address,
                       down_s=round(self._monotonic() - self._down_since, 1))

    def counted_locally(self) -> None:
        self.local_count += 1

    # ---- admission -----------------------------------------------------------

    async def admit(self, levels: Sequence[BudgetLevel], worst: int, rules: Sequence[Rule],
                    tokens: int) -> tuple[list[SharedHold], list[float]] | Refused:
        """Check and take every budget level and rule at once: the holds and each rule's level after, or Refused.
        Raises StoreDown when the Redis cannot answer."""
        keys: list[str] = []
        args: list = [len(levels), len(rules)]
        holds = []
        now = time.time()
        hold_id = uuid.uuid4().hex[:16]
        for lv in levels:
            keys += [f"{PREFIX}s:{lv.name}", f"{PREFIX}h:{lv.name}"]
            member = f"{hold_id}:{worst}"
            args += [lv.budget, worst, lv.floor, int(lv.end) + _PERIOD_KEEP_S, member, now + self.hold_ttl]
            holds.append(SharedHold(lv.name, member, worst))
        for rule in rules:
            keys.append(_bucket_key(rule))
            args += [rule.limit, 1 if rule.what == "rpm" else tokens]
        try:
            try:
                answer = await self._admit(keys=keys, args=args)
            except Exception as exc:  # noqa: BLE001 - a pooled connection to a Redis since restarted: once more
                import redis.exceptions as rx

                # only a connection that failed at once (reset, refused), not a timeout: limits.timeout stays the most
                if not isinstance(exc, rx.ConnectionError) or isinstance(exc, rx.TimeoutError) or not self.up:
                    raise
                answer = await self._admit(keys=keys, args=args)
        except Exception as exc:  # noqa: BLE001 - any failure to reach or run on the Redis is an outage
            if not _is_outage(exc):
                raise
            raise self._failed(exc) from exc
        self._reached()
        kind = int(answer[0])
        if kind == 1:
            return Refused(budget_index=int(answer[1]) - 1, spent=int(float(answer[2])), held=int(float(answer[3])))
        if kind == 2:
            wait = float(answer[2])
            return Refused(rule_index=int(answer[1]) - 1, wait=None if wait < 0 else wait)
        return holds, [float(x) for x in answer[1:]]

    def settle(self, holds: Iterable[SharedHold], charges: Iterable[str], cost: int,
               tpm: Iterable[Rule], delta_tokens: int) -> None:
        """Give the holds back, add ``cost`` to the spend of each level in ``charges`` (BudgetLevel names), correct
        the TPM rules by ``delta_tokens``; sent without waiting (a hold not given back dies after hold_ttl)."""
        holds = list(holds)
        charges = list(charges) if cost > 0 else []
        tpm = list(tpm) if delta_tokens else []
        if not holds and not charges and not tpm:
            return
        keys: list[str] = []
        args: list = [len(holds), len(charges), len(tpm)]
        for h in holds:
            keys += [f"{PREFIX}s:{h.level}", f"{PREFIX}h:{h.level}"]
            args += [h.member, h.amount]
        for name in charges:
            keys.append(f"{PREFIX}s:{name}")
            args.append(cost)
        for rule in tpm:
            keys.append(_bucket_key(rule))
            args += [rule.limit, delta_tokens]
        task = asyncio.ensure_future(self._send_settle(keys, args))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_settle(self, keys: list[str], args: list) -> None:
        try:
            await self._settle(keys=keys, args=args)
        except Exception as exc:  # noqa: BLE001 - the holds die on their own after hold_ttl
            if _is_outage(exc):
                self._failed(exc)
            else:
                log.warning("a settlement in the limits store failed: %s", exc)
        else:
            self._reached()

    async def close(self) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=2.0)
        try:
            await self.client.aclose()
        except Exception:  # noqa: BLE001 - closing a pool to a Redis that is gone
            pass


def _bucket_key(rule: Rule) -> str:
    return f"{PREFIX}b:{rule.scope_kind}:{rule.scope_id}:{rule.what}"


def _is_outage(exc: BaseException) -> bool:
    import redis.exceptions as rx

    return isinstance(exc, (rx.ConnectionError, rx.TimeoutError, OSError, asyncio.TimeoutError, rx.BusyLoadingError))


def problems(config) -> list[tuple[tuple, str]]:
    """server.yaml's limits and workers keys checked together: (path, what is wrong)."""
    out: list[tuple[tuple, str]] = []
    limits = config.limits
    url = limits.store
    if "@" in url:
        out.append((("limits", "store"), "holds a password; put it in limits.password_file instead"))
    if url != "memory" and not limits.shared:
        out.append((("limits", "store"), f"{url!r} is neither memory nor a redis://HOST:PORT/DB (or rediss://) address"))
    if limits.on_store_down not in ("refuse", "local"):
        out.append((("limits", "on_store_down"), f"{limits.on_store_down!r}: write refuse or local"))
    if limits.password_file and not _readable(limits.password_file):
        out.append((("limits", "password_file"), f"{limits.password_file} cannot be read"))
    if limits.ca_file and not _readable(limits.ca_file):
        out.append((("limits", "ca_file"), f"{limits.ca_file} cannot be read"))
    if config.workers < 1:
        out.append((("workers",), f"must be 1 or more, got {config.workers}"))
    elif config.workers > 1 and not limits.shared:
        out.append((("workers",), f"{config.workers} workers would each count every RPM, TPM and budget on its own; "
                                   "set limits.store to a redis://HOST:PORT/DB they share, or workers: 1"))
    return out


def _readable(path: str) -> bool:
    try:
        with open(path, encoding="utf-8"):
            return True
    except OSError:
        return False


class SharedLimitsCollector:
    """``llmgw_limits_store_up`` (1: the Redis answers) and ``llmgw_limits_local_total`` (admissions counted in
    this process alone while it did not), read at scrape time."""

    def __init__(self, shared: SharedLimits) -> None:
        self.shared = shared

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from llmgw.obs.metric_defs import defn

        up = GaugeMetricFamily("llmgw_limits_store_up", defn("llmgw_limits_store_up").help)
        up.add_metric([], 1 if self.shared.up else 0)
        yield up
        local = CounterMetricFamily("llmgw_limits_local", defn("llmgw_limits_local_total").help)
        local.add_metric([], self.shared.local_count)
        yield local


async def probe(limits) -> tuple[bool, str]:
    """Whether limits.store's Redis answers now (``llmgw doctor``), and what to say of it."""
    address = where(limits.store)
    try:
        client = connect(limits.store, password_file=limits.password_file, ca_file=limits.ca_file,
                         timeout=max(1.0, limits.timeout.total_seconds()))
    except OSError as exc:
        return False, f"the limits store {address} cannot be used: {exc}; check limits.password_file and limits.ca_file"
    try:
        info = await client.info("server")
        return True, f"the limits store {address} answers (Redis {info.get('redis_version', '?')})"
    except Exception as exc:  # noqa: BLE001 - whatever keeps it from answering is the finding
        what = ("clients are refused (503) while it is down" if limits.on_store_down == "refuse"
                else "each process counts limits on its own while it is down")
        return False, (f"the limits store {address} does not answer: {exc or type(exc).__name__}; {what} "
                       "(limits.on_store_down); check limits.store in server.yaml and that the Redis runs")
    finally:
        await client.aclose()
