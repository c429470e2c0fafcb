"""Weights: local paths, HTTP with resume, the mirror; checksums, single flight, removal."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from aiohttp import web

from llmgw.agent.weights import WeightsError, WeightsFetcher, WeightsInUse, classify_source, manifest_sha256
from llmgw.mirror.layout import Layout, Origin, Sidecar, SourceFile
from llmgw.mirror.serve import build_file_app

BLOB = b"GGUF" + bytes(range(256)) * 4000  # ~1 MB


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class FileServer:
    """Serves BLOB at /models/tiny.gguf with ranges and an ETag; can drop the first transfer half-way."""

    def __init__(self) -> None:
        self.ranges: list[str | None] = []
        self.drop_first = False
        self.delay = 0.0
        self.data = BLOB

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/models/tiny.gguf", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        rng = request.headers.get("Range")
        self.ranges.append(rng)
        start = int(rng.split("=")[1].split("-")[0]) if rng else 0
        body = self.data[start:]
        response = web.StreamResponse(status=206 if rng else 200)
        response.content_length = len(body)
        response.headers["ETag"] = '"v1"'
        if rng:
            response.headers["Content-Range"] = f"bytes {start}-{len(self.data) - 1}/{len(self.data)}"
        await response.prepare(request)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.drop_first and len(self.ranges) == 1:
            await response.write(body[: len(body) // 2])
            await asyncio.sleep(0.05)
            request.transport.close()  # the connection breaks part-way
            return response
        await response.write(body)
        await response.write_eof()
        return response


@pytest.fixture
async def files(aiohttp_server):
    fs = FileServer()
    server = await aiohttp_server(fs.app())
    fs.url = str(server.make_url("/models/tiny.gguf"))
    return fs


@pytest.fixture
async def fetcher(tmp_path):
    f = WeightsFetcher(tmp_path / "weights", progress_interval=0.0)
    yield f
    await f.close()


async def test_a_local_path_is_used_where_it_is_and_checked(fetcher, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(BLOB)
    assert await fetcher.ensure(str(model), model="m") == model
    assert await fetcher.ensure(f"file://{model}", sha256=sha(BLOB), model="m") == model
    with pytest.raises(WeightsError, match="is not the expected"):
        await fetcher.ensure(str(model), sha256="0" * 64)
    with pytest.raises(WeightsError, match="no such file"):
        await fetcher.ensure(str(tmp_path / "absent.gguf"))
    assert {e.path for e in fetcher.present()} == {str(model)}


async def test_http_download_resumes_after_a_broken_connection(fetcher, files):
    files.drop_first = True
    seen = []
    path = await fetcher.ensure(files.url, sha256=sha(BLOB), size=len(BLOB), model="tiny", progress=seen.append)
    assert path.read_bytes() == BLOB
    assert files.ranges[0] is None and files.ranges[1].startswith("bytes=") and files.ranges[1] != "bytes=0-"
    assert seen[-1].state == "ready" and seen[-1].done_bytes == len(BLOB)
    assert any(p.state == "fetching" and 0 < p.done_bytes < len(BLOB) for p in seen)
    assert all(p.model == "tiny" and p.source == files.url for p in seen)
    # Held now: asking again fetches nothing.
    assert await fetcher.ensure(files.url, sha256=sha(BLOB)) == path
    assert len(files.ranges) == 2
    [entry] = fetcher.present()
    assert (entry.kind, entry.sha256, entry.size_bytes, entry.model) == ("http", sha(BLOB), len(BLOB), "tiny")


async def test_a_checksum_mismatch_is_refused_and_nothing_is_kept(fetcher, files):
    seen = []
    with pytest.raises(WeightsError, match="is not the expected"):
        await fetcher.ensure(files.url, sha256="ab" * 32, progress=seen.append)
    assert seen[-1].state == "failed"
    leftovers = [p for p in fetcher.dir.rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    assert leftovers == []
    assert fetcher.present() == []


async def test_concurrent_starts_share_one_download(fetcher, files):
    files.delay = 0.3
    heard: dict[int, list] = {i: [] for i in range(5)}
    paths = await asyncio.gather(*(
        fetcher.ensure(files.url, sha256=sha(BLOB), model="tiny", progress=heard[i].append) for i in range(5)))
    assert len(set(paths)) == 1 and paths[0].read_bytes() == BLOB
    assert files.ranges == [None]
    assert all(h and h[-1].state == "ready" for h in heard.values())  # every waiter heard the progress


async def test_removal_is_refused_while_a_shard_uses_the_weights(fetcher, files):
    path = await fetcher.ensure(files.url, model="tiny")
    with pytest.raises(WeightsInUse, match="in use by shard s-1"):
        await fetcher.remove(model="tiny", in_use={str(path): "s-1"})
    assert path.exists()
    removed = await fetcher.remove(model="tiny", in_use={})
    assert removed == [str(path.parent)] and not path.exists()
    assert fetcher.present() == []


async def test_a_local_path_is_forgotten_but_never_deleted(fetcher, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    await fetcher.ensure(str(model), model="m")
    assert await fetcher.remove(model="m") == []
    assert model.exists() and fetcher.present() == []


@pytest.fixture
async def mirror(tmp_path, aiohttp_server):
    layout = Layout(tmp_path / "mirror")
    files = {"tiny.gguf": BLOB, "mmproj-tiny-f16.gguf": b"GGUF proj", "README.md": b"hi"}
    directory = layout.version_dir("tiny", "2025-06-01")
    directory.mkdir(parents=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    layout.write_sidecar(Sidecar(
        model="tiny", version="2025-06-01", origin=Origin(kind="file", path="/test"), complete=True,
        files=[SourceFile(path=n, size=len(d), sha256=sha(d)) for n, d in files.items()],
        created_at="2025-01-01T00:00:00Z", fetched_at="2025-01-01T00:00:00Z"))
    server = await aiohttp_server(build_file_app(layout))
    return str(server.make_url("")).rstrip("/"), files


async def test_a_mirror_file_comes_with_its_projector_checked(tmp_path, mirror):
    base, files = mirror
    fetcher = WeightsFetcher(tmp_path / "weights", mirror_url=base)
    try:
        seen = []
        path = await fetcher.ensure("mirror:tiny/2025-06-01/tiny.gguf", sha256=sha(BLOB), model="tiny",
                                    progress=seen.append)
        assert path == tmp_path / "weights" / "mirror" / "tiny" / "2025-06-01" / "tiny.gguf"
        assert path.read_bytes() == BLOB and path.with_name("mmproj-tiny-f16.gguf").exists()
        assert seen[-1].state == "ready"
        with pytest.raises(WeightsError, match="was expected"):
            await fetcher.ensure("tiny/2025-06-01/tiny.gguf", sha256="cd" * 32)
        # A whole version, held to the manifest of its files' checksums; a mirror URL is the mirror too.
        whole = await fetcher.ensure(f"{base}/tiny/2025-06-01",
                                     sha256=manifest_sha256({n: sha(d) for n, d in files.items()}))
        assert sorted(p.name for p in whole.iterdir() if not p.name.startswith(".")) == sorted(files)
    finally:
        await fetcher.close()


async def test_a_mirror_source_without_a_mirror_says_so(fetcher):
    with pytest.raises(WeightsError, match=r"no mirror configured \(agent.yaml: mirror\)"):
        await fetcher.ensure("mirror:tiny/2025-06-01/tiny.gguf")


@pytest.mark.parametrize("source, kind, what", [
    ("/models/a.gguf", "path", "/models/a.gguf"),
    ("file:///models/a%20b.gguf", "path", "/models/a b.gguf"),
    ("https://example.com/a.gguf", "http", "https://example.com/a.gguf"),
    ("mirror:qwen/2025-06-01/q.gguf", "mirror", "qwen/2025-06-01/q.gguf"),
    ("qwen/2025-06-01/q.gguf", "mirror", "qwen/2025-06-01/q.gguf"),
    ("http://models.internal:8081/qwen/2025-06-01/q.gguf", "mirror", "qwen/2025-06-01/q.gguf"),
])
def test_sources_are_told_apart(source, kind, what):
    assert classify_source(source, "http://models.internal:8081") == (kind, what)


def test_sources_an_agent_does_not_fetch_say_where_to_go():
    with pytest.raises(WeightsError, match="fetch it into the mirror"):
        classify_source("hf://Qwen/Qwen3-4B-GGUF@main")


def test_the_manifest_is_sha256sum_of_the_files():
    lines = f"{sha(b'a')}  a.bin\n{sha(b'b')}  dir/b.bin\n"
    assert manifest_sha256({"dir/b.bin": sha(b"b"), "a.bin": sha(b"a")}) == sha(lines.encode())
