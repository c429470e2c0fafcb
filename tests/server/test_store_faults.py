"""A gateway whose store's disk fills up, or whose store file is made read-only: requests are still answered,
every one gets its usage row once the store takes writes again, and a shutdown meanwhile keeps the rows in the
usage journal for the next start."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import openai
import pytest
from aiohttp import web
from diskfaults import small_disk

from llmgw.accounting.journal import Journal
from llmgw.accounting.usage import JOURNAL_NAME
from llmgw.config import parse_server_config
from llmgw.router.gateway import GATEWAY
from llmgw.server import make_gateway_app
from llmgw.server.app import STORE
from llmgw.store import open_store

from .serving import serve, sim_engine

HELLO = [{"role": "user", "content": "Hello there."}]


@pytest.fixture
async def engine():
    async with sim_engine("m", ttft=0.001) as running:
        yield running


def config(engine, db: str):
    return parse_server_config({
        "store": {"dsn": db}, "auth": {"keys_required": False}, "accounting": {"flush_interval": "20ms"},
        "models": [{"name": "m", "endpoints": [{"url": engine.url + "/v1"}], "price": {"input": 1.0, "output": 2.0}}],
    })


async def ask(base: str, n: int) -> list[str]:
    async with openai.AsyncOpenAI(base_url=base, api_key="none", max_retries=0) as client:
        async def one() -> str:
            raw = await client.chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=2)
            return raw.headers["x-request-id"]

        return list(await asyncio.gather(*(one() for _ in range(n))))


async def rows_of(db: str, ids: list[str]) -> int:
    store = await open_store(db)
    try:
        return len(await _present(store, ids))
    finally:
        await store.close()


async def _present(store, ids: list[str]) -> list[str]:
    return [i for i in ids if await store.get_usage(i) is not None]


async def wait_rows(app: web.Application, ids: list[str], timeout: float = 10.0) -> int:
    store = app[STORE]
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = len(await _present(store, ids))
        if found == len(ids) or asyncio.get_running_loop().time() > deadline:
            return found
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_a_full_disk_answers_every_request_and_its_rows_land_when_freed(engine, tmp_path, caplog):
    with small_disk(str(tmp_path / "disk")) as disk:
        db = os.path.join(disk.path, "llmgw.db")
        app = make_gateway_app(config(engine, db))
        runner, base = await serve(app)
        try:
            disk.fill()
            ids = await ask(base, 200)  # every one answered (ask raises on an error)
            await asyncio.sleep(0.2)
            store_errors = [r for r in caplog.records if "refuses usage rows" in r.message]
            assert len(store_errors) == 1, "one error for the episode"
            exposition = app[GATEWAY].metrics.exposition().decode()
            errors = next(line for line in exposition.splitlines() if line.startswith("llmgw_store_write_errors_total"))
            assert float(errors.split()[-1]) >= 1
            disk.free()
            assert await wait_rows(app, ids) == 200
            # Full again, and stopped: the rows stay in the journal.
            disk.fill()
            more = await ask(base, 50)
        finally:
            await runner.cleanup()
        kept = Journal(os.path.join(disk.path, JOURNAL_NAME)).open()
        assert {e["request_id"] for e in kept} >= set(more) - set(await _in_store(db, more))
        disk.free()
        app = make_gateway_app(config(engine, db))  # the next start writes the journal to the store
        runner, base = await serve(app)
        await runner.cleanup()
        assert await rows_of(db, ids + more) == 250


async def _in_store(db: str, ids: list[str]) -> list[str]:
    store = await open_store(db)
    try:
        return await _present(store, ids)
    except Exception:  # the disk is full: reading may still work, or not
        return []
    finally:
        await store.close()


def _chattr(flag: str, *paths: str) -> bool:
    return subprocess.run(["chattr", flag, *paths], capture_output=True).returncode == 0


@pytest.mark.slow
async def test_a_store_made_immutable_answers_every_request_without_crashing(engine, tmp_path):
    """`chattr +i` on the store's folder and every file of it, while the server runs: once this was SIGBUS
    (WAL's index, -shm, was mapped). Now requests are answered, rows go to the usage journal, and land in the
    store once the attribute is removed."""
    folder = tmp_path / "state"
    folder.mkdir()
    db = str(folder / "llmgw.db")
    app = make_gateway_app(config(engine, db))
    runner, base = await serve(app)
    files = [str(folder), db, db + "-journal"]  # the usage journal beside them is what keeps the rows
    try:
        await ask(base, 5)
        if not _chattr("+i", *files):
            pytest.skip("chattr +i is not supported here (needs root and ext4/xfs/btrfs)")
        try:
            ids = await ask(base, 100)
            await asyncio.sleep(0.2)
            assert app[STORE].write_errors >= 1 and app[GATEWAY].accountant.usage.journaled > 0
            assert len(await ask(base, 20)) == 20  # still answering, the store still refusing
        finally:
            _chattr("-i", *files)
        assert await wait_rows(app, ids) == 100
        assert app[GATEWAY].accountant.usage.journaled == 0
    finally:
        _chattr("-i", *files)
        await runner.cleanup()


@pytest.mark.slow
async def test_an_llmgw_org_command_works_beside_a_serving_gateway(engine, tmp_path):
    """The CLI opens the same SQLite file while the server writes usage rows to it."""
    db = str(tmp_path / "llmgw.db")
    app = make_gateway_app(config(engine, db))
    runner, base = await serve(app)
    try:
        ids: list[str] = []
        cli_done = asyncio.Event()

        async def keep_asking() -> None:  # until the command is over, and once more after
            while not cli_done.is_set():
                ids.extend(await ask(base, 10))
            ids.extend(await ask(base, 10))

        serving = asyncio.ensure_future(keep_asking())
        cli = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "llmgw", "org", "create", "acme", "--store", db,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await cli.communicate()
        cli_done.set()
        await serving
        assert cli.returncode == 0, err.decode()
        assert len(ids) >= 30  # requests answered before, while and after the command ran
        assert [o.name for o in await app[STORE].list_orgs()] == ["acme"]
        assert await wait_rows(app, ids) == len(ids)
    finally:
        await runner.cleanup()
