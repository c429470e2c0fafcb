"""The agent against a fake control plane on the real wire channel (loopback, no TLS)."""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
import pytest
from agent_cluster import FakeControlPlane, kill_shards, make_agent, with_fake_engine
from agent_helpers import KEY

from llmgw.agent import procs
from llmgw.agent.agent import RESTART, STOPPED_RUN
from llmgw.wire import messages as wire


@pytest.fixture
async def cp():
    plane = await FakeControlPlane().start()
    yield plane
    await plane.stop()


@pytest.fixture
async def agents():
    """Runs agents in tasks; whatever is left is stopped, and its engines killed, at the end."""
    running: list = []

    def run(agent):
        task = asyncio.create_task(agent.run())
        running.append((agent, task))
        return task

    yield run
    for agent, task in running:
        if not task.done():
            await agent.stop()
            await asyncio.wait_for(task, 10)
    kill_shards(*(a for a, _ in running))


async def answers(port: int) -> int:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{port}/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                             json={"model": "tiny-sim", "messages": [{"role": "user", "content": "hi"}],
                                   "max_tokens": 2}) as r:
            return r.status


def start_sim(shard_id: str = "s1", command_id: str = "c1", **kw) -> wire.StartShard:
    kw.setdefault("api_key", KEY)
    return wire.StartShard(shard_id=shard_id, model="tiny-sim", engine="sim", command_id=command_id, **kw)


async def test_registers_heartbeats_runs_a_sim_shard_and_survives_its_own_restart(cp, agents, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="llmgw")  # what `llmgw agent` logs by default
    agent = make_agent(tmp_path, cp)
    task = agents(agent)
    reg = await cp.wait_registers(1)
    assert reg.node_id == "node-1" and reg.addresses == ("127.0.0.1",)
    assert reg.engines["sim"] and reg.engines["fake"] == "1.0"
    assert reg.labels == {"llmgw.io/rack": "r1"} and reg.shards == ()
    beat = await cp.wait_for(lambda m: isinstance(m, wire.Heartbeat) and m.seq >= 2)
    assert beat.load_1m == 0.5 and beat.memory_available_bytes == 123

    await cp.send(start_sim())
    starting = await cp.status("s1", "starting")
    ready = await cp.status("s1", "ready")
    assert starting.command_id == ready.command_id == "c1"
    assert ready.pid and ready.port in agent.ports and ready.model == "tiny-sim"
    result = await cp.wait_for(lambda m: isinstance(m, wire.CommandResult) and m.command_id == "c1")
    assert result.ok
    assert await answers(ready.port) == 200
    beat = await cp.wait_for(lambda m: isinstance(m, wire.Heartbeat)
                             and any(s.shard_id == "s1" and s.state == "ready" for s in m.shards))
    assert beat.shards[0].memory_bytes > 0

    await cp.send(wire.RequestLogs(request_id="r1", shard_id="s1", lines=50))
    chunk = await cp.wait_for(lambda m: isinstance(m, wire.LogChunk) and m.request_id == "r1")
    assert chunk.last and any("listening on" in line for line in chunk.lines)
    await cp.send(wire.RequestLogs(request_id="r2"))
    own = await cp.wait_for(lambda m: isinstance(m, wire.LogChunk) and m.request_id == "r2")
    assert any("shard s1: ready" in line for line in own.lines)

    # The agent goes (SIGTERM): the engine does not.
    failures: list[str] = []

    async def probe() -> None:
        while True:
            try:
                if await answers(ready.port) != 200:
                    failures.append("not 200")
            except aiohttp.ClientError as exc:
                failures.append(repr(exc))
            await asyncio.sleep(0.05)

    prober = asyncio.create_task(probe())
    try:
        await agent.stop()
        assert await asyncio.wait_for(task, 10) == STOPPED_RUN
        await asyncio.sleep(0.3)
        second = make_agent(tmp_path, cp)
        agents(second)
        reg2 = await cp.wait_registers(2)
        await asyncio.sleep(0.3)
    finally:
        prober.cancel()
    assert failures == []
    [shard] = reg2.shards
    assert (shard.shard_id, shard.state, shard.pid, shard.port) == ("s1", "ready", ready.pid, ready.port)

    mark = len(cp.received)
    await cp.send(wire.StopShard(shard_id="s1", grace_seconds=10, command_id="c2"))
    stopped = await cp.status("s1", "stopped", start=mark)
    assert stopped.command_id == "c2" and stopped.exit_code == 0
    assert not procs.is_alive(second.supervisor.get("s1").ident) if second.supervisor.get("s1") else True


