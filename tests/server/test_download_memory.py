"""Downloads never sit whole in memory: a 200 MiB file read back from a real `llmgw server` process."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import textwrap
import threading

import aiohttp
import pytest

from .test_upload_memory import MIB, _free_port, _kib


@pytest.mark.slow
def test_a_200_mib_download_grows_the_server_by_far_less_than_the_file(tmp_path):
    port = _free_port()
    (tmp_path / "server.yaml").write_text(textwrap.dedent(f"""\
        listen: 127.0.0.1:{port}
        metrics_listen: ""
        store: {{dsn: {tmp_path / 'llmgw.db'}}}
        auth: {{keys_required: false}}
        router: {{batch: {{max_file_bytes: 256MiB}}}}
        """))
    payload = tmp_path / "requests.jsonl"
    with open(payload, "wb") as f:
        line = b'{"custom_id": "x", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'
        f.write(line * (200 * MIB // len(line)))
    with open(payload, "rb") as f:
        want = hashlib.file_digest(f, "sha256").hexdigest()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp_path)}
    server = subprocess.Popen([sys.executable, "-m", "llmgw", "server", "--config", str(tmp_path / "server.yaml")],
                              env=env, stderr=subprocess.PIPE)
    try:
        async def run() -> tuple[int, int, str, int]:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
                for _ in range(300):
                    try:
                        async with http.get(f"http://127.0.0.1:{port}/health") as resp:
                            if resp.status == 200:
                                break
                    except aiohttp.ClientConnectionError:
                        pass
                    await asyncio.sleep(0.1)
                with open(payload, "rb") as f:
                    form = aiohttp.FormData()
                    form.add_field("purpose", "batch")
                    form.add_field("file", f, filename="big.jsonl", content_type="application/jsonl")
                    async with http.post(f"http://127.0.0.1:{port}/v1/files", data=form) as resp:
                        assert resp.status == 200, await resp.text()
                        file_id = (await resp.json())["id"]
                before = _kib(server.pid, "VmRSS")
                # The upload's peak is behind us: the download's is sampled (VmHWM would still hold the upload's).
                seen = [before]
                done = threading.Event()

                def sample() -> None:
                    while not done.wait(0.005):
                        seen.append(_kib(server.pid, "VmRSS"))

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
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
