"""A control plane on PostgreSQL whose data directory's disk fills up (issue #17): a real PostgreSQL with its
data directory on a small disk, and `llmgw server` (run_server) in this process on it. While the disk is full
every request is answered, its usage row goes to the usage journal, an admin change answers 503 with the
reason, and the control plane keeps leading; once space is freed the rows land in the store and the refusal
is in the audit log."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import socket
import tempfile
from pathlib import Path

import aiohttp
import openai
import pytest
from tests.conftest import PostgresServer, find_postgres_bin
from diskfaults import small_disk

from llmgw.config import load_server_config
from llmgw.server.run import run_server
from llmgw.simengine import SimOptions, start
from llmgw.store import open_store

pytestmark = pytest.mark.slow  # a PostgreSQL of its own, on a disk that fills up

HELLO = [{"role": "user", "content": "Hello there."}]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def pg_on_small_disk():
    """(its DSN, the disk): a PostgreSQL whose data directory is on a 160 MB disk of its own."""
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not found: apt-get install postgresql")
    # Outside tmp_path, whose folders only root may enter: PostgreSQL runs as its own user.
    mount = tempfile.mkdtemp(prefix="llmgw-pgdisk-")
    os.chmod(mount, 0o755)
    with small_disk(mount, size="160m") as disk:
        as_postgres = os.geteuid() == 0
        if as_postgres:
            account = pwd.getpwnam("postgres")
            os.chown(disk.path, account.pw_uid, account.pw_gid)
        server = PostgresServer(bin_dir, Path(disk.path), as_postgres)
        server.start()
        try:
            server.psql('CREATE DATABASE "llmgw"')
            yield server.dsn("llmgw"), disk
        finally:
            disk.free()
            server.stop()
    os.rmdir(mount)


async def _wait(check, timeout: float, what: str):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = await check()
        if got or asyncio.get_running_loop().time() > deadline:
            assert got, f"{what}: not within {timeout:.0f} s"
            return got
        await asyncio.sleep(0.1)


async def test_a_full_postgres_disk_keeps_serving_and_leading_and_rows_land_when_freed(
        pg_on_small_disk, tmp_path, monkeypatch):
    dsn, disk = pg_on_small_disk
    state = tmp_path / "state"  # where a control plane on PostgreSQL keeps its usage and audit journals
    state.mkdir()
    monkeypatch.setattr("llmgw.store.state_dir.POSTGRES_STATE_DIR", str(state))
    engine = await start(SimOptions(models=["m"], ttft=0.001, prefill_per_token=0.0, tpot=0.0, port=0),
                         shutdown_timeout=0.5)
    path = tmp_path / "server.yaml"
    path.write_text(json.dumps({  # JSON is YAML
        "listen": f"127.0.0.1:{_port()}", "admin_listen": f"127.0.0.1:{_port()}",
        "admin_token_file": str(tmp_path / "admin-token"), "agent_listen": f"127.0.0.1:{_port()}",
        "agent_insecure": True, "store": {"dsn": dsn}, "auth": {"keys_required": False},
        "accounting": {"flush_interval": "50ms"}, "control": {"lease_ttl": "3s"},  # renewed every second
        "models": [{"name": "m", "endpoints": [{"url": engine.url + "/v1"}], "price": {"input": 1.0, "output": 2.0}}],
    }))
    config = load_server_config(str(path))
    stop = asyncio.Event()
    task = asyncio.create_task(run_server(config, stop=stop, drain_seconds=1, config_path=str(path)))
    http = aiohttp.ClientSession()
    base, admin = f"http://{config.listen}", f"http://{config.admin_listen}/api/v1"
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    try:
        async def leads() -> bool:
            assert not task.done(), task.result()
            try:
                async with http.get(base + "/leader") as resp:
                    return resp.status == 200
            except aiohttp.ClientConnectionError:
                return False

        await _wait(leads, 30, "the control plane leads")
        token = (tmp_path / "admin-token").read_text().strip()
        hdr = {"Authorization": f"Bearer {token}", "X-Llmgw-Actor": "ann@example.com"}

        async def ask(n: int) -> list[str]:
            async def one() -> str:
                raw = await client.chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=2)
                return raw.headers["x-request-id"]
            return [await one() for _ in range(n)]  # one at a time, as the leadership is watched between

        before = await ask(5)
        disk.fill()
        ids: list[str] = []
        full_since = asyncio.get_running_loop().time()
        # 400 requests or more, over two lease lives (an error here is a failed request)
        while len(ids) < 400 or asyncio.get_running_loop().time() - full_since < 6:
            ids += await ask(20)
            assert await leads(), "leadership was given up while the disk was full"
        async with http.post(admin + "/users", json={"email": "bob@example.com"}, headers=hdr) as resp:
            refusal = await resp.json()
            assert resp.status == 503, refusal
        assert "refuses writes" in refusal["error"] and "No space left on device" in refusal["error"], refusal
        assert os.path.getsize(state / "usage-journal.jsonl") > 0  # the rows wait there, fsync'd
        disk.free()

        async def landed() -> bool:
            store = await open_store(dsn)
            try:
                return all([await store.get_usage(i) is not None for i in before + ids])
            finally:
                await store.close()

        await _wait(landed, 30, "every usage row reached the store once space was freed")
        async with http.post(admin + "/users", json={"email": "bob@example.com"}, headers=hdr) as resp:
            assert resp.status == 201, await resp.text()
        async with http.get(admin + "/audit?actor=ann@example.com", headers=hdr) as resp:
            events = (await resp.json())["events"]
        assert [(e["action"], e["outcome"]) for e in events] == [("users.create", "ok"), ("users.create", "refused")]
        assert await leads()
    finally:
        await client.close()
        await http.close()
        stop.set()
        await asyncio.wait_for(task, 20)
        await engine.close()