@pytest.mark.parametrize("msg, says", [
    (start_sim("bad-args", args=("--api-key", "mine")), "--api-key is set by llmgw for each replica"),
    (start_sim("bad-env", env={"LD_PRELOAD": "/tmp/x.so"}), "env.LD_PRELOAD: LD_PRELOAD changes what the dynamic loader loads: not allowed"),
    (wire.StartShard(shard_id="no-engine", model="m", engine="tgi", api_key=KEY, command_id="c1"),
     "no engine 'tgi' on this node (it has: fake, llamacpp, sglang, sim, trtllm, vllm)"),
    (start_sim("gpu", gpus=(2,)), "GPU [2] is not on this node (it has no GPUs)"),
    (wire.StartShard(shard_id="vllm-cpu", model="m", engine="vllm", api_key=KEY, command_id="c1"), "vllm needs GPUs"),
    (start_sim("no-key", api_key=""), "it has no api_key"),
])
async def test_a_start_that_cannot_run_fails_in_words(cp, agents, tmp_path, msg, says):
    agents(make_agent(tmp_path, cp))
    await cp.wait_registers(1)
    await cp.send(msg)
    failed = await cp.status(msg.shard_id, "failed")
    assert says in failed.message
    result = await cp.wait_for(lambda m: isinstance(m, wire.CommandResult) and m.command_id == msg.command_id)
    assert not result.ok and says in result.error


async def test_drain_waits_for_running_requests_then_stops(cp, agents, tmp_path):
    running = tmp_path / "running"
    running.write_text("2")
    agent = make_agent(tmp_path, cp, plugins=with_fake_engine(str(running)))
    agents(agent)
    await cp.wait_registers(1)
    await cp.send(wire.StartShard(shard_id="d1", model="m", engine="fake", api_key=KEY, command_id="start"))
    await cp.status("d1", "ready")
    await cp.send(wire.DrainShard(shard_id="d1", grace_seconds=30, command_id="drain"))
    await asyncio.sleep(1.5)
    assert agent.supervisor.get("d1").state == "ready"  # two requests still running
    running.write_text("0")
    stopped = await cp.status("d1", "stopped")
    assert stopped.message == "exited with code 0"
    assert (await cp.wait_for(lambda m: isinstance(m, wire.CommandResult) and m.command_id == "drain")).ok


async def test_an_engine_that_dies_is_reported_with_its_last_lines(cp, agents, tmp_path):
    agent = make_agent(tmp_path, cp)
    agents(agent)
    await cp.wait_registers(1)
    await cp.send(wire.StartShard(shard_id="x1", model="m", engine="fake", api_key=KEY))
    ready = await cp.status("x1", "ready")
    import os
    import signal

    os.kill(ready.pid, signal.SIGKILL)
    exited = await cp.status("x1", "exited")
    assert exited.message == "killed by SIGKILL" and any("fake engine pid" in x for x in exited.log_tail)
    await asyncio.sleep(0.2)
    assert agent.supervisor.get("x1") is None  # told, so forgotten


