"""`llmgw mirror serve`'s /metrics on its files listener: bytes sent, answers by status, fetches by result,
verify problems; clean under `promtool check metrics`."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import aiohttp

from llmgw.mirror.serve import ServeOptions, client_ssl_context, serve

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "obs"))
from scrape import promtool_problems, undeclared, value  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_job(s: aiohttp.ClientSession, api: str, job: dict) -> dict:
    for _ in range(200):
        async with s.get(f"{api}/api/v1/jobs/{job['id']}") as r:
            job = await r.json()
        if job["state"] != "running":
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {job['id']} still running")


async def test_the_mirror_counts_what_it_serves_fetches_and_verifies(mirror_dir, layout, registry, certs, h,
                                                                     no_hf_env):
    h.make_version(layout, "tiny", "2025-06-01", {"tiny.gguf": b"GGUF" + b"\0" * 1000})
    files, api_port = free_port(), free_port()
    options = ServeOptions(directory=str(mirror_dir), listen=f"127.0.0.1:{files}", api_listen=f"127.0.0.1:{api_port}",
                           tls_cert=certs["mirror"], tls_key=certs["mirror-key"], tls_ca=certs["ca"],
                           api_client="control-plane", registry=registry.base, allow_private=True)
    stop, seen = asyncio.Event(), []
    task = asyncio.create_task(serve(options, stop=stop, started=seen.extend))
    try:
        for _ in range(200):
            if seen:
                break
            await asyncio.sleep(0.02)
        base, api = f"http://127.0.0.1:{files}", f"https://127.0.0.1:{api_port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/tiny/2025-06-01/tiny.gguf") as r:
                assert r.status == 200 and len(await r.read()) == 1004
            async with http.get(f"{base}/tiny/2025-06-01/tiny.gguf", headers={"Range": "bytes=0-99"}) as r:
                # read the body: a client that leaves early would close the connection mid-send
                assert r.status == 206 and len(await r.read()) == 100
            async with http.get(f"{base}/tiny/2025-06-01/missing.gguf") as r:
                assert r.status == 404
        context = client_ssl_context(certs["ca"], certs["control-plane"], certs["control-plane-key"])
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as s:
            async with s.post(f"{api}/api/v1/models", json={"source": "acme/tiny-GGUF", "files": ["*Q8*"]}) as r:
                assert (await wait_job(s, api, await r.json()))["state"] == "done"
            async with s.post(f"{api}/api/v1/models", json={"source": "acme/no-such-repo", "files": ["*"]}) as r:
                assert (await wait_job(s, api, await r.json()))["state"] == "failed"
            (layout.version_dir("tiny", "2025-06-01") / "tiny.gguf").write_bytes(b"GGUF" + b"\1" * 1000)
            async with s.post(f"{api}/api/v1/verify", json={"model": "tiny"}) as r:
                await wait_job(s, api, await r.json())
        async with aiohttp.ClientSession() as http, http.get(f"{base}/metrics") as r:
            assert r.status == 200
            text = await r.text()
        assert value(text, "llmgw_mirror_bytes_served_total") == 1004 + 100
        assert value(text, "llmgw_mirror_file_requests_total", status="200") == 1
        assert value(text, "llmgw_mirror_file_requests_total", status="206") == 1
        assert value(text, "llmgw_mirror_file_requests_total", status="404") == 1
        assert value(text, "llmgw_mirror_fetches_total", result="ok") == 1
        assert value(text, "llmgw_mirror_fetches_total", result="failed") == 1
        assert value(text, "llmgw_mirror_verify_failures_total") == 1
        assert value(text, "llmgw_build_info", role="mirror") == 1
        assert "_created" not in text
        assert promtool_problems(text) == []
        assert undeclared(text, "mirror") == []
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def test_a_model_cannot_be_called_metrics():
    import pytest

    from llmgw.mirror.layout import LayoutError, check_model_name

    with pytest.raises(LayoutError, match="Prometheus metrics"):
        check_model_name("metrics")
