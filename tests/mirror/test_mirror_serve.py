"""The file server: ranges, conditional requests, what is never served, the JSON listings."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest

from llmgw.mirror.serve import build_file_app

DATA = bytes(range(256)) * 40  # 10240 bytes


@pytest.fixture
async def files(layout, h):
    h.make_version(layout, "tiny", "2025-06-01", {"tiny.gguf": DATA, "sub/config.json": b"{}"})
    h.make_version(layout, "tiny", "2025-06-01-2", {"tiny.gguf": DATA[:100]}, complete=False)
    (layout.root / "_llmgw" / "engines").mkdir(parents=True)
    (layout.root / "_llmgw" / "engines" / "llama.tar.gz").write_bytes(b"engine")
    app = build_file_app(layout, "http://models.internal:8081")
    runner, base = await h.start_app(app)
    yield base
    await runner.cleanup()


async def raw_get(base: str, target: str, headers: str = "") -> tuple[int, bytes]:
    """A request sent byte for byte, so no client tidies the path first."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}\r\n".encode())
    await writer.drain()
    response = await reader.read()
    writer.close()
    status = int(response.split(b" ", 2)[1])
    return status, response.split(b"\r\n\r\n", 1)[1]


async def test_whole_file_with_etag(files, aiohttp_client_session):
    async with aiohttp_client_session.get(f"{files}/tiny/2025-06-01/tiny.gguf") as r:
        assert r.status == 200 and await r.read() == DATA
        assert r.headers["Accept-Ranges"] == "bytes" and r.headers["ETag"].startswith('"')


async def test_ranges(files, aiohttp_client_session):
    url = f"{files}/tiny/2025-06-01/tiny.gguf"
    async with aiohttp_client_session.get(url, headers={"Range": "bytes=10-19"}) as r:
        assert r.status == 206 and await r.read() == DATA[10:20]
        assert r.headers["Content-Range"] == f"bytes 10-19/{len(DATA)}"
        etag = r.headers["ETag"]
    async with aiohttp_client_session.get(url, headers={"Range": "bytes=10000-"}) as r:
        assert r.status == 206 and await r.read() == DATA[10000:]
    async with aiohttp_client_session.get(url, headers={"Range": "bytes=-5"}) as r:
        assert r.status == 206 and await r.read() == DATA[-5:]
    async with aiohttp_client_session.get(url, headers={"Range": "bytes=99999-"}) as r:
        assert r.status == 416 and r.headers["Content-Range"] == f"bytes */{len(DATA)}"
    async with aiohttp_client_session.get(url, headers={"Range": "bytes=0-1,5-6"}) as r:
        assert r.status == 200 and await r.read() == DATA  # several ranges: the whole file instead
    async with aiohttp_client_session.get(url, headers={"Range": "bytes=100-", "If-Range": etag}) as r:
        assert r.status == 206 and await r.read() == DATA[100:]
    async with aiohttp_client_session.get(url, headers={"Range": "bytes=100-", "If-Range": '"stale"'}) as r:
        assert r.status == 200 and await r.read() == DATA  # changed since: start over
    async with aiohttp_client_session.get(url, headers={"If-None-Match": etag}) as r:
        assert r.status == 304
    async with aiohttp_client_session.head(url) as r:
        assert r.status == 200 and int(r.headers["Content-Length"]) == len(DATA) and await r.read() == b""


async def test_if_range_changes_with_the_file(files, layout, aiohttp_client_session):
    url = f"{files}/tiny/2025-06-01/tiny.gguf"
    async with aiohttp_client_session.get(url) as r:
        etag = r.headers["ETag"]
    path = layout.version_dir("tiny", "2025-06-01") / "tiny.gguf"
    path.write_bytes(DATA[::-1])
    os.utime(path, ns=(1, 1))
    async with aiohttp_client_session.get(url, headers={"Range": "bytes=100-", "If-Range": etag}) as r:
        assert r.status == 200 and await r.read() == DATA[::-1]


