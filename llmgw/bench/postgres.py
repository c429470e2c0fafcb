"""A throw-away PostgreSQL for a benchmark: Debian's binaries, a fresh cluster in the benchmark's temporary
directory, on a free loopback port, nothing kept (fsync off), stopped with the benchmark.

For `llmgw bench gateway --gateways N`, whose control planes share one store as they do in production, when
no `--store` DSN is given.
"""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import shutil
import time
from pathlib import Path

from llmgw.bench.procs import Child, StartFailed, _spawn, free_port

#: Where Debian's `postgresql` package puts each version's server programs.
PG_GLOB = "/usr/lib/postgresql/*/bin"


def find_bin() -> Path | None:
    """The newest Debian PostgreSQL bin directory that has initdb and postgres; None when not installed."""
    found = [Path(p) for p in glob.glob(PG_GLOB) if (Path(p) / "initdb").exists() and (Path(p) / "postgres").exists()]
    return max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0) if found else None


async def start_postgres(workdir: Path) -> tuple[Child, str]:
    """initdb and postgres in ``workdir/postgres``; the running server and its DSN. As root, they run as the
    `postgres` user (PostgreSQL refuses to run as root)."""
    bin_dir = find_bin()
    if bin_dir is None:
        raise StartFailed("--gateways: the gateways share a PostgreSQL store; give one with --store DSN, or "
                          "install Debian's postgresql (apt-get install postgresql) for a throw-away one")
    base = workdir / "postgres"
    base.mkdir(parents=True, exist_ok=True)
    prefix: list[str] = []
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            raise StartFailed("running as root, and there is no 'postgres' user to run PostgreSQL as") from None
        runuser = shutil.which("runuser")
        if runuser is None:
            raise StartFailed("running as root, and runuser (util-linux) is missing to run PostgreSQL as postgres")
        os.chmod(workdir, 0o755)
        os.chown(base, account.pw_uid, account.pw_gid)
        prefix = [runuser, "-u", "postgres", "--"]
    proc = await asyncio.create_subprocess_exec(
        *prefix, str(bin_dir / "initdb"), "-D", str(base / "data"), "-U", "postgres", "-A", "trust", "-E", "UTF8",
        "--no-sync", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    output, _ = await proc.communicate()
    if proc.returncode != 0:
        raise StartFailed(f"initdb failed:\n{output.decode(errors='replace')[-2000:]}")
    port = free_port()
    argv = [*prefix, str(bin_dir / "postgres"), "-D", str(base / "data"), "-p", str(port), "-k", str(base),
            "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
            "-c", "full_page_writes=off", "-c", "max_connections=400"]
    dsn = f"postgres://postgres@127.0.0.1:{port}/postgres"
    child = await _spawn("postgres", argv, workdir, dsn)
    await _wait_accepting(child, dsn)
    return child, dsn


async def _wait_accepting(child: Child, dsn: str, timeout: float = 60.0) -> None:
    import asyncpg

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.proc.returncode is not None:
            raise StartFailed(f"postgres exited with status {child.proc.returncode}:\n{child.log_tail()}")
        try:
            connection = await asyncpg.connect(dsn, timeout=2)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            await asyncio.sleep(0.1)
            continue
        await connection.close()
        return
    await child.stop()
    raise StartFailed(f"postgres did not accept connections within {timeout:.0f} s:\n{child.log_tail()}")
