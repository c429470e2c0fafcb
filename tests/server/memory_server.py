"""A real `llmgw server` process for the memory tests: started on a free port, its RSS read from /proc."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import aiohttp

MIB = 1024 * 1024


def kib(pid: int, field: str) -> int:
    """A /proc/PID/status figure (VmRSS, VmHWM) in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def write_requests(path: Path, mib: int) -> Path:
    """A batch input file of about `mib` MiB."""
    line = b'{"custom_id": "x", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'
    with open(path, "wb") as f:
        f.write(line * (mib * MIB // len(line)))
    return path


@contextlib.contextmanager
def server_process(tmp_path: Path, router_yaml: str = "") -> Iterator[tuple[int, subprocess.Popen]]:
    """`llmgw server` without keys on a SQLite store in tmp_path; yields its port and process."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "server.yaml").write_text(textwrap.dedent(f"""\
        listen: 127.0.0.1:{port}
        metrics_listen: ""
        store: {{dsn: {tmp_path / 'llmgw.db'}}}
        auth: {{keys_required: false}}
        """) + (f"router: {router_yaml}\n" if router_yaml else ""))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp_path)}
    server = subprocess.Popen([sys.executable, "-m", "llmgw", "server", "--config", str(tmp_path / "server.yaml")],
                              env=env, stderr=subprocess.PIPE)
    try:
        yield port, server
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


async def wait_healthy(http: aiohttp.ClientSession, port: int) -> None:
    for _ in range(300):
        try:
            async with http.get(f"http://127.0.0.1:{port}/health") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.1)


async def upload(http: aiohttp.ClientSession, port: int, payload: Path, name: str) -> dict:
    """POST /v1/files of `payload`, streamed from disk."""
    with open(payload, "rb") as f:
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", f, filename=name, content_type="application/jsonl")
        async with http.post(f"http://127.0.0.1:{port}/v1/files", data=form) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.json()
