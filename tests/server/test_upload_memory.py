"""Uploads never sit whole in memory: 8 parallel uploads of 100 MiB to a real `llmgw server` process."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from .memory_server import kib, server_process, upload, wait_healthy, write_requests


@pytest.mark.slow
def test_eight_parallel_100_mib_uploads_grow_the_server_by_less_than_100_mib(tmp_path):
    payload = write_requests(tmp_path / "requests.jsonl", 100)
    with server_process(tmp_path) as (port, server):
        async def run() -> tuple[int, int, list[dict]]:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
                await wait_healthy(http, port)
                small = aiohttp.FormData()
                small.add_field("purpose", "batch")
                small.add_field("file", b'{"warm": "up"}\n', filename="warm.jsonl")
                async with http.post(f"http://127.0.0.1:{port}/v1/files", data=small) as resp:
                    assert resp.status == 200, await resp.text()
                before = kib(server.pid, "VmRSS")
                files = await asyncio.gather(*(upload(http, port, payload, f"part-{i}.jsonl") for i in range(8)))
                return before, kib(server.pid, "VmHWM"), files

        before, peak, files = asyncio.run(run())
        assert [f["bytes"] for f in files] == [payload.stat().st_size] * 8
        growth_mib = (peak - before) / 1024
        print(f"server RSS before {before / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB, growth {growth_mib:.0f} MiB")
        assert growth_mib < 100, f"the server grew by {growth_mib:.0f} MiB for 8 parallel uploads of 100 MiB"
