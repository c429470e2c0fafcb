"""The installer with uv (uv from PyPI, in the test's environment) and the mirror's package index."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from aiohttp import web
from fake_vllm import vllm_wheel

from llmgw.agent.engine_install import EngineInstaller, InstallError
from llmgw.agent.engines import NodeEngines
from llmgw.mirror.layout import Layout
from llmgw.mirror.serve import build_file_app
from llmgw.plugins.manager import load_plugins

pytestmark = pytest.mark.slow

UV = str(Path(sys.executable).parent / "uv")


@pytest.fixture
async def mirror(tmp_path):
    """A mirror whose wheels/ folder holds vllm 0.9.1 and 0.10.0, on 127.0.0.1."""
    for version in ("0.9.1", "0.10.0"):
        vllm_wheel(tmp_path / "mirror" / "wheels", version)
    runner = web.AppRunner(build_file_app(Layout(tmp_path / "mirror")))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def test_uv_installs_the_newest_the_mirror_offers_when_no_index_is_named(tmp_path, mirror):
    engines_dir = tmp_path / "engines"
    installer = EngineInstaller(engines_dir, mirror=lambda: mirror, uv=UV)
    steps: list[str] = []
    version, program = await installer.install("vllm", "", steps.append)
    assert version == "0.10.0" and program == str(engines_dir / "vllm" / "0.10.0" / "bin" / "python")
    assert steps[:3] == [f"creating a Python environment with {UV}", f"packages from {mirror}/simple/",
                         "asking the index for vllm's newest version"]
    assert "uv pip install vllm==0.10.0" in steps
    assert not (engines_dir / "vllm" / "0.10.0" / "bin" / "pip").exists()  # uv's environment: no pip in it
    node = NodeEngines(load_plugins().engines(), engines_dir, path=str(tmp_path / "nothing"),
                       llama_cache=str(tmp_path / "cache"))
    assert (await node.versions())["vllm"] == "0.10.0"


async def test_uv_says_why_a_version_cannot_be_had_and_leaves_nothing(tmp_path, mirror):
    installer = EngineInstaller(tmp_path / "engines", mirror=lambda: mirror, uv=UV)
    with pytest.raises(InstallError) as failed:
        await installer.install("vllm", "9.9.9")
    assert "there is no version of vllm==9.9.9" in str(failed.value)
    assert "Using Python" not in str(failed.value)
    assert [p.name for p in (tmp_path / "engines" / "vllm").iterdir()] == []


async def test_which_index_and_which_uv(tmp_path, mirror):
    engines_dir = tmp_path / "engines"
    assert await EngineInstaller(engines_dir, mirror=lambda: mirror).index_for("vllm") == f"{mirror}/simple/"
    # a package the mirror's wheels/ lacks comes from PyPI; so does everything without a mirror
    assert await EngineInstaller(engines_dir, mirror=lambda: mirror).index_for("sglang") == ""
    assert await EngineInstaller(engines_dir).index_for("vllm") == ""
    named = EngineInstaller(engines_dir, index_url="http://pypi.internal/simple", mirror=lambda: mirror)
    assert await named.index_for("vllm") == "http://pypi.internal/simple"  # agent.yaml's engine_index_url wins
    # uv: the one given; else ENGINES/bin/uv; else PATH; "" means pip
    (engines_dir / "bin").mkdir(parents=True)
    shutil.copy(UV, engines_dir / "bin" / "uv")
    assert EngineInstaller(engines_dir).find_uv() == str(engines_dir / "bin" / "uv")
    assert EngineInstaller(engines_dir, uv="").find_uv() is None
    os.remove(engines_dir / "bin" / "uv")
    assert EngineInstaller(engines_dir).find_uv() == shutil.which("uv")