async def test_control_planes_are_kept_and_restart_leaves_engines_running(cp, agents, tmp_path):
    agent = make_agent(tmp_path, cp)
    task = agents(agent)
    await cp.wait_registers(1)
    await cp.send(wire.StartShard(shard_id="r1", model="m", engine="fake", api_key=KEY))
    ready = await cp.status("r1", "ready")
    await cp.send(wire.ControlPlanes(addresses=(cp.address, "127.0.0.1:1"), epoch=3))
    await asyncio.sleep(0.3)
    kept = json.loads((tmp_path / "state" / "control_planes.json").read_text())
    assert kept["addresses"] == [f"ws://{cp.address}/agent/v1", "ws://127.0.0.1:1/agent/v1"]

    await cp.send(wire.Restart(reason="upgrade", command_id="rs"))
    assert await asyncio.wait_for(task, 10) == RESTART
    assert (await cp.wait_for(lambda m: isinstance(m, wire.CommandResult) and m.command_id == "rs")).ok
    assert procs.is_alive(agent.supervisor.get("r1").ident)
    again = make_agent(tmp_path, cp)
    assert again._control_plane_urls()[:2] == kept["addresses"]
    agents(again)
    reg = await cp.wait_registers(2)
    assert [(s.shard_id, s.state, s.pid) for s in reg.shards] == [("r1", "ready", ready.pid)]


async def test_a_second_start_of_a_running_shard_is_not_a_second_engine(cp, agents, tmp_path):
    agent = make_agent(tmp_path, cp)
    agents(agent)
    await cp.wait_registers(1)
    await cp.send(wire.StartShard(shard_id="twice", model="m", engine="fake", api_key=KEY))
    ready = await cp.status("twice", "ready")
    mark = len(cp.received)
    await cp.send(wire.StartShard(shard_id="twice", model="m", engine="fake", api_key=KEY, command_id="again"))
    again = await cp.wait_for(lambda m: isinstance(m, wire.ShardStatus) and m.command_id == "again", start=mark)
    assert again.state == "ready" and "not started twice" in again.message
    assert agent.supervisor.get("twice").pid == ready.pid


async def test_stop_engines_on_request_for_llmgw_up(cp, agents, tmp_path):
    agent = make_agent(tmp_path, cp)
    task = agents(agent)
    await cp.wait_registers(1)
    await cp.send(wire.StartShard(shard_id="u1", model="m", engine="fake", api_key=KEY))
    await cp.status("u1", "ready")
    ident = agent.supervisor.get("u1").ident
    await agent.stop(stop_engines=True)
    await asyncio.wait_for(task, 10)
    assert not procs.is_alive(ident)
    await cp.status("u1", "stopped")


async def test_shard_ids_never_become_paths(cp, agents, tmp_path):
    agents(make_agent(tmp_path, cp))
    await cp.wait_registers(1)
    (tmp_path / "state" / "secret.log").write_text("not for the control plane\n")
    await cp.send(wire.RequestLogs(request_id="evil", shard_id="../state/secret"))
    chunk = await cp.wait_for(lambda m: isinstance(m, wire.LogChunk) and m.request_id == "evil")
    assert chunk.lines == ("no shard ../state/secret on this node, and no log of one",)
    await cp.send(wire.StartShard(shard_id="../x", model="m", engine="fake", api_key=KEY, command_id="c1"))
    failed = await cp.status("../x", "failed")
    assert failed.message.startswith("shard id '../x': expected letters, digits")


def test_log_chunks_stay_under_a_frame():
    from llmgw.agent.agent import LOG_CHUNK_BYTES, LOG_CHUNK_LINES, _chunks

    assert _chunks([]) == [[]]
    assert [len(c) for c in _chunks(["x"] * (LOG_CHUNK_LINES + 1))] == [LOG_CHUNK_LINES, 1]
    long = ["y" * (LOG_CHUNK_BYTES // 3)] * 7
    assert all(sum(map(len, c)) <= LOG_CHUNK_BYTES for c in _chunks(long))
    assert sum(len(c) for c in _chunks(long)) == 7
