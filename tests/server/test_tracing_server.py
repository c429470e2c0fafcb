"""`llmgw server` in its own process with tracing.endpoint: a request's spans reach the collector the test runs,
its log line names the trace, and what is left is sent when the server stops on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import textwrap

import aiohttp
import pytest
from router.otlp import OTLPReceiver

from llmgw.simengine import SimOptions, start

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
async def test_a_server_process_sends_its_spans_and_names_the_trace_in_its_log(tmp_path):
    collector = await OTLPReceiver().start()
    engine = await start(SimOptions(models=["m"], ttft=0.0, prefill_per_token=0.0, tpot=0.0, port=0),
                         shutdown_timeout=0.5)
    port = free_port()
    (tmp_path / "server.yaml").write_text(textwrap.dedent(f"""\
        listen: 127.0.0.1:{port}
        admin_listen: 127.0.0.1:{free_port()}
        admin_token_file: {tmp_path}/admin-token
        metrics_listen: ""
        store: {{dsn: {tmp_path}/llmgw.db}}
        auth: {{keys_required: false}}
        tracing: {{endpoint: "{collector.url}", service_name: llmgw-e2e}}
        models:
          - name: m
            endpoints: [{{url: "{engine.url}/v1"}}]
        """))
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "llmgw", "server", "--config", str(tmp_path / "server.yaml"),
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, stderr=asyncio.subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:
            for _ in range(600):
                try:
                    async with http.get(base + "/ready") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.05)
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
            async with http.post(base + "/v1/chat/completions", json=body,
                                 headers={"traceparent": f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01"}) as resp:
                assert resp.status == 200
                request_id = resp.headers["x-llmgw-request-id"]
        server.send_signal(signal.SIGTERM)  # stopping sends what the batch still holds
        log = (await asyncio.wait_for(server.stderr.read(), 60)).decode()
        assert await asyncio.wait_for(server.wait(), 30) == 0, log[-2000:]
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
        await engine.close()
        await collector.stop()
    spans = collector.trace(CLIENT_TRACE)
    assert {"POST /v1/chat/completions", "auth", "limits", "admission", "engine", "accounting"} <= {
        s.name for s in spans}
    assert {s.service for s in spans} == {"llmgw-e2e"}
    assert {s.attributes["llmgw.request_id"] for s in spans} == {request_id}
    [line] = [line for line in log.splitlines() if "msg=request " in line]
    assert f"request_id={request_id}" in line and f"trace_id={CLIENT_TRACE}" in line
