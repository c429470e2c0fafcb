"""When the running server backs up by itself (backup.schedule), and what the last scheduled backup did.

    schedule = parse_schedule("6h")          # every six hours
    schedule = parse_schedule("02:30")       # every day at 02:30 UTC
    schedule.next_after(now)                 # when the next one is due

`BackupJob.run_forever()` is the server's task: at each due time it makes
a backup of the open store (encrypted, read back and checked, copied to
backup.copy_to, as `llmgw server backup` does) and keeps the outcome in
`BackupJob.last` for the metrics (llmgw_backup_*) and `llmgw ctl backups`.
A failure is logged and counted; the next one is still tried at its time. With several control planes only the
leader backs up.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import re
from collections.abc import Callable
from typing import Any

import attrs

from llmgw.backup.archive import BackupError

__all__ = ["BackupJob", "JobOutcome", "Schedule", "parse_schedule", "settings_problems"]

log = logging.getLogger("llmgw.backup")

_DAILY = re.compile(r"([01]\d|2[0-3]):([0-5]\d)")
#: The shortest interval a schedule may have: a backup reads the whole store.
SHORTEST = dt.timedelta(minutes=5)


@attrs.frozen(kw_only=True)
class Schedule:
    every: dt.timedelta | None = None  #: an interval
    daily: dt.time | None = None  #: a time of day, UTC

    def next_after(self, now: dt.datetime) -> dt.datetime:
        if self.every is not None:
            return now + self.every
        assert self.daily is not None
        today = dt.datetime.combine(now.astimezone(dt.UTC).date(), self.daily, tzinfo=dt.UTC)
        return today if today > now else today + dt.timedelta(days=1)

    def __str__(self) -> str:
        if self.every is not None:
            from llmgw.config.units import Duration

            return f"every {Duration(seconds=self.every.total_seconds())}"
        assert self.daily is not None
        return f"daily at {self.daily.strftime('%H:%M')} UTC"


def parse_schedule(text: str) -> Schedule | None:
    """backup.schedule read: None when empty; ValueError saying what to write otherwise."""
    text = text.strip()
    if not text:
        return None
    m = _DAILY.fullmatch(text)
    if m:
        return Schedule(daily=dt.time(int(m.group(1)), int(m.group(2))))
    from llmgw.config.units import Duration

    try:
        every = Duration.parse(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither an interval (6h, 30m) nor a daily UTC time (02:30)") from None
    if every < SHORTEST:
        raise ValueError(f"{text}: shorter than {int(SHORTEST.total_seconds() // 60)} minutes; each backup "
                         "reads the whole store")
    return Schedule(every=dt.timedelta(seconds=every.total_seconds()))


def settings_problems(config: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """(key path, what is wrong) for every backup.* key: the schedule, encryption and copies."""
    from llmgw.backup import copies, seal

    problems: list[tuple[tuple[str | int, ...], str]] = []
    try:
        parse_schedule(config.backup.schedule)
    except ValueError as exc:
        problems.append((("backup", "schedule"), str(exc)))
    if config.backup.keep < 0:
        problems.append((("backup", "keep"), "cannot be negative; 0 keeps every archive"))
    return problems + seal.settings_problems(config) + copies.settings_problems(config)


@attrs.define(kw_only=True)
class JobOutcome:
    """What the last scheduled backup did."""

    at: dt.datetime
    ok: bool
    archive: str = ""  #: its name, when one was made
    size: int = 0
    encrypted: bool = False
    copies: tuple[str, ...] = ()
    error: str = ""  #: what went wrong, when not ok
    seconds: float = 0.0


@attrs.define(kw_only=True)
class BackupJob:
    """The server's scheduled backups: one at a time, at the schedule's times, while this server leads."""

    config: Any
    config_path: str | None
    store: Any
    schedule: Schedule
    lock: asyncio.Lock = attrs.Factory(asyncio.Lock)  #: shared with POST /backups, one backup at a time
    is_leader: Callable[[], bool] = lambda: True
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    last: JobOutcome | None = None
    last_success: dt.datetime | None = None
    failures: int = 0
    successes: int = 0
    next_due: dt.datetime | None = None
    #: the longest it sleeps before looking at the clock again (a clock that jumps is followed)
    poll_s: float = 60.0

    async def run_forever(self) -> None:
        self.next_due = self.schedule.next_after(self.clock())
        log.info("scheduled backups: %s; the next at %s", self.schedule, self.next_due.isoformat())
        while True:
            wait = (self.next_due - self.clock()).total_seconds()
            if wait > 0:
                await asyncio.sleep(min(wait, self.poll_s))
                continue
            self.next_due = self.schedule.next_after(self.clock())
            if not self.is_leader():
                continue
            await self.run_once()

    async def run_once(self) -> JobOutcome:
        """Make one backup now, record and say how it went; never raises for a failed backup."""
        from llmgw.backup.make import make_backup

        started = self.clock()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        async with self.lock:
            try:
                result = await make_backup(self.config, config_path=self.config_path, store=self.store)
            except BackupError as exc:
                outcome = JobOutcome(at=started, ok=False, error=str(exc), seconds=loop.time() - t0)
            else:
                outcome = JobOutcome(at=started, ok=True, archive=result.name, size=result.size,
                                     encrypted=result.encrypted, copies=result.copies, seconds=loop.time() - t0)
        self.last = outcome
        if outcome.ok:
            self.successes += 1
            self.last_success = started
            log.info("scheduled backup %s made, checked%s (%d bytes, %.1fs)", outcome.archive,
                     f" and copied to {len(outcome.copies)} place(s)" if outcome.copies else "", outcome.size,
                     outcome.seconds)
        else:
            self.failures += 1
            log.error("scheduled backup failed: %s", outcome.error)
        return outcome


def _leads(admin: Any) -> bool:
    """Whether this control plane is the one that backs up: the leader, or the only one (no control plane)."""
    slot = getattr(admin.cluster, "slot", None)
    plane = getattr(slot, "plane", None)
    return True if plane is None else bool(plane.leading)


async def scheduled_backups(app: Any) -> Any:
    """The admin app's cleanup context: backup.schedule's job, kept on the admin state as `backup_job`."""
    from llmgw.admin.state import ADMIN
    from llmgw.tasks import cancel_and_wait

    admin = app[ADMIN]
    b = admin.config.backup
    if not b.encrypt_to and not b.passphrase_file:
        from llmgw.backup.advice import CLEAR_WARNING

        log.warning("%s (docs/backup.md)", CLEAR_WARNING)
    schedule = parse_schedule(b.schedule)
    if schedule is None:
        yield
        return
    job = BackupJob(config=admin.config, config_path=admin.config_path, store=admin.store, schedule=schedule,
                    lock=admin.backup_lock, is_leader=lambda: _leads(admin))
    admin.backup_job = job
    task = asyncio.get_running_loop().create_task(job.run_forever(), name="llmgw-backup-schedule")
    try:
        yield
    finally:
        await cancel_and_wait(task)


class BackupCollector:
    """llmgw_backup_*: the scheduled backups' outcomes (no series while backup.schedule is empty)."""

    def __init__(self, admin: Any) -> None:
        self.admin = admin

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from llmgw.obs.metric_defs import defn

        job = getattr(self.admin, "backup_job", None)
        if job is None:
            return
        d = defn("llmgw_backup_runs_total")
        runs = CounterMetricFamily(d.family, d.help, labels=list(d.labels))
        runs.add_metric(["ok"], job.successes)
        runs.add_metric(["failed"], job.failures)
        yield runs
        d = defn("llmgw_backup_last_success_timestamp_seconds")
        yield GaugeMetricFamily(d.family, d.help,
                                value=job.last_success.timestamp() if job.last_success else 0.0)
        d = defn("llmgw_backup_last_failed")
        yield GaugeMetricFamily(d.family, d.help, value=1.0 if job.last is not None and not job.last.ok else 0.0)
        d = defn("llmgw_backup_last_size_bytes")
        yield GaugeMetricFamily(d.family, d.help, value=float(job.last.size) if job.last and job.last.ok else 0.0)
