"""SQLite store faults: no memory-mapped database file, and a read-only file is WritesRefused (reads go on)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess

import pytest

from llmgw.store import UsageRow, WritesRefused, open_store


def _mapped(path: str) -> list[str]:
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if path in line})


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc/self/maps")
async def test_the_database_file_is_not_memory_mapped(tmp_path):
    db = str(tmp_path / "s.db")
    store = await open_store(db)
    try:
        await store.insert_usage_rows([UsageRow(request_id="r1", at=dt.datetime.now(dt.UTC))])
        assert await store.get_usage("r1") is not None
        assert _mapped(db) == [db + "-shm"]  # only WAL's index, which SQLite shares between processes
    finally:
        await store.close()


async def test_a_read_only_file_refuses_writes_and_still_reads(tmp_path):
    db = str(tmp_path / "s.db")
    store = await open_store(db)
    files = [db, db + "-wal"]
    try:
        await store.insert_usage_rows([UsageRow(request_id="r1", at=dt.datetime.now(dt.UTC))])
        if subprocess.run(["chattr", "+i", *files], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not supported here (needs root and ext4/xfs/btrfs)")
        try:
            with pytest.raises(WritesRefused, match="cannot be written"):
                await store.insert_usage_rows([UsageRow(request_id="r2", at=dt.datetime.now(dt.UTC))])
            assert store.write_errors == 1
            assert await store.get_usage("r1") is not None
        finally:
            subprocess.run(["chattr", "-i", *files], capture_output=True)
        await store.insert_usage_rows([UsageRow(request_id="r2", at=dt.datetime.now(dt.UTC))])
        assert await store.get_usage("r2") is not None
    finally:
        subprocess.run(["chattr", "-i", *files], capture_output=True)
        await store.close()
