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

    async def run_forever(self) -> None:
        self.next_due = self.schedule.next_after(self.clock())
        log.info("scheduled backups: %s; the next at %s", self.schedule, self.next_due.isoformat())
        while True:
            wait = (self.next_due - self.clock()).total_seconds()
            if wait > 0:
                await asyncio.sleep(min(wait, 60.0))  # woken each minute: a clock that jumps is followed
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