@pytest.mark.parametrize("target", [
    "/tiny/2025-06-01/.source.json",
    "/tiny/2025-06-01/.tiny.gguf.partial",
    "/tiny/.lock",
    "/../../../etc/passwd",
    "/tiny/../../../../etc/passwd",
    "/%2e%2e/%2e%2e/etc/passwd",
    "/tiny/2025-06-01/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/tiny//2025-06-01/tiny.gguf",
    "/tiny/2025-06-01/sub/",
    "/_llmgw/",
    "/_llmgw/engines/",
    "/nothing-here",
])
async def test_not_served(files, layout, target):
    (layout.version_dir("tiny", "2025-06-01") / ".tiny.gguf.partial").write_bytes(b"half")
    status, body = await raw_get(files, target)
    assert status == 404, body
    assert b"root:" not in body


async def test_symlinks_out_of_the_directory_and_onto_hidden_files_are_refused(files, layout, tmp_path):
    secret = tmp_path / "outside.txt"
    secret.write_text("private")
    version = layout.version_dir("tiny", "2025-06-01")
    (version / "escape.gguf").symlink_to(secret)
    (version / "sidecar.json").symlink_to(version / ".source.json")
    (layout.root / "elsewhere").symlink_to(tmp_path)
    (version / "inside.gguf").symlink_to(version / "tiny.gguf")
    for target in ("/tiny/2025-06-01/escape.gguf", "/tiny/2025-06-01/sidecar.json", "/elsewhere/outside.txt",
                   "/elsewhere/"):
        status, body = await raw_get(files, target)
        assert status == 404 and b"private" not in body, target
    status, body = await raw_get(files, "/tiny/2025-06-01/inside.gguf")
    assert status == 200 and body == DATA


async def test_bundle_files_are_served_but_not_listed(files, aiohttp_client_session):
    async with aiohttp_client_session.get(f"{files}/_llmgw/engines/llama.tar.gz") as r:
        assert r.status == 200 and await r.read() == b"engine"
    async with aiohttp_client_session.get(f"{files}/") as r:
        assert [m["name"] for m in (await r.json())["models"]] == ["tiny"]


async def test_listings_are_json_indexes(files, aiohttp_client_session):
    async with aiohttp_client_session.get(f"{files}/") as r:
        assert await r.json() == {"models": [{"name": "tiny", "versions": ["2025-06-01", "2025-06-01-2"]}]}
    async with aiohttp_client_session.get(f"{files}/tiny/") as r:
        versions = (await r.json())["versions"]
    assert [(v["version"], v["complete"]) for v in versions] == [("2025-06-01", True), ("2025-06-01-2", False)]
    assert versions[0]["url"] == "http://models.internal:8081/tiny/2025-06-01/"
    async with aiohttp_client_session.get(f"{files}/tiny/2025-06-01") as r:
        index = await r.json()
    assert index["complete"] is True and index["model"] == "tiny"
    by_path = {f["path"]: f for f in index["files"]}
    assert by_path["tiny.gguf"] == {
        "path": "tiny.gguf", "size": len(DATA), "sha256": hashlib.sha256(DATA).hexdigest(), "present": True,
        "url": "http://models.internal:8081/tiny/2025-06-01/tiny.gguf"}
    assert by_path["sub/config.json"]["url"].endswith("/tiny/2025-06-01/sub/config.json")


async def test_only_get_and_head(files, aiohttp_client_session):
    async with aiohttp_client_session.post(f"{files}/tiny/2025-06-01/tiny.gguf", data=b"x") as r:
        assert r.status == 405
    async with aiohttp_client_session.put(f"{files}/tiny/2025-06-01/new.gguf", data=b"x") as r:
        assert r.status == 405


@pytest.fixture
async def aiohttp_client_session():
    import aiohttp

    async with aiohttp.ClientSession() as session:
        yield session
