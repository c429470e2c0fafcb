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


def doctor_backup_findings(tmp_path, capsys, extra: str = "") -> list[tuple[str, str]]:
    """`llmgw doctor --json`'s backup findings on a machine laid out under tmp_path."""
    import json
    import shutil

    from llmgw.cli.main import main
    from llmgw.install.layout import Layout

    machine = lay_out(tmp_path / "cp1")
    if extra:
        add_backup_keys(machine, extra)
    layout = Layout(tmp_path / "root")
    layout.server_yaml.parent.mkdir(parents=True)
    shutil.copy(machine.config_path, layout.server_yaml)
    capsys.readouterr()
    main(["doctor", "--root", str(layout.root), "--json"])
    findings = json.loads(capsys.readouterr().out)["findings"]
    return [(f["status"], f["message"]) for f in findings if f["check"] == "backup"]


def test_doctor_warns_of_backups_in_clear_on_this_disk_only(tmp_path, capsys):
    found = doctor_backup_findings(tmp_path, capsys)
    assert found == [
        ("warn", "backups are not encrypted: each archive would hold the admin token, key and password hashes and "
                 "TLS private keys in clear; set backup.encrypt_to (llmgw server backup keygen makes a key) or "
                 "backup.passphrase_file"),
        ("warn", "backups stay on this machine's disk, lost with it: set backup.copy_to (a folder on another disk, "
                 "ssh://user@host/path or s3://bucket/prefix)"),
        ("warn", "no backup.schedule: backups are made only when asked (llmgw server backup, ctl backup, or a "
                 "timer of your own)")]
    token = (tmp_path / "cp1" / "var" / "lib" / "llmgw" / "admin-token").read_text().strip()
    assert not any(token in text for _, text in found)


def test_doctor_is_content_with_encrypted_copied_scheduled_backups(tmp_path, capsys):
    _, recipient = new_key(tmp_path)
    found = doctor_backup_findings(tmp_path, capsys, f"encrypt_to: [{recipient}]\ncopy_to: [/mnt/offsite]\n"
                                                     "schedule: '02:30'")
    assert found == [("ok", "backups are encrypted to 1 age recipient(s) (backup.encrypt_to)"),
                     ("ok", "each backup is copied to /mnt/offsite"),
                     ("ok", "the server backs up daily at 02:30 UTC, keeping 7")]


async def test_a_server_making_archives_in_clear_says_so_in_its_log(tmp_path, aiohttp_client, caplog):
    machine = lay_out(tmp_path / "cp1")
    store = await open_store(machine.store_dsn)
    caplog.set_level(logging.INFO, "llmgw.backup")
    try:
        await aiohttp_client(make_admin_app(machine.config(), store, token=TOKEN))
    finally:
        await store.close()
    warned = [r for r in caplog.records if r.name == "llmgw.backup" and r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].getMessage().startswith("backups are not encrypted: each archive would ")
    assert machine.token.read_text().strip() not in warned[0].getMessage()
