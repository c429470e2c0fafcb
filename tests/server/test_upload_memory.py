"""Uploads never sit whole in memory: 8 parallel uploads of 100 MiB to a real `llmgw server` process."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap

import aiohttp
import pytest

MIB = 1024 * 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@pytest.mark.slow
def test_eight_parallel_100_mib_uploads_grow_the_server_by_less_than_100_mib(tmp_path):
    port = _free_port()
    (tmp_path / "server.yaml").write_text(textwrap.dedent(f"""\
        listen: 127.0.0.1:{port}
        metrics_listen: ""
        store: {{dsn: {tmp_path / 'llmgw.db'}}}
        auth: {{keys_required: false}}
        """))
    payload = tmp_path / "requests.jsonl"
    with open(payload, "wb") as f:
        line = b'{"custom_id": "x", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'
        f.write(line * (100 * MIB // len(line)))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp_path)}
    server = subprocess.Popen([sys.executable, "-m", "llmgw", "server", "--config", str(tmp_path / "server.yaml")],
                              env=env, stderr=subprocess.PIPE)
    try:
        async def upload(http: aiohttp.ClientSession, name: str) -> dict:
            with open(payload, "rb") as f:
                form = aiohttp.FormData()
                form.add_field("purpose", "batch")
                form.add_field("file", f, filename=name, content_type="application/jsonl")
                async with http.post(f"http://127.0.0.1:{port}/v1/files", data=form) as resp:
                    assert resp.status == 200, await resp.text()
                    return await resp.json()

        async def run() -> tuple[int, int, list[dict]]:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
                for _ in range(300):
                    try:
                        async with http.get(f"http://127.0.0.1:{port}/health") as resp:
                            if resp.status == 200:
                                break
                    except aiohttp.ClientConnectionError:
                        pass
                    await asyncio.sleep(0.1)
                small = aiohttp.FormData()
                small.add_field("purpose", "batch")
                small.add_field("file", b'{"warm": "up"}\n', filename="warm.jsonl")
                async with http.post(f"http://127.0.0.1:{port}/v1/files", data=small) as resp:
                    assert resp.status == 200, await resp.text()
                before = _kib(server.pid, "VmRSS")
                files = await asyncio.gather(*(upload(http, f"part-{i}.jsonl") for i in range(8)))
                return before, _kib(server.pid, "VmHWM"), files

        before, peak, files = asyncio.run(run())
        assert [f["bytes"] for f in files] == [payload.stat().st_size] * 8
        growth_mib = (peak - before) / 1024
        print(f"server RSS before {before / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB, growth {growth_mib:.0f} MiB")
        assert growth_mib < 100, f"the server grew by {growth_mib:.0f} MiB for 8 parallel uploads of 100 MiB"
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
