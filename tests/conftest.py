"""Fixtures shared by the whole suite.

``postgres_server``: a real PostgreSQL for the session, from Debian's
binaries (``apt-get install postgresql``), in a temporary directory, on a
free port of 127.0.0.1, trust authentication, stopped at the end. Without
the binaries its tests are skipped, unless the environment variable CI is
set, where that is a failure. A server left behind by a run that was killed
(its ``owner.pid`` names a process that is gone) is stopped and removed
when the next run starts one.

Engines a real agent started outlive it by design (a new agent adopts
them); one a test leaves behind is ended when the session ends, and named
(``pytest_sessionfinish`` below), so one run's engines never answer the next.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.agent.procs import pid_running

PG_GLOB = "/usr/lib/postgresql/*/bin"
#: Inherited by everything this session starts: how its leftover engines are told from another session's.
TEST_SESSION_ENV = "LLMGW_TEST_SESSION"
os.environ.setdefault(TEST_SESSION_ENV, uuid.uuid4().hex)


def _leftover_engines() -> list[tuple[int, str]]:
    """(pid, the test that started it) of engines this session started that still run."""
    mark = f"{TEST_SESSION_ENV}={os.environ[TEST_SESSION_ENV]}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark in env and any(v.startswith(b"LLMGW_SHARD_ID=") for v in env):
            test = next((v.split(b"=", 1)[1].decode(errors="replace") for v in env
                         if v.startswith(b"PYTEST_CURRENT_TEST=")), "?")
            found.append((int(entry), test))
    return found


def pytest_sessionfinish(session, exitstatus):
    import signal

    left = _leftover_engines() if os.path.isdir("/proc") else []
    for pid, _test in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if left:
        tests = sorted({t.removesuffix(" (call)").removesuffix(" (setup)") for _pid, t in left})
        print(f"\nended {len(left)} engine(s) left running by: {', '.join(tests)}")


def find_postgres_bin() -> Path | None:
    """The newest /usr/lib/postgresql/<version>/bin that has initdb and pg_ctl."""

    def version(path: str) -> int:
        name = Path(path).parent.name
        return int(name) if name.isdigit() else 0

    for folder in sorted(glob.glob(PG_GLOB), key=version, reverse=True):
        if os.access(Path(folder, "initdb"), os.X_OK) and os.access(Path(folder, "pg_ctl"), os.X_OK):
            return Path(folder)
    return None


def _free_bytes(path: str) -> int:
    if not os.access(path, os.W_OK | os.X_OK):
        return 0
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """A running PostgreSQL: make databases on it and get their DSNs."""

    user = "postgres"
    host = "127.0.0.1"

    def __init__(self, bin_dir: Path, base: Path, as_postgres: bool) -> None:
        self.bin_dir = bin_dir
        self.base = base
        self.data = base / "data"
        self.log = base / "server.log"
        self.port = 0
        self._as_postgres = as_postgres

    def dsn(self, database: str = "postgres") -> str:
        return f"postgres://{self.user}@{self.host}:{self.port}/{database}"

    def _cmd(self, tool: str, *args: str) -> list[str]:
        cmd = [str(self.bin_dir / tool), *args]
        # initdb and the server refuse to run as root.
        return ["runuser", "-u", "postgres", "--", *cmd] if self._as_postgres else cmd

    def _run(self, tool: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self._cmd(tool, *args), capture_output=True, text=True, timeout=timeout, check=False
        )

    def start(self) -> None:
        done = self._run(
            "initdb", "-D", str(self.data), "-U", self.user, "-A", "trust", "-E", "UTF8", "--no-sync"
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{done.stdout}\n{done.stderr}")
        for _ in range(3):  # another process may take the free port before the server does
            self.port = free_port()
            options = (
                f"-p {self.port} -k {self.base} -c listen_addresses={self.host}"
                " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            )
            done = self._run(
                "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start"
            )
            if done.returncode == 0:
                return
        log = self.log.read_text(errors="replace") if self.log.exists() else ""
        raise RuntimeError(f"pg_ctl start failed:\n{done.stdout}\n{done.stderr}\n{log}")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", timeout=60)

    def psql(self, sql: str, database: str = "postgres") -> str:
        done = subprocess.run(
            [str(self.bin_dir / "psql"), "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1",
             "-h", self.host, "-p", str(self.port), "-U", self.user, "-d", database, "-c", sql],
            capture_output=True, text=True, timeout=60, check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql {sql!r} failed: {done.stderr}")
        return done.stdout.strip()

    @property
    def major_version(self) -> int:
        name = self.bin_dir.parent.name
        return int(name) if name.isdigit() else 0

    def create_database(self) -> str:
        """A new empty database; returns its name."""
        name = f"test_{uuid.uuid4().hex[:16]}"
        # FILE_COPY (PostgreSQL 15+) copies the small template's files instead
        # of writing them all to the WAL: several times faster.
        strategy = " STRATEGY = FILE_COPY" if self.major_version >= 15 else ""
        self.psql(f'CREATE DATABASE "{name}"{strategy}')
        return name

    def drop_database(self, name: str) -> None:
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _postmaster_alive(base: Path) -> bool:
    try:
        return pid_running(int((base / "data" / "postmaster.pid").read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return False


def _sweep_abandoned_servers(bin_dir: Path, as_postgres: bool) -> None:
    """Stop and remove the test servers of runs that were killed before they could stop theirs."""
    for folder in {"/dev/shm", tempfile.gettempdir()}:
        for base in Path(folder).glob("llmgw-pg-*"):
            try:
                owner = int((base / "owner.pid").read_text())
            except (OSError, ValueError):
                owner = None
            if owner is None:  # made by an older suite: removed once its server is gone and it is old
                if _postmaster_alive(base) or time.time() - base.stat().st_mtime < 3600:
                    continue
            elif pid_running(owner):
                continue
            if (base / "data" / "postmaster.pid").exists():
                PostgresServer(bin_dir, base, as_postgres).stop()
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        message = f"PostgreSQL server binaries not found in {PG_GLOB}"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI is set, so the PostgreSQL tests must run: apt-get install postgresql")
        pytest.skip(f"{message}: apt-get install postgresql to run the PostgreSQL tests")
    as_postgres = os.geteuid() == 0
    # In memory where there is a tmpfs: a throw-away server has no use for a
    # disk, and creating a database per test is several times faster there.
    # (A container's default 64 MB /dev/shm is too small: then the disk it is.)
    shm = "/dev/shm" if _free_bytes("/dev/shm") >= 1 << 30 else None
    _sweep_abandoned_servers(bin_dir, as_postgres)
    base = Path(tempfile.mkdtemp(prefix="llmgw-pg-", dir=shm))
    (base / "owner.pid").write_text(str(os.getpid()))
    if as_postgres:
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(base, ignore_errors=True)
            pytest.fail("running as root, and there is no 'postgres' user to run PostgreSQL as")
        os.chown(base, account.pw_uid, account.pw_gid)
    server = PostgresServer(bin_dir, base, as_postgres)
    try:
        server.start()
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"could not start PostgreSQL from {bin_dir}: {e}")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(autouse=True)
def _key_hash_secret_out_of_var_lib(monkeypatch, tmp_path) -> None:
    """In-process servers whose server.yaml keeps the default admin_token_file would make
    their key-hash secret in /var/lib/llmgw; a test's go to a folder of that test instead."""
    from llmgw.auth import key_hash

    real = key_hash.secret_path
    folder = tmp_path / "var-lib-llmgw"

    def redirected(config):
        path = real(config)
        if str(path).startswith("/var/lib/llmgw/"):
            folder.mkdir(mode=0o700, exist_ok=True)
            return folder / path.name
        return path

    monkeypatch.setattr(key_hash, "secret_path", redirected)
