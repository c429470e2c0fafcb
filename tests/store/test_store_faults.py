"""SQLite store faults: no file of the store is memory-mapped, so a file or folder made immutable, or a full
disk, fails a call (WritesRefused, reads go on) instead of killing the process with SIGBUS."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from llmgw.store import StoreUnavailable, UsageRow, WritesRefused, open_store


def _mapped(path: str) -> list[str]:
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if path in line})


def _chattr(flag: str, *paths: str) -> bool:
    return subprocess.run(["chattr", flag, *paths], capture_output=True).returncode == 0


def _row(rid: str) -> list[UsageRow]:
    return [UsageRow(request_id=rid, at=dt.datetime.now(dt.UTC))]


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc/self/maps")
async def test_no_file_of_the_store_is_memory_mapped(tmp_path):
    db = str(tmp_path / "s.db")
    store = await open_store(db)
    try:
        await store.insert_usage_rows(_row("r1"))
        assert await store.get_usage("r1") is not None
        assert _mapped(db) == []  # neither the database nor a WAL index (-shm): there is none
        assert not os.path.exists(db + "-shm") and not os.path.exists(db + "-wal")
        assert os.path.exists(db + "-journal")  # the rollback journal, kept (empty) between transactions
    finally:
        await store.close()


# What the SIGBUS was: a store in WAL mode maps its index, -shm, and SQLite writes a read mark into it at the
# start of every transaction, a read's too. Once the file is immutable, the kernel refuses that write to the
# mapped page (ext4's page_mkwrite), and the process gets SIGBUS: no exception, no log line.
_WAL_PROCESS = """
import sqlite3, subprocess, sys
db = sys.argv[1]
c = sqlite3.connect(db, isolation_level=None)
c.execute("PRAGMA mmap_size = 0"); c.execute("PRAGMA journal_mode = WAL")
c.execute("CREATE TABLE t (x)"); c.execute("INSERT INTO t VALUES (1)")
assert subprocess.run(["chattr", "+i", db + "-shm"]).returncode == 0
print("immutable", flush=True)
c.execute("SELECT count(*) FROM t").fetchall()
print("survived", flush=True)
"""


def test_why_wal_is_not_used_its_index_made_immutable_kills_a_reader_with_sigbus(tmp_path):
    db = str(tmp_path / "wal.db")
    if not _chattr("+i", str(tmp_path)) or not _chattr("-i", str(tmp_path)):
        pytest.skip("chattr +i is not supported here (needs root and ext4/xfs/btrfs)")
    try:
        done = subprocess.run([sys.executable, "-c", _WAL_PROCESS, db], capture_output=True, text=True, timeout=30)
    finally:
        _chattr("-i", db + "-shm")
    assert done.stdout == "immutable\n"
    assert done.returncode == -7  # SIGBUS


@pytest.mark.parametrize("what", ["files", "folder and files", "journal"])
async def test_a_store_made_immutable_refuses_writes_reads_on_and_resumes(tmp_path, what):
    db = str(tmp_path / "s.db")
    store = await open_store(db)
    targets = {"files": [db, db + "-journal"], "folder and files": [str(tmp_path), db, db + "-journal"],
               "journal": [db + "-journal"]}[what]
    try:
        await store.insert_usage_rows(_row("r1"))
        if not _chattr("+i", *targets):
            pytest.skip("chattr +i is not supported here (needs root and ext4/xfs/btrfs)")
        try:
            for attempt in ("r2", "r3"):
                with pytest.raises(WritesRefused, match="cannot be written"):
                    await store.insert_usage_rows(_row(attempt))
            assert store.write_errors == 2
            assert await store.get_usage("r1") is not None
        finally:
            _chattr("-i", *targets)
        await store.insert_usage_rows(_row("r2"))
        assert await store.get_usage("r2") is not None
    finally:
        _chattr("-i", *targets)
        await store.close()


async def test_a_folder_made_immutable_is_no_fault(tmp_path):
    """The journal stays in place between transactions, so nothing has to be created in the folder."""
    db = str(tmp_path / "s.db")
    store = await open_store(db)
    try:
        if not _chattr("+i", str(tmp_path)):
            pytest.skip("chattr +i is not supported here (needs root and ext4/xfs/btrfs)")
        try:
            await store.insert_usage_rows(_row("r1"))
            assert await store.get_usage("r1") is not None and store.write_errors == 0
        finally:
            _chattr("-i", str(tmp_path))
    finally:
        _chattr("-i", str(tmp_path))
        await store.close()


async def test_a_store_an_earlier_llmgw_left_in_wal_mode_is_taken_out_of_it(tmp_path):
    db = str(tmp_path / "s.db")
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    conn.execute("CREATE TABLE kept (x)")
    conn.execute("INSERT INTO kept VALUES (42)")
    conn.commit()
    conn.close()
    store = await open_store(db)
    try:
        await store.insert_usage_rows(_row("r1"))
        assert not os.path.exists(db + "-wal") and not os.path.exists(db + "-shm")
    finally:
        await store.close()
    conn = sqlite3.connect(db)
    try:
        # A rollback-journal file: a new connection's own mode is SQLite's default (WAL is kept in the file).
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("SELECT x FROM kept").fetchall() == [(42,)]
    finally:
        conn.close()


@pytest.mark.slow  # a second's wait
async def test_a_change_waits_for_a_reader_of_another_process_then_lands(tmp_path):
    """As while `llmgw server backup` copies the store: readers hold the file, a change waits for them."""
    db = str(tmp_path / "s.db")
    store = await open_store(db)
    hold = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN'); c.execute('SELECT count(*) FROM usage').fetchall(); print('reading', flush=True); "
            "time.sleep(1); c.execute('COMMIT')")
    reader = await asyncio.create_subprocess_exec(sys.executable, "-c", hold, db, stdout=asyncio.subprocess.PIPE)
    try:
        assert await reader.stdout.readline() == b"reading\n"
        started = time.monotonic()
        await store.insert_usage_rows(_row("r1"))
        assert time.monotonic() - started > 0.5  # it waited for the reader to finish
        assert await store.get_usage("r1") is not None and store.write_errors == 0
    finally:
        await reader.wait()
        await store.close()


@pytest.mark.slow  # the 5 s busy timeout
async def test_a_reader_that_holds_on_past_the_busy_timeout_fails_the_change_then_it_lands(tmp_path):
    """A reader of another process longer than 5 s: the change fails (as on a full disk, the caller keeps it:
    usage rows go to the journal, an admin change answers 503) and works once the reader is done."""
    db = str(tmp_path / "s.db")
    store = await open_store(db)
    hold = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN'); c.execute('SELECT count(*) FROM usage').fetchall(); print('reading', flush=True); "
            "time.sleep(6.5); c.execute('COMMIT')")
    reader = await asyncio.create_subprocess_exec(sys.executable, "-c", hold, db, stdout=asyncio.subprocess.PIPE)
    try:
        assert await reader.stdout.readline() == b"reading\n"
        with pytest.raises(StoreUnavailable, match="locked by another process for 5000 ms"):
            await store.insert_usage_rows(_row("r1"))
        assert store.write_errors == 1
        await reader.wait()
        await store.insert_usage_rows(_row("r1"))
        assert await store.get_usage("r1") is not None
    finally:
        if reader.returncode is None:
            reader.kill()
            await reader.wait()
        await store.close()


async def test_the_database_alone_made_immutable_fails_reads_too_until_it_is_writable(tmp_path):
    db = str(tmp_path / "s.db")
    store = await open_store(db)
    try:
        await store.insert_usage_rows(_row("r1"))
        if not _chattr("+i", db):
            pytest.skip("chattr +i is not supported here (needs root and ext4/xfs/btrfs)")
        try:
            with pytest.raises(WritesRefused):
                await store.insert_usage_rows(_row("r2"))
            with pytest.raises(WritesRefused, match="cannot be written"):  # its journal waits to be rolled back
                await store.get_usage("r1")
        finally:
            _chattr("-i", db)
        assert await store.get_usage("r1") is not None
        await store.insert_usage_rows(_row("r2"))
        assert await store.get_usage("r2") is not None
    finally:
        _chattr("-i", db)
        await store.close()


async def test_a_read_cancelled_half_way_leaves_no_transaction_open(tmp_path):
    """A shutdown cancels reads in flight; a BEGIN already handed to SQLite's thread still runs after the
    await gave up. The next read must not find a transaction left open ("cannot start a transaction within a
    transaction"), and a writer in another process must not be kept waiting by it."""
    store = await open_store(f"sqlite:///{tmp_path}/s.db")
    try:
        async def slow(tx):
            await asyncio.sleep(0.01)
            return await tx.fetchval("SELECT 1")

        for delay in (0, 0, 0.0005, 0.001, 0.002) * 8:
            task = asyncio.create_task(store._read(slow))
            await asyncio.sleep(delay)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await store.get_setting("anything")  # the next read begins cleanly
        assert not store._reader.in_transaction
        other = sqlite3.connect(tmp_path / "s.db", timeout=1)
        other.execute("CREATE TABLE t (x)")  # another process's writer is not held back
        other.commit()
        other.close()
    finally:
        await store.close()
