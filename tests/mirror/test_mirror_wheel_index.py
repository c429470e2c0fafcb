"""The mirror's Python package index: /simple/ over the wheels an operator puts in wheels/."""

from __future__ import annotations

import hashlib
import re

import pytest

from llmgw.mirror.layout import LayoutError, check_model_name
from llmgw.mirror.serve import build_file_app
from llmgw.mirror.wheel_index import project_of

WHEEL = b"PK\x03\x04 not a real wheel, only bytes to serve"


@pytest.fixture
async def http():
    import aiohttp

    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def served(layout, h):
    wheels = layout.root / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "vllm-0.9.1-py3-none-any.whl").write_bytes(WHEEL)
    (wheels / "llama_cpp_python-0.3.16.tar.gz").write_bytes(b"sdist")
    (wheels / "notes.txt").write_text("not a distribution")
    (wheels / ".vllm-0.9.2-py3-none-any.whl.part").write_bytes(b"half")
    h.make_version(layout, "tiny", "2025-06-01", {"tiny.gguf": b"gguf"})
    runner, base = await h.start_app(build_file_app(layout))
    yield base
    await runner.cleanup()


async def test_the_index_lists_projects_and_links_each_file_with_its_hash(served, http):
    async with http.get(f"{served}/simple/") as r:
        assert r.status == 200 and r.content_type == "text/html"
        assert re.findall(r'href="([^"]+)"', await r.text()) == ["llama-cpp-python/", "vllm/"]
    async with http.get(f"{served}/simple/vllm/") as r:
        links = re.findall(r'href="([^"]+)"', await r.text())
    assert links == [f"/wheels/vllm-0.9.1-py3-none-any.whl#sha256={hashlib.sha256(WHEEL).hexdigest()}"]
    async with http.get(served + links[0].split("#")[0]) as r:
        assert r.status == 200 and await r.read() == WHEEL
    async with http.get(f"{served}/simple/Llama_CPP.Python/", allow_redirects=False) as r:
        assert r.status == 301 and r.headers["Location"] == "/simple/llama-cpp-python/"
    async with http.get(f"{served}/simple/sglang/") as r:
        assert r.status == 404 and "holds no sglang" in await r.text()


async def test_wheels_is_no_model(served, http, layout):
    assert layout.models() == ["tiny"]
    with pytest.raises(LayoutError, match="folder of Python wheels"):
        check_model_name("wheels")


def test_project_names_from_file_names():
    assert project_of("vllm-0.9.1-cp38-abi3-manylinux1_x86_64.whl") == "vllm"
    assert project_of("tensorrt_llm-0.20.0-cp312-cp312-linux_x86_64.whl") == "tensorrt-llm"
    assert project_of("llama_cpp_python-0.3.16.tar.gz") == "llama-cpp-python"
    assert project_of("README.md") is None and project_of(".x-1.whl") is None
