"""The store's replication series against a real streaming standby: a PostgreSQL primary, a standby made of it
with `pg_basebackup -R` on another port, and llmgw stores opened on each. The primary's store names itself the
leader and the standby by its application_name, address and state (streaming); the standby's lag in bytes grows
while its replay is paused under writes and falls back to about nothing once it resumes; a store opened on the
standby names itself a replica in recovery; a role without pg_monitor sees the standby with its host, state and
lag unknown (-1); and one opened on the standby before the primary migrated the database is refused with a
message saying to use the primary. `promtool check metrics` is clean on what is published."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from llmgw.obs.store_metrics import StoreCollector
from llmgw.store import open_store
from llmgw.store.errors import StoreUnavailable
from tests.conftest import PostgresServer, find_postgres_bin, free_port
from tests.obs.scrape import promtool_problems, samples, value

pytestmark = pytest.mark.slow

STANDBY_NAME = "llmgw-standby-1"


class Standby:
    """A hot standby of `primary`, streaming from it, in its own folder on its own port."""

    def __init__(self, primary: PostgresServer, base: Path) -> None:
        self.primary = primary
        self.server = PostgresServer(primary.bin_dir, base, primary._as_postgres)

    def start(self) -> None:
        s, p = self.server, self.primary
        done = s._run("pg_basebackup", "-h", p.host, "-p", str(p.port), "-U", p.user, "-D", str(s.data),
                      "-R", "-X", "stream", "--no-sync")
        assert done.returncode == 0, f"pg_basebackup failed:\n{done.stdout}\n{done.stderr}"
        s.port = free_port()
        # cluster_name is the application_name its WAL receiver gives the primary.
        options = f"-p {s.port} -k {s.base} -c listen_addresses={s.host} -c cluster_name={STANDBY_NAME}"
        done = s._run("pg_ctl", "-D", str(s.data), "-l", str(s.log), "-o", options, "-w", "-t", "60", "start")
        log = s.log.read_text(errors="replace") if s.log.exists() else ""
        assert done.returncode == 0, f"standby did not start:\n{done.stdout}\n{done.stderr}\n{log}"


def _folder(as_postgres: bool) -> Path:
    base = Path(tempfile.mkdtemp(prefix="llmgw-pg-repl-"))
    (base / "owner.pid").write_text(str(os.getpid()))
    if as_postgres:
        account = pwd.getpwnam("postgres")
        os.chown(base, account.pw_uid, account.pw_gid)
    return base


@pytest.fixture
def primary_and_standby() -> Iterator[tuple[PostgresServer, PostgresServer]]:
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL server binaries not found; CI is set: apt-get install postgresql")
        pytest.skip("PostgreSQL server binaries not found: apt-get install postgresql")
    as_postgres = os.geteuid() == 0
    bases = [_folder(as_postgres), _folder(as_postgres)]
    primary = PostgresServer(bin_dir, bases[0], as_postgres)
    standby = Standby(primary, bases[1])
    try:
        primary.start()  # initdb's defaults: wal_level replica, max_wal_senders 10, trust for replication
        standby.start()
        yield primary, standby.server
    finally:
        standby.server.stop()
        primary.stop()
        for base in bases:
            shutil.rmtree(base, ignore_errors=True)


async def _scrape(collector: StoreCollector) -> str:
    collector._read_at = 0.0  # the test reads again at once; a server reads at most every few seconds
    await collector.refresh()
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def _wait(what: str, check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            assert got, f"timed out waiting for {what}"
            return got
        time.sleep(0.2)


async def test_the_primary_publishes_its_streaming_standby_and_its_lag(primary_and_standby):
    primary, standby = primary_and_standby
    database = primary.create_database()
    store = await open_store(primary.dsn(database))
    on_standby = None
    try:
        await store.create_org("acme")
        _wait("the standby to stream", lambda: primary.psql(
            f"SELECT state FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}'") == "streaming")
        collector = StoreCollector(store)
        text = await _scrape(collector)
        assert value(text, "llmgw_store_member", role="leader", state="running") == 1
        assert value(text, "llmgw_store_member", member=STANDBY_NAME, host="127.0.0.1", role="replica",
                     state="streaming") == 1
        members = [dict(labels) for (name, labels), _ in samples(text).items() if name == "llmgw_store_member"]
        assert len(members) == 2, members
        assert value(text, "llmgw_store_replica_lag_bytes", member=STANDBY_NAME) is not None
        assert promtool_problems(text) == []

        # Replay paused: the standby still receives the WAL, but what it has replayed falls behind the writes.
        standby.psql("SELECT pg_wal_replay_pause()")
        lags = []
        for n in range(3):
            for i in range(50):
                await store.create_org(f"paused-{n}-{i}")
            lags.append(value(await _scrape(collector), "llmgw_store_replica_lag_bytes", member=STANDBY_NAME))
        assert lags[0] > 0 and lags[0] < lags[1] < lags[2], lags
        text = await _scrape(collector)
        assert value(text, "llmgw_store_member", member=STANDBY_NAME, state="streaming") == 1

        standby.psql("SELECT pg_wal_replay_resume()")

        async def caught_up() -> float:
            deadline = time.monotonic() + 30
            while True:
                lag = value(await _scrape(collector), "llmgw_store_replica_lag_bytes", member=STANDBY_NAME)
                if lag is not None and lag < 8192 or time.monotonic() > deadline:
                    return lag
                time.sleep(0.2)

        assert await caught_up() < 8192  # about nothing: less than one WAL page

        # A store opened on the standby (a read-only server in recovery) says it is a replica, no standbys.
        on_standby = await open_store(standby.dsn(database))
        text = await _scrape(StoreCollector(on_standby))
        assert value(text, "llmgw_store_member", role="replica", state="in_recovery") == 1
        assert value(text, "llmgw_store_member", role="leader") is None
        assert value(text, "llmgw_store_replica_lag_bytes") is None
        assert promtool_problems(text) == []
        deadline = time.monotonic() + 10
        while await on_standby.get_org_by_name("paused-2-49") is None:  # it replays the writes
            assert time.monotonic() < deadline, "the standby never showed the last write"
            time.sleep(0.1)

        # A role that is neither superuser nor pg_monitor sees the standby but not its state or lag.
        primary.psql("CREATE ROLE llmgw_app LOGIN")
        owned = primary.create_database()
        primary.psql(f'ALTER DATABASE "{owned}" OWNER TO llmgw_app')
        plain = await open_store(primary.dsn(owned).replace("postgres@", "llmgw_app@"))
        try:
            text = await _scrape(StoreCollector(plain))
            assert value(text, "llmgw_store_member", member=STANDBY_NAME, host="unknown", role="replica",
                         state="unknown") == 1
            assert value(text, "llmgw_store_replica_lag_bytes", member=STANDBY_NAME) == -1
            assert promtool_problems(text) == []
        finally:
            await plain.close()

        # A database the primary has not migrated cannot be migrated on a read-only standby: a clear refusal.
        empty = primary.create_database()
        _wait("the new database on the standby",
              lambda: standby.psql(f"SELECT 1 FROM pg_database WHERE datname = '{empty}'") == "1")
        with pytest.raises(StoreUnavailable, match="standby in recovery .* point store.dsn at the primary"):
            await open_store(standby.dsn(empty))
    finally:
        if on_standby is not None:
            await on_standby.close()
        await store.close()
