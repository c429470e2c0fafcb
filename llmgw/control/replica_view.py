"""Every control plane serves clients: the leader's replica set, copied to its standbys through the store.

Only the leader talks to agents, so only its reconciler knows which replicas
serve which model at which address. `ReplicaView` runs on every control
plane and does one of two things each second (`EVERY`):

- **leading**: it writes the replicas its router serves (id, model, address,
  the engine's name for the model, concurrency, node labels, the leader's
  passive health) into the store's `replica_views` table when that set
  changed, and otherwise confirms that the set written still stands (one
  small UPDATE). A write carries the lease's epoch, and the store refuses one
  from an older epoch, so a former leader cannot overwrite its successor's.
- **standby**: it reads the row (the body only when its version moved) and
  makes its own router's set match it: replicas added, changed, removed.
  Engine keys are not in the store: every control plane derives a replica's
  key from the secret they share (llmgw.control.engine_keys). The catalog,
  its aliases and the canaries' shares come from the store on their own
  (llmgw.router.catalog_follow), as do usage rows and budgets.

Why the store and not a connection between control planes: each reaches
the store already (the lease, the catalog, usage rows), so no port,
certificate or list of peers is added.

The copy's age is measured on the standby's own clock, from the last read
that saw the leader confirm the set anew, so the machines' clocks need not
agree. Past `max_age` (twice `control.lease_ttl`: longer than any take-over
can take) the standby drops the copied replicas and refuses requests for
them with a 503 that says why, rather than send them to replicas that may
be gone: its store is away, or no leader has confirmed the set that long.

A standby also reports, under its own row (`use:` and a hash of its name),
the copied replicas it sent requests to since its last report, and the
leader counts that use as its own when it decides which replicas are idle:
a replica that only the standbys' clients use is not stopped as unused.
The report also names the on-demand models a client asked the standby for
while none of their replicas ran: the leader starts them as if asked
itself, and the standby's request waits (as long as its band may) for the
replica to reach its copy.

A standby that takes the lease keeps the copied replicas while its
reconciler adopts them from the agents that register with it (the same ids:
the adoption replaces each in place), and drops those still not adopted
after `adopt_grace` seconds. So clients see no gap beyond the take-over.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from llmgw.adapters.serving import base_id_of
from llmgw.config.secrets import Secret
from llmgw.obs import logs
from llmgw.router.replicas import Replica, ReplicaSet

log = logs.get("llmgw.control.replica_view")

#: The row's name in `replica_views`: one cluster, one view.
VIEW_NAME = "control-plane"
#: How often the leader confirms its set and a standby reads it (seconds).
EVERY = 1.0
#: Longest wait for one read or write of the view; a store that hangs counts as one that is away.
STORE_TIMEOUT = 3.0
#: Sources of the replicas a view carries: the leader's own, and (during a take-over) those it copied.
CARRIED = ("control", "view")
#: The rows standbys report the use of the leader's replicas under: this, and a hash of the standby's name.
USE_PREFIX = "use:"
#: A model a standby's client waits for is named in its reports this long after it last asked (seconds).
WANT_S = 5.0

UsedElsewhere = Callable[[str, float], None]  # (replica id, when on our clock it was last sent a request)
WantedElsewhere = Callable[[str], None]  # (model): a standby's client asked for it and none of its replicas runs


def use_row_name(holder: str) -> str:
    import hashlib

    return USE_PREFIX + hashlib.sha256(holder.encode("utf-8")).hexdigest()[:24]


def feed_reconciler(reconciler) -> UsedElsewhere:
    """What the leader calls with the standbys' use of its replicas: the reconciler's idle reckoning counts it."""

    def used(replica_id: str, at: float) -> None:
        known = reconciler.records
        if replica_id in known:
            reconciler.used_elsewhere[replica_id] = max(reconciler.used_elsewhere.get(replica_id, 0.0), at)
        for gone in [k for k in reconciler.used_elsewhere if k not in known]:
            del reconciler.used_elsewhere[gone]

    return used


def start_on_demand(reconciler) -> WantedElsewhere:
    """What the leader calls with a model a standby's client waits for: started as for a request of its own
    (Reconciler.ensure_started, waited for a few seconds; the standby asks again while it still waits)."""
    from llmgw.control.state import ModelUnavailable

    waiting: dict[str, asyncio.Task] = {}  # one start at a time per model

    async def start(model: str) -> None:
        try:
            await reconciler.ensure_started(model, timeout=2 * WANT_S)
        except (ModelUnavailable, TimeoutError):
            pass  # the standby's request times out by itself and says there is no replica

    def wanted(model: str) -> None:
        if model in waiting:
            return
        task = asyncio.get_running_loop().create_task(start(model), name="llmgw-start-for-standby")
        waiting[model] = task
        task.add_done_callback(lambda _: waiting.pop(model, None))

    return wanted


def encode(replicas: ReplicaSet) -> str:
    """The replicas a leader publishes, as JSON text that is the same for the same set (sorted, no key)."""
    now = time.monotonic()
    entries = []
    for r in replicas:
        if r.source not in CARRIED:
            continue
        entries.append({
            "id": r.id, "model": r.model, "url": r.base_url, "engine_model": r.engine_model, "api": r.api,
            "max_concurrency": r.max_concurrency, "labels": dict(r.labels), "metrics_url": r.metrics_url,
            "healthy": r.usable(now), "body_fields": dict(r.body_fields),  # adapters: llama.cpp's lora
        })
    entries.sort(key=lambda e: e["id"])
    return json.dumps({"replicas": entries}, sort_keys=True, separators=(",", ":"))


def decode(body: str) -> list[dict[str, Any]]:
    """The entries of a published view; ValueError when the body is not one."""
    data = json.loads(body)
    entries = data.get("replicas") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError("a replica view is a JSON object with a list of replicas")
    out = []
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("id"), str) or not isinstance(e.get("model"), str) \
                or not isinstance(e.get("url"), str):
            raise ValueError(f"a replica view entry lacks its id, model or url: {e!r:.200}")
        out.append(e)
    return out


class ReplicaView:
    """Keeps the leader's replica set in the store, or this standby's router fed from it."""

    def __init__(self, store, replicas: ReplicaSet, leadership, keys, *, max_age: float,
                 adopt_grace: float, every: float = EVERY, name: str = VIEW_NAME,
                 used_elsewhere: UsedElsewhere | None = None, wanted_elsewhere: WantedElsewhere | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.replicas = replicas
        self.leadership = leadership
        self.keys = keys  # llmgw.control.engine_keys.EngineKeys: each copied replica's key
        self.max_age = max_age
        self.adopt_grace = adopt_grace
        self.every = every
        self.name = name
        self.clock = clock
        self.version: int | None = None  #: the version of the view applied here (standby) or written (leader)
        self.holder = ""  #: who wrote the view applied here
        self.stale = False  #: the copy is older than max_age: its replicas are dropped, requests refused
        self.last_error = ""
        self._confirmed_at: dt.datetime | None = None  # the row's confirmed_at as last read
        self._fresh_at: float | None = None  # our clock when the view was last seen confirmed anew
        self._written = ""  # the body last written (leader)
        self._led_since: float | None = None  # our clock when we took the lease (adopting copied replicas)
        self._entries: list[dict[str, Any]] = []  # the view as last read (standby)
        self.used_elsewhere = used_elsewhere  # the leader: told of the standbys' use of its replicas
        self._reported_at = 0.0  # the router's clock at the standby's last report of use
        self._reports = 0
        self.wanted_elsewhere = wanted_elsewhere  # the leader: told of models a standby's clients wait for
        self._wanted: dict[str, float] = {}  # the standby: models its clients wait for, by when asked (monotonic)
        self._use_seen: dict[str, int] = {}  # the leader: each standby's report, by the version last read
        self._task: asyncio.Task | None = None

    # ---------------------------------------------------------------- reading

    @property
    def leading(self) -> bool:
        return bool(self.leadership.leading)

    def age(self, now: float | None = None) -> float | None:
        """Seconds since the set this gateway serves was last known to stand; 0 on the leader, None: never."""
        if self.leading:
            return 0.0
        if self._fresh_at is None:
            return None
        return max(0.0, (self.clock() if now is None else now) - self._fresh_at)

    def describe(self) -> dict[str, Any]:
        """For /leader and /health: the role, and how old this gateway's replica set is."""
        age = self.age()
        copied = sum(1 for r in self.replicas if r.source == "view")
        return {
            "role": "leader" if self.leading else "standby",
            "replica_view": {
                "version": self.version, "age_s": None if age is None else round(age, 3),
                "max_age_s": self.max_age, "stale": self.stale, "from": self.holder or None,
                "replicas": sum(1 for r in self.replicas if r.source in CARRIED), "copied": copied,
                "error": self.last_error or None,
            },
        }

    # ---------------------------------------------------------------- running

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name="llmgw-replica-view")

    async def stop(self) -> None:
        from llmgw.tasks import cancel_and_wait

        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def run(self) -> None:
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a bug here must not stop the copy for good
                log.exception("replica view step failed")
            await asyncio.sleep(self.every)

    async def step(self) -> None:
        if self.leading:
            if self._led_since is None:
                self._led_since = self.clock()
                self._written = ""  # write our set at once, in our epoch
                self._set_stale(False, "")
            self._drop_unadopted()
            await self._publish()
            await self._gather_use()
        else:
            if self._led_since is not None:  # we led and no longer do: read the new leader's view from scratch
                self._led_since = None
                self.version = None
                self._fresh_at = None
            await self._follow()
            if not self.stale:
                await self._report_use()

    # ---------------------------------------------------------------- leader

    async def _publish(self) -> None:
        body = encode(self.replicas)
        epoch = self.leadership.epoch
        holder = self.leadership.holder
        try:
            async with asyncio.timeout(STORE_TIMEOUT):
                if body == self._written and await self.store.confirm_replica_view(self.name, holder, epoch):
                    self.last_error = ""
                    return
                version = await self.store.publish_replica_view(self.name, holder, epoch, body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the store may be away: the next step tries again
            self._error(f"the replica view was not written: {exc or type(exc).__name__}")
            return
        if version is None:  # a newer leader wrote it: leadership will say so shortly
            self._error("the replica view was not written: a leader of a newer epoch holds it")
            return
        self._written, self.version, self.holder, self.last_error = body, version, holder, ""

    async def _gather_use(self) -> None:
        """Read the standbys' reports written since the last step; each entry says how long ago a replica was
        last sent a request there (a report first seen is only noted: its age is not known here)."""
        if self.used_elsewhere is None:
            return
        try:
            async with asyncio.timeout(STORE_TIMEOUT):
                rows = await self.store.list_replica_views(USE_PREFIX)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - only idle reckoning waits for the next step
            self._error(f"the standbys' use of the replicas was not read: {exc or type(exc).__name__}")
            return
        now = self.clock()
        for row in rows:
            seen = self._use_seen.get(row.name)
            self._use_seen[row.name] = row.version
            if seen is None or seen == row.version or row.body is None:
                continue
            try:
                report = json.loads(row.body)
                for rid, e in report.get("replicas", {}).items():
                    at = now if e.get("in_flight") else now - max(0.0, float(e.get("ago", 0.0)))
                    self.used_elsewhere(str(rid), at)
                if self.wanted_elsewhere is not None:
                    for model in report.get("wanted", []):
                        self.wanted_elsewhere(str(model))
            except (ValueError, AttributeError, TypeError) as exc:
                self._error(f"a standby's report of use cannot be read ({row.holder}): {exc}")

    async def _report_use(self) -> None:
        """Tell the leader which copied replicas this standby sent requests to since its last report."""
        now = time.monotonic()  # the router's clock: Replica.last_chosen
        used = {r.id: {"ago": round(max(0.0, now - r.last_chosen), 3), "in_flight": r.in_flight}
                for r in self.replicas
                if r.source == "view" and (r.in_flight > 0 or r.last_chosen > self._reported_at)}
        wanted = sorted(m for m, at in self._wanted.items() if now - at <= WANT_S)
        self._wanted = {m: at for m, at in self._wanted.items() if now - at <= WANT_S}
        if not used and not wanted:
            return
        self._reports += 1  # so each report is a new version, even one that reads like the last
        body = json.dumps({"replicas": used, "wanted": wanted, "report": self._reports}, sort_keys=True,
                          separators=(",", ":"))
        holder = self.leadership.holder
        try:
            async with asyncio.timeout(STORE_TIMEOUT):
                await self.store.publish_replica_view(use_row_name(holder), holder, 1, body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the next step reports again
            self._error(f"this standby's use of the replicas was not reported: {exc or type(exc).__name__}")
            return
        self._reported_at = now

    async def wait_started(self, model: str, timeout: float | None) -> None:
        """On a standby: have the leader start `model` (on demand) and wait until a replica of it is copied
        here. TimeoutError after `timeout` seconds; ModelUnavailable when the copy is stale."""
        from llmgw.control.state import ModelUnavailable

        if self.stale:
            raise ModelUnavailable(self.replicas.unavailable_reason or "this standby's replica view is stale")
        deadline = time.monotonic() + (timeout if timeout is not None else 30.0)
        while not any(r.usable() for r in self.replicas.replicas_for(model)):
            self._wanted[model] = time.monotonic()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{model!r} did not start within {timeout} s")
            await asyncio.sleep(min(0.1, left))

    def _drop_unadopted(self) -> None:
        """After a take-over, copied replicas the reconciler has not adopted by `adopt_grace` are dropped."""
        assert self._led_since is not None
        if self.clock() - self._led_since < self.adopt_grace:
            return
        for replica in self.replicas:
            if replica.source == "view":
                logs.event(log, "copied replica not adopted after the take-over; dropped", logging.WARNING,
                           replica_id=replica.id, model=replica.model, grace_s=self.adopt_grace)
                self.replicas.remove(replica.id)

    # ---------------------------------------------------------------- standby

    async def _follow(self) -> None:
        try:
            async with asyncio.timeout(STORE_TIMEOUT):
                row = await self.store.get_replica_view(self.name, unless_version=self.version)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the store is away: the copy ages, then is refused
            self._error(f"the store did not answer: {exc or type(exc).__name__}")
            self._check_age("its store has not answered")
            return
        now = self.clock()
        if row is None:
            self.last_error = ""
            self._check_age("no leader has published its replicas yet")
            return
        if row.confirmed_at != self._confirmed_at:
            if self._fresh_at is None:  # first read: as old as the row says, on the writer's clock
                behind = (dt.datetime.now(dt.UTC) - row.confirmed_at).total_seconds()
                self._fresh_at = now - max(0.0, behind)
            else:
                self._fresh_at = now
            self._confirmed_at = row.confirmed_at
        self.last_error = ""
        if row.body is not None:
            try:
                entries = decode(row.body)
            except ValueError as exc:
                self._error(f"the replica view in the store cannot be read: {exc}")
                return
            self.version, self.holder = row.version, row.holder
            self._entries = entries
            if not self.stale:
                self._apply(entries)
        self._check_age("no leader has confirmed its replicas since (it may be down, and no standby took over)")

    def _check_age(self, why: str) -> None:
        age = self.age()
        if age is None:
            self._set_stale(True, f"this gateway is a standby and has not read the leader's replicas yet ({why})")
            return
        if age > self.max_age:
            self._set_stale(True, f"this gateway is a standby and its copy of the leader's replicas is {age:.0f} s "
                                  f"old, more than the {self.max_age:.0f} s it serves from ({why}); it sends "
                                  "nothing to replicas that may be gone")
        elif self.stale:
            self._set_stale(False, "")
            self._apply(self._entries)

    def _set_stale(self, stale: bool, reason: str) -> None:
        was = self.stale
        self.stale = stale
        self.replicas.unavailable_reason = reason
        if stale and not was:
            logs.event(log, "replica view stale: copied replicas dropped, requests refused", logging.ERROR,
                       reason=reason)
            for replica in self.replicas:
                if replica.source == "view":
                    self.replicas.remove(replica.id)
        elif was and not stale:
            logs.event(log, "replica view fresh again: serving the leader's replicas", logging.WARNING)

    def _apply(self, entries: list[dict[str, Any]]) -> None:
        """Make the router's copied replicas those of the view."""
        wanted = {e["id"]: e for e in entries}
        for replica in self.replicas:
            if replica.source == "view" and replica.id not in wanted:
                self.replicas.remove(replica.id)
        for rid, e in wanted.items():
            current = self.replicas.get(rid)
            if current is not None and current.source != "view":
                continue  # this gateway's own (server.yaml's, or its reconciler's): left as it is
            url = e["url"]
            labels = {str(k): str(v) for k, v in (e.get("labels") or {}).items()}
            concurrency = max(1, int(e.get("max_concurrency") or 1))
            if current is not None:
                if (current.base_url, current.max_concurrency, current.labels, current.engine_model) != \
                        (url, concurrency, labels, e.get("engine_model") or ""):
                    self.replicas.update(rid, base_url=url, max_concurrency=concurrency, labels=labels,
                                         engine_model=e.get("engine_model") or "",
                                         metrics_url=e.get("metrics_url"))
                continue
            self.replicas.add(Replica(
                id=rid, model=e["model"], base_url=url, engine_model=e.get("engine_model") or "",
                api_key=Secret(self.keys.key_for(base_id_of(rid)), origin="derived"),  # adapters: the base's key
                api=e.get("api") or "openai",
                max_concurrency=concurrency, labels=labels, metrics_url=e.get("metrics_url"), source="view",
                body_fields=dict(e.get("body_fields") or {}),
                shares_with=base_id_of(rid) if base_id_of(rid) != rid else "",  # shared room: an adapter's, its base's
            ))

    def _error(self, message: str) -> None:
        if message != self.last_error:
            logs.event(log, message, logging.WARNING)
        self.last_error = message


class ReplicaViewCollector:
    """llmgw_replica_view_age_seconds and llmgw_replica_view_stale, read at each scrape."""

    def __init__(self, view: ReplicaView) -> None:
        self.view = view

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        from llmgw.obs.metric_defs import defn

        for name, value in (("llmgw_replica_view_age_seconds", self.view.age()),
                            ("llmgw_replica_view_stale", 1.0 if self.view.stale else 0.0)):
            if value is None:
                continue  # never read: no sample rather than a made-up age
            d = defn(name)
            family = GaugeMetricFamily(d.family, d.help)
            family.add_metric([], float(value))
            yield family


__all__ = ["EVERY", "USE_PREFIX", "VIEW_NAME", "ReplicaView", "ReplicaViewCollector", "decode", "encode",
           "feed_reconciler", "start_on_demand", "use_row_name"]
