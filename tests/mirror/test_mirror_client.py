"""`MirrorClient`: what an agent uses to fetch a model from the mirror, checked and resumed."""

from __future__ import annotations

import hashlib

import pytest
from aiohttp import web

from llmgw.mirror.client import (
    ChecksumMismatch,
    IncompleteVersion,
    MirrorClient,
    MirrorError,
    MirrorRef,
)
from llmgw.mirror.layout import hidden_sibling
from llmgw.mirror.serve import build_file_app

WEIGHTS = b"GGUF" + bytes(range(256)) * 1200  # ~300 KB
PROJECTOR = b"GGUF" + b"\7" * 5000


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
async def mirror(layout, h):
    h.make_version(layout, "llava", "2025-06-01", {"llava.gguf": WEIGHTS, "mmproj-llava-f16.gguf": PROJECTOR,
                                                   "config.json": b"{}"})
    h.make_version(layout, "llava", "2025-06-02", {"llava.gguf": WEIGHTS[:10]}, complete=False)
    app = build_file_app(layout, "http://elsewhere.example")  # the index's URLs are not followed
    seen: list[dict] = []

    @web.middleware
    async def record(request: web.Request, handler):
        seen.append({"path": request.path, "range": request.headers.get("Range")})
        return await handler(request)

    app.middlewares.append(record)
    runner, base = await h.start_app(app)
    client = MirrorClient(base)
    client.seen = seen
    yield client
    await client.close()
    await runner.cleanup()


async def test_indexes(mirror):
    assert await mirror.models() == ["llava"]
    assert [v["version"] for v in await mirror.versions("llava")] == ["2025-06-01", "2025-06-02"]
    assert await mirror.newest("llava") == "2025-06-01"  # the newer one is not whole yet
    version = await mirror.index("llava")
    assert version.complete and version.version == "2025-06-01"
    assert version.file("llava.gguf").sha256 == sha(WEIGHTS) and version.file("llava.gguf").size == len(WEIGHTS)


async def test_fetch_a_file_brings_its_projector(mirror, tmp_path):
    dest = tmp_path / "weights"
    got = await mirror.fetch(f"{mirror.base_url}/llava/2025-06-01/llava.gguf", dest)
    assert sorted(f.path.name for f in got) == ["llava.gguf", "mmproj-llava-f16.gguf"]
    assert (dest / "llava.gguf").read_bytes() == WEIGHTS and (dest / "mmproj-llava-f16.gguf").read_bytes() == PROJECTOR
    assert all(f.downloaded for f in got)
    again = await mirror.fetch("llava/2025-06-01/llava.gguf", dest)
    assert not any(f.downloaded for f in again)


async def test_fetch_a_whole_version_with_expected_checksums(mirror, tmp_path):
    expected = {"llava.gguf": sha(WEIGHTS), "mmproj-llava-f16.gguf": sha(PROJECTOR), "config.json": sha(b"{}")}
    got = await mirror.fetch("llava", tmp_path, expected=expected, require_expected=True)
    assert len(got) == 3
    with pytest.raises(MirrorError, match="no checksum given"):
        await mirror.fetch("llava", tmp_path / "other", expected={"llava.gguf": sha(WEIGHTS)}, require_expected=True)


async def test_resumes_a_partial_with_a_range(mirror, tmp_path):
    dest = tmp_path / "weights"
    dest.mkdir()
    hidden_sibling(dest / "llava.gguf", ".partial").write_bytes(WEIGHTS[:100_000])
    hidden_sibling(dest / "llava.gguf", ".partial.json").write_text(
        '{"url": "%s/llava/2025-06-01/llava.gguf"}' % mirror.base_url)
    [got] = await mirror.fetch("llava/2025-06-01", dest, only=["llava.gguf"])
    assert got.downloaded and (dest / "llava.gguf").read_bytes() == WEIGHTS
    [request] = [r for r in mirror.seen if r["path"].endswith("/llava.gguf")]
    assert request["range"] == "bytes=100000-"
    assert not hidden_sibling(dest / "llava.gguf", ".partial").exists()


async def test_a_file_corrupted_on_the_mirror_is_refused(mirror, layout, tmp_path):
    (layout.version_dir("llava", "2025-06-01") / "llava.gguf").write_bytes(WEIGHTS[:-1] + b"\0")
    dest = tmp_path / "weights"
    with pytest.raises(ChecksumMismatch, match="sha256"):
        await mirror.fetch("llava/2025-06-01/llava.gguf", dest, expected={"llava.gguf": sha(WEIGHTS)})
    assert not (dest / "llava.gguf").exists()
    assert not hidden_sibling(dest / "llava.gguf", ".partial").exists()


async def test_an_index_that_disagrees_with_the_caller_is_refused_before_fetching(mirror, tmp_path):
    with pytest.raises(ChecksumMismatch, match="was expected"):
        await mirror.fetch("llava/2025-06-01/llava.gguf", tmp_path, expected={"llava.gguf": "0" * 64})
    assert [r for r in mirror.seen if r["path"].endswith(".gguf")] == []


async def test_an_incomplete_version_is_not_fetched(mirror, tmp_path):
    with pytest.raises(IncompleteVersion):
        await mirror.fetch("llava/2025-06-02", tmp_path)


async def test_a_damaged_local_copy_is_fetched_again_when_verifying(mirror, tmp_path):
    await mirror.fetch("llava/2025-06-01/config.json", tmp_path)
    (tmp_path / "config.json").write_bytes(b"[]")
    [got] = await mirror.fetch("llava/2025-06-01/config.json", tmp_path, verify_existing=True)
    assert got.downloaded and (tmp_path / "config.json").read_bytes() == b"{}"


async def test_concurrent_fetches_share_one_download(mirror, tmp_path):
    import asyncio

    results = await asyncio.gather(*(mirror.fetch("llava/2025-06-01/config.json", tmp_path) for _ in range(5)))
    assert len([r for r in mirror.seen if r["path"].endswith("config.json")]) == 1
    assert sum(1 for [f] in results if f.downloaded) == 5  # all five waited on the same download


async def test_an_index_cannot_write_outside_dest(layout, h, tmp_path):
    sidecar = h.make_version(layout, "evil", "2025-01-01", {"x.gguf": b"x"})
    sidecar.files[0].path = "../../escape.gguf"
    layout.write_sidecar(sidecar)
    runner, base = await h.start_app(build_file_app(layout))
    try:
        async with MirrorClient(base) as client:
            with pytest.raises(MirrorError, match="refuses"):
                await client.fetch("evil/2025-01-01", tmp_path / "dest")
    finally:
        await runner.cleanup()


def test_refs():
    assert MirrorRef.parse("http://m:8081/qwen/2025-06-01/sub/q.gguf") == MirrorRef("qwen", "2025-06-01", "sub/q.gguf")
    assert MirrorRef.parse("qwen/") == MirrorRef("qwen")
    assert str(MirrorRef.parse("qwen/2025-06-01-2")) == "qwen/2025-06-01-2"
    for bad in ("", "qwen/latest", "qwen/2025-06-01/../x", "../etc", "qwen/2025-06-01/.source.json"):
        with pytest.raises(MirrorError):
            MirrorRef.parse(bad)
