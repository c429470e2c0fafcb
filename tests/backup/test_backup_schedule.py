"""backup.schedule: the running server backs up at its times; a failed backup is seen in the log, the metrics
and GET /backups (what `llmgw ctl backups` shows)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from llmgw.admin.app import make_admin_app
from llmgw.admin.state import ADMIN
from llmgw.backup.schedule import BackupCollector, parse_schedule
from llmgw.store import open_store

from .conftest import lay_out, seed
from .test_backup_encrypted import add_backup_keys, new_key

TOKEN = "t" * 40
T0 = dt.datetime(2030, 5, 1, 1, 0, tzinfo=dt.UTC)


def test_an_interval_and_a_daily_time():
    every = parse_schedule("6h")
    assert str(every) == "every 6h" and every.next_after(T0) == T0 + dt.timedelta(hours=6)
    daily = parse_schedule("02:30")
    assert str(daily) == "daily at 02:30 UTC"
    assert daily.next_after(T0) == T0.replace(hour=2, minute=30)
    assert daily.next_after(T0.replace(hour=2, minute=30)) == T0.replace(day=2, hour=2, minute=30)
    assert parse_schedule("") is None


@pytest.fixture
async def server(tmp_path, aiohttp_client):
    """The admin API of a control plane whose server.yaml schedules backups every 5 minutes, copying them to a
    folder; `clock` is what the job reads as now."""
    machine = lay_out(tmp_path / "cp1")
    _, recipient = new_key(tmp_path)
    elsewhere = tmp_path / "offsite"
    add_backup_keys(machine, f"schedule: 5m\nencrypt_to: [{recipient}]\ncopy_to: [{elsewhere}]")
    store = await open_store(machine.store_dsn)
    await seed(store)
    config = machine.config()
    app = make_admin_app(config, store, token=TOKEN, config_path=str(machine.config_path))
    client = await aiohttp_client(app)
    admin = app[ADMIN]
    try:
        yield machine, client, admin, elsewhere
    finally:
        await store.close()


async def get_backups(client) -> dict:
    r = await client.get("/api/v1/backups", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status == 200
    return await r.json()


def scrape(admin) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(BackupCollector(admin))
    found = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("llmgw_backup_"):
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    return found


async def test_the_job_backs_up_when_due_and_the_outcome_is_shown(server, caplog):
    machine, client, admin, elsewhere = server
    job = admin.backup_job
    assert job is not None and str(job.schedule) == "every 5m"
    listed = await get_backups(client)
    assert listed["schedule"] == "every 5m" and listed["encrypted"] is True
    assert listed["copy_to"] == [str(elsewhere)] and listed["last_scheduled"] is None

    # The server's own task is replaced by one on a clock the test moves.
    now = {"at": T0}
    job.clock = lambda: now["at"]
    job.poll_s = 0.01
    runner = asyncio.create_task(job.run_forever())
    await asyncio.sleep(0.05)
    assert job.next_due == T0 + dt.timedelta(minutes=5) and job.last is None  # not due yet: nothing made
    now["at"] = T0 + dt.timedelta(minutes=5)
    caplog.set_level(logging.INFO, "llmgw.backup")
    try:
        for _ in range(200):
            if job.last is not None:
                break
            await asyncio.sleep(0.05)
            if job.last is None and runner.done():
                runner.result()
    finally:
        runner.cancel()
    assert job.last is not None and job.last.ok, job.last
    listed = await get_backups(client)
    assert listed["last_scheduled"]["ok"] is True
    name = listed["last_scheduled"]["archive"]
    assert name.endswith(".tar.gz.age") and (elsewhere / name).exists()
    assert listed["backups"][0]["name"] == name and listed["backups"][0]["encrypted"] is True
    assert listed["next_due"].startswith("2030-05-01T01:10:00")
    metrics = scrape(admin)
    assert metrics['llmgw_backup_runs_total{outcome="ok"}'] == 1 and metrics["llmgw_backup_last_failed"] == 0
    assert metrics["llmgw_backup_last_success_timestamp_seconds"] == (T0 + dt.timedelta(minutes=5)).timestamp()


async def test_a_failed_copy_is_a_failed_job_the_operator_sees(server, caplog):
    machine, client, admin, elsewhere = server
    elsewhere.write_text("a file where the folder should be\n")
    caplog.set_level(logging.INFO, "llmgw.backup")
    outcome = await admin.backup_job.run_once()
    assert not outcome.ok and f"backup.copy_to[0] {elsewhere}: cannot write" in outcome.error
    assert any(r.levelno == logging.ERROR and r.getMessage().startswith("scheduled backup failed: the archive ")
               for r in caplog.records)
    listed = await get_backups(client)
    last = listed["last_scheduled"]
    assert last["ok"] is False and last["archive"] == "" and "not copied everywhere" in last["error"]
    metrics = scrape(admin)
    assert metrics['llmgw_backup_runs_total{outcome="failed"}'] == 1
    assert metrics["llmgw_backup_last_failed"] == 1 and metrics["llmgw_backup_last_success_timestamp_seconds"] == 0


async def test_a_standby_does_not_back_up(server):
    _, _, admin, _ = server
    job = admin.backup_job
    job.is_leader = lambda: False
    now = {"at": T0}
    job.clock = lambda: now["at"]
    job.poll_s = 0.01
    runner = asyncio.create_task(job.run_forever())
    await asyncio.sleep(0.02)
    now["at"] = T0 + dt.timedelta(hours=1)
    await asyncio.sleep(0.05)
    runner.cancel()
    assert job.last is None and job.successes == job.failures == 0


def test_the_daily_time_is_read_back_from_server_yaml(tmp_path):
    machine = lay_out(tmp_path / "cp1")
    add_backup_keys(machine, "schedule: '02:30'")
    assert machine.config().backup.schedule == "02:30"
