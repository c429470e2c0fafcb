"""`llmgw server` killed under load: with SIGTERM every answered request has its row; with kill -9 only rows of
the last flush interval may be missing, and a restarted server answers again within 5 s."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import aiohttp
import pytest

from llmgw.store import open_store

from .test_server import HELLO, free_port

pytestmark = pytest.mark.slow
FLUSH = 0.2  # accounting.flush_interval below, in seconds


def _write_config(tmp_path, port: int, sim_port: int) -> str:
    path = tmp_path / "server.yaml"
    path.write_text(textwrap.dedent(f"""\
        listen: 127.0.0.1:{port}
        metrics_listen: ""
        store: {{dsn: {tmp_path / "llmgw.db"}}}
        auth: {{keys_required: false}}
        accounting: {{flush_interval: {int(FLUSH * 1000)}ms}}
        models:
          - name: m
            endpoints: [{{url: "http://127.0.0.1:{sim_port}/v1"}}]
        """))
    return str(path)


async def _ready(base: str, within: float) -> float:
    started = time.monotonic()
    async with aiohttp.ClientSession() as http:
        while time.monotonic() - started < within:
            try:
                async with http.post(base + "/v1/chat/completions",
                                     json={"model": "m", "messages": HELLO, "max_tokens": 1}) as resp:
                    if resp.status == 200:
                        return time.monotonic() - started
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError(f"the gateway did not answer within {within} s")


async def _load(base: str, server: subprocess.Popen, sig: int, run_for: float) -> tuple[dict[str, float], float]:
    """Requests from 16 clients until the signal; the request ids answered, with when each answer ended."""
    done: dict[str, float] = {}
    stop = asyncio.Event()

    async def client(http: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            try:
                async with http.post(base + "/v1/chat/completions",
                                     json={"model": "m", "messages": HELLO, "max_tokens": 2}) as resp:
                    await resp.read()
                    if resp.status == 200:
                        done[resp.headers["x-request-id"]] = time.monotonic()
            except aiohttp.ClientError:
                await asyncio.sleep(0.01)

    async with aiohttp.ClientSession() as http:
        tasks = [asyncio.create_task(client(http)) for _ in range(16)]
        await asyncio.sleep(run_for)
        server.send_signal(sig)
        sent = time.monotonic()
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(*tasks)
    return done, sent


async def _stored(db: str, ids) -> set[str]:
    store = await open_store(db)
    try:
        return {i for i in ids if await store.get_usage(i) is not None}
    finally:
        await store.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_killed_under_load_the_rows_are_kept_and_a_restart_answers_within_5_s(tmp_path, sig):
    sim_port, port = free_port(), free_port()
    config = _write_config(tmp_path, port, sim_port)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    sim = subprocess.Popen([sys.executable, "-m", "llmgw", "sim-engine", "--port", str(sim_port), "--model", "m",
                            "--tpot", "0.001"], stdout=subprocess.PIPE, env=env)
    assert b"listening on" in sim.stdout.readline()
    command = [sys.executable, "-m", "llmgw", "server", "--config", config]
    server = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    again = None
    try:
        asyncio.run(_ready(base, 60))
        done, sent = asyncio.run(_load(base, server, sig, 1.5))
        server.wait(30)
        assert len(done) > 50
        stored = asyncio.run(_stored(str(tmp_path / "llmgw.db"), done))
        missing = [i for i in done if i not in stored]
        if sig == signal.SIGTERM:
            assert not missing, f"{len(missing)} of {len(done)} answered requests have no row after SIGTERM"
        else:
            # Only rows still in memory are lost: answered within the last flush interval (and a batch's write).
            late = [i for i in missing if done[i] < sent - FLUSH - 0.3]
            assert not late, f"{len(late)} rows of requests answered well before kill -9 are missing"
            print(f"kill -9: {len(missing)} of {len(done)} rows lost (all answered in the last {FLUSH} s)")
        again = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
        took = asyncio.run(_ready(base, 30))
        print(f"answered again {took:.2f} s after the restart began")
        assert took < 5
    finally:
        for p in (again, server, sim):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
