"""The mirror's API over TLS: only the named client certificate, and what it can do."""

from __future__ import annotations

import asyncio
import ssl

import aiohttp
import pytest

from llmgw.mirror.fetch import MirrorFetcher
from llmgw.mirror.layout import Origin
from llmgw.mirror.registry import Registry
from llmgw.mirror.safefetch import SafeFetcher
from llmgw.mirror.serve import (
    ApiState,
    OptionsError,
    ServeOptions,
    api_mode,
    build_api_app,
    client_ssl_context,
    serve,
    server_ssl_context,
)


@pytest.fixture
async def api(layout, registry, certs, tmp_path, h, no_hf_env):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("chat: tiny/2025-06-01\n")
    h.make_version(layout, "tiny", "2025-06-01", {"tiny.gguf": b"GGUF" + b"\0" * 100})
    h.make_version(layout, "old", "2025-01-01", {"old.gguf": b"GGUF"})
    async with SafeFetcher(allow_private=True) as safe:
        reg = Registry(safe, registry.base)
        state = ApiState(layout=layout, fetcher=MirrorFetcher(layout, safe, reg), registry=reg,
                         catalog_path=str(catalog), api_client="control-plane")
        context = server_ssl_context(certs["mirror"], certs["mirror-key"], certs["ca"])
        runner, base = await h.start_app(build_api_app(state), ssl_context=context)
        yield base
        await runner.cleanup()


def session_as(certs, who: str | None) -> aiohttp.ClientSession:
    context = client_ssl_context(certs["ca"], certs[who] if who else "", certs[f"{who}-key"] if who else "")
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context))


async def test_the_named_client_is_answered(api, certs):
    async with session_as(certs, "control-plane") as s, s.get(f"{api}/api/v1/models") as r:
        assert r.status == 200
        rows = (await r.json())["versions"]
    assert {(v["model"], v["version"], tuple(v["used_by"])) for v in rows} == {
        ("tiny", "2025-06-01", ("chat",)), ("old", "2025-01-01", ())}


async def test_another_certificate_of_the_same_authority_is_refused(api, certs):
    async with session_as(certs, "node-1") as s, s.get(f"{api}/api/v1/models") as r:
        assert r.status == 403
        assert "node-1" in (await r.json())["error"]


async def test_the_right_name_from_another_authority_is_refused(api, certs):
    with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
        async with session_as(certs, "stranger") as s, s.get(f"{api}/api/v1/models") as r:
            await r.read()


async def test_no_client_certificate_is_refused(api, certs):
    with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
        async with session_as(certs, None) as s, s.get(f"{api}/api/v1/models") as r:
            await r.read()


async def test_add_runs_as_a_job(api, certs, layout, today):
    async with session_as(certs, "control-plane") as s:
        async with s.post(f"{api}/api/v1/models", json={"source": "acme/tiny-GGUF", "files": ["*Q8*"]}) as r:
            assert r.status == 202
            job = await r.json()
        for _ in range(200):
            async with s.get(f"{api}/api/v1/jobs/{job['id']}") as r:
                job = await r.json()
            if job["state"] != "running":
                break
            await asyncio.sleep(0.05)
        assert job["state"] == "done", job
        assert job["result"]["model"] == "tiny-gguf" and job["result"]["version"] == today
        async with s.get(f"{api}/api/v1/downloads") as r:
            assert (await r.json())["versions"] == []
        async with s.post(f"{api}/api/v1/models", json={"files": []}) as r:
            assert r.status == 400


async def test_remove_refuses_a_used_version_without_force(api, certs, layout):
    async with session_as(certs, "control-plane") as s:
        async with s.delete(f"{api}/api/v1/models/tiny/2025-06-01") as r:
            assert r.status == 409 and (await r.json())["used_by"] == ["chat"]
        assert layout.versions("tiny") == ["2025-06-01"]
        async with s.delete(f"{api}/api/v1/models/tiny/2025-06-01?force=true") as r:
            assert r.status == 200 and (await r.json())["removed"] == ["tiny/2025-06-01"]
        assert layout.versions("tiny") == []
        async with s.delete(f"{api}/api/v1/models/old") as r:
            assert r.status == 200
        async with s.get(f"{api}/api/v1/unused") as r:
            assert (await r.json())["versions"] == []


async def test_verify_runs_as_a_job_and_finds_damage(api, certs, layout):
    (layout.version_dir("tiny", "2025-06-01") / "tiny.gguf").write_bytes(b"GGUF" + b"\1" * 100)
    async with session_as(certs, "control-plane") as s:
        async with s.post(f"{api}/api/v1/verify", json={"model": "tiny"}) as r:
            job = await r.json()
        for _ in range(100):
            async with s.get(f"{api}/api/v1/jobs/{job['id']}") as r:
                job = await r.json()
            if job["state"] != "running":
                break
            await asyncio.sleep(0.05)
    [result] = job["result"]
    assert result["problems"] and "sha256" in result["problems"][0]


async def test_update_checks_through_the_api(api, certs, layout, registry):
    origin = Origin(kind="registry", registry=registry.base, repo="acme/tiny-GGUF", revision="0" * 40,
                    requested_revision="main", patterns=["tiny-Q8_0.gguf"])
    sidecar = layout.read_sidecar("tiny", "2025-06-01")
    sidecar.origin = origin
    layout.write_sidecar(sidecar)
    async with session_as(certs, "control-plane") as s, s.get(f"{api}/api/v1/updates") as r:
        [row] = (await r.json())["models"]
    assert row["model"] == "tiny" and row["status"] == "newer files" and row["update_available"]


def test_unsafe_option_mixes_are_refused(mirror_dir):
    base = dict(directory=str(mirror_dir), base="http://m:8081")
    with pytest.raises(OptionsError, match="--api-client"):
        api_mode(ServeOptions(**base, tls_cert="c", tls_key="k", tls_ca="ca"))
    with pytest.raises(OptionsError, match="go together"):
        api_mode(ServeOptions(**base, tls_cert="c"))
    with pytest.raises(OptionsError, match="anyone"):
        api_mode(ServeOptions(**base, tls_cert="c", tls_key="k", api_listen="0.0.0.0:8082"))
    assert api_mode(ServeOptions(**base)) == "off"  # no certificates: no API on the network
    assert api_mode(ServeOptions(**base, api_listen="127.0.0.1:8082")) == "plain"
    assert api_mode(ServeOptions(**base, tls_cert="c", tls_key="k", tls_ca="ca", api_client="cp")) == "mtls"


async def test_serve_runs_both_and_stops(mirror_dir, layout, certs, h):
    h.make_version(layout, "m", "2025-01-01", {"m.gguf": b"GGUF"})
    stop = asyncio.Event()
    seen: list[str] = []
    options = ServeOptions(directory=str(mirror_dir), base="http://m", listen="127.0.0.1:0",
                           api_listen="127.0.0.1:0", tls_cert=certs["mirror"], tls_key=certs["mirror-key"],
                           tls_ca=certs["ca"], api_client="control-plane")
    task = asyncio.create_task(serve(options, stop=stop, started=seen.extend))
    for _ in range(100):
        if seen:
            break
        await asyncio.sleep(0.02)
    assert seen[0].startswith("files on") and "(mtls)" in seen[1]
    stop.set()
    await asyncio.wait_for(task, 5)
