"""An agent running as root starts llama-server as llmgw-engine, listening on 127.0.0.1 only.

Slow: a real llama-server (the build cache's, as in test_agent_llamacpp_slow.py) serving a tiny GGUF.
The agent's folders are under a folder others may pass through: pytest's own are closed to them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import pwd
import subprocess

import pytest
from agent_cluster import FakeControlPlane, kill_shards, make_agent
from agent_helpers import KEY

from llmgw.agent.engine_user import ENGINE_USER
from llmgw.wire import messages as wire

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="the agent must run as root")]


@pytest.fixture
async def cp():
    plane = await FakeControlPlane().start()
    yield plane
    await plane.stop()


def listening(port: int) -> list[str]:
    """The local addresses of TCP sockets listening on `port`, from /proc/net/tcp and tcp6."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                address, hex_port = fields[1].rsplit(":", 1)
                if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    found.append(address)
    return found


async def test_llama_server_runs_as_the_engine_user_on_loopback(cp, open_dir, monkeypatch, caplog):
    import openai

    from llmgw.agent.llamacpp_build import find_cached, find_vocab
    from llmgw.testing.tiny_gguf import write_tiny_gguf

    llama_server = os.environ.get("LLMGW_LLAMA_SERVER") or find_cached()
    vocab = find_vocab()
    if llama_server is None or vocab is None:
        if os.environ.get("CI"):
            pytest.fail("no llama-server in the build cache: python -m llmgw.agent.llamacpp_build --pypi")
        pytest.skip("no llama-server in the build cache: python -m llmgw.agent.llamacpp_build --pypi")
    monkeypatch.setenv("LLMGW_LLAMA_SERVER", str(llama_server))
    models = open_dir / "models"
    models.mkdir(mode=0o755)
    model = write_tiny_gguf(models / "tiny.gguf", vocab)
    os.chmod(model, 0o644)

    caplog.set_level(logging.INFO, logger="llmgw")
    agent = make_agent(open_dir, cp, engine_user=ENGINE_USER)  # what agent.yaml says unless told otherwise
    task = asyncio.create_task(agent.run())
    try:
        await cp.wait_registers(1)
        assert f"engines run as {ENGINE_USER} (uid" in caplog.text and "engines listen on 127.0.0.1" in caplog.text
        sha = hashlib.sha256(model.read_bytes()).hexdigest()
        await cp.send(wire.StartShard(shard_id="u1", model="tiny", engine="llamacpp", api_key=KEY,
                                      weights=wire.WeightsSource(source=str(model), sha256=sha), context_length=512,
                                      command_id="start-u1"))
        ready = await cp.status("u1", "ready", timeout=90)
        shard = agent.supervisor.get("u1")

        user = subprocess.run(["ps", "-o", "user=", "-p", str(shard.pid)], capture_output=True, text=True).stdout
        assert user.strip() == ENGINE_USER
        assert pwd.getpwnam(ENGINE_USER).pw_uid != 0
        # The program the agent ran is the copy it made where the engine user can run it.
        assert shard.plan.argv[0] == str(open_dir / "engines" / "llamacpp" / "bin" / "llama-server")
        assert listening(ready.port) == ["0100007F"]  # 127.0.0.1, and nothing else
        ss = subprocess.run(["ss", "-ltnp", f"sport = :{ready.port}"], capture_output=True, text=True).stdout
        local = [line.split()[3] for line in ss.splitlines()[1:] if line.startswith("LISTEN")]
        assert local == [f"127.0.0.1:{ready.port}"] and "llama-server" in ss

        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{ready.port}/v1", api_key=KEY)
        answer = await client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}],
                                                      max_tokens=4)
        assert answer.usage.completion_tokens > 0
        await client.close()
        await cp.send(wire.StopShard(shard_id="u1", grace_seconds=10))
        await cp.status("u1", "stopped", timeout=20)
    finally:
        await agent.stop()
        await asyncio.wait_for(task, 10)
        kill_shards(agent)


async def test_weights_the_engine_user_cannot_read_are_refused_before_the_start(cp, open_dir, monkeypatch):
    from llmgw.agent.llamacpp_build import find_cached

    llama_server = os.environ.get("LLMGW_LLAMA_SERVER") or find_cached()
    if llama_server is None:
        pytest.skip("no llama-server in the build cache")
    monkeypatch.setenv("LLMGW_LLAMA_SERVER", str(llama_server))
    closed = open_dir / "closed"
    closed.mkdir(mode=0o700)
    model = closed / "m.gguf"
    model.write_bytes(b"GGUF")
    agent = make_agent(open_dir, cp, engine_user=ENGINE_USER)
    task = asyncio.create_task(agent.run())
    try:
        await cp.wait_registers(1)
        await cp.send(wire.StartShard(shard_id="u2", model="m", engine="llamacpp", api_key=KEY,
                                      weights=wire.WeightsSource(source=str(model)), command_id="start-u2"))
        failed = await cp.status("u2", "failed", timeout=30)
        assert failed.message.startswith(f"engines run as {ENGINE_USER}, who cannot reach its weights ({model}): "
                                         f"{closed} is closed to it (mode 0o700)")
    finally:
        await agent.stop()
        await asyncio.wait_for(task, 10)
        kill_shards(agent)
