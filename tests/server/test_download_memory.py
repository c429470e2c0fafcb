"""Downloads never sit whole in memory: a 200 MiB file read back from a real `llmgw server` process."""

from __future__ import annotations

import asyncio
import hashlib
import threading

import aiohttp
import pytest

from .memory_server import kib, server_process, upload, wait_healthy, write_requests


@pytest.mark.slow
def test_a_200_mib_download_grows_the_server_by_far_less_than_the_file(tmp_path):
    payload = write_requests(tmp_path / "requests.jsonl", 200)
    want = hashlib.sha256(payload.read_bytes()).hexdigest()
    with server_process(tmp_path, "{batch: {max_file_bytes: 256MiB}}") as (port, server):
        async def run() -> tuple[int, int, str, int]:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
                await wait_healthy(http, port)
                file_id = (await upload(http, port, payload, "big.jsonl"))["id"]
                before = kib(server.pid, "VmRSS")
                # The upload's peak is behind us: the download's is sampled (VmHWM would still hold the upload's).
                seen = [before]
                done = threading.Event()

                def sample() -> None:
                    while not done.wait(0.005):
                        seen.append(kib(server.pid, "VmRSS"))

                sampler = threading.Thread(target=sample, daemon=True)
                sampler.start()
                digest, size = hashlib.sha256(), 0
                try:
                    async with http.get(f"http://127.0.0.1:{port}/v1/files/{file_id}/content") as resp:
                        assert resp.status == 200, await resp.text()
                        assert resp.content_length == payload.stat().st_size
                        async for piece in resp.content.iter_chunked(256 * 1024):
                            digest.update(piece)
                            size += len(piece)
                finally:
                    done.set()
                    sampler.join()
                return before, max(seen), digest.hexdigest(), size

        before, peak, got, size = asyncio.run(run())
        assert (got, size) == (want, payload.stat().st_size)
        growth_mib = (peak - before) / 1024
        print(f"server RSS before {before / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB, growth {growth_mib:.0f} MiB")
        assert growth_mib < 40, f"the server grew by {growth_mib:.0f} MiB to send a 200 MiB file"
