"""What an agent learns from the control plane's Welcome: the mirror, and every control plane."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest
from agent_cluster import FakeControlPlane, kill_shards, make_agent
from agent_helpers import KEY

from llmgw.mirror.layout import Layout, Origin, Sidecar, SourceFile
from llmgw.mirror.serve import build_file_app
from llmgw.wire import messages as wire
from llmgw.wire.codec import decode, encode

BLOB = b"GGUF tiny weights"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
async def mirror(tmp_path, aiohttp_server):
    layout = Layout(tmp_path / "mirror")
    directory = layout.version_dir("tiny", "2025-06-01")
    directory.mkdir(parents=True)
    (directory / "tiny.gguf").write_bytes(BLOB)
    layout.write_sidecar(Sidecar(
        model="tiny", version="2025-06-01", origin=Origin(kind="file", path="/test"), complete=True,
        files=[SourceFile(path="tiny.gguf", size=len(BLOB), sha256=sha(BLOB))],
        created_at="2025-01-01T00:00:00Z", fetched_at="2025-01-01T00:00:00Z"))
    server = await aiohttp_server(build_file_app(layout))
    return str(server.make_url("")).rstrip("/")


@pytest.fixture
async def planes():
    made: list[FakeControlPlane] = []

    async def make(**kw) -> FakeControlPlane:
        plane = await FakeControlPlane(**kw).start()
        made.append(plane)
        return plane

    yield make
    for plane in made:
        await plane.stop()


async def run_until_stopped(agent, body):
    task = asyncio.create_task(agent.run())
    try:
        await body()
    finally:
        await agent.stop()
        await asyncio.wait_for(task, 10)
        kill_shards(agent)


def start_from_mirror(shard_id: str) -> wire.StartShard:
    return wire.StartShard(shard_id=shard_id, model="tiny", engine="fake", api_key=KEY, command_id="c1",
                           weights=wire.WeightsSource(source="mirror:tiny/2025-06-01/tiny.gguf", sha256=sha(BLOB)))


async def test_weights_come_from_the_mirror_the_control_plane_names(planes, mirror, tmp_path):
    # agent.yaml names no mirror: only server.yaml does, and the Welcome carries it.
    cp = await planes(welcome={"mirror": mirror})
    agent = make_agent(tmp_path, cp)

    async def body():
        await cp.wait_registers(1)
        await cp.send(start_from_mirror("m1"))
        ready = await cp.status("m1", "ready")
        assert ready.command_id == "c1"
        assert (tmp_path / "weights" / "mirror" / "tiny" / "2025-06-01" / "tiny.gguf").read_bytes() == BLOB

    await run_until_stopped(agent, body)


async def test_without_a_mirror_named_anywhere_the_start_fails_in_words(planes, tmp_path):
    cp = await planes()
    agent = make_agent(tmp_path, cp)

    async def body():
        await cp.wait_registers(1)
        await cp.send(start_from_mirror("m2"))
        failed = await cp.status("m2", "failed")
        assert "no mirror configured" in failed.message

    await run_until_stopped(agent, body)


async def test_agent_yaml_s_mirror_wins_over_the_control_plane_s(planes, mirror, tmp_path):
    cp = await planes(welcome={"mirror": "http://127.0.0.1:9/nothing-here"})
    agent = make_agent(tmp_path, cp, mirror=mirror)

    async def body():
        await cp.wait_registers(1)
        await cp.send(start_from_mirror("m3"))
        await cp.status("m3", "ready")

    await run_until_stopped(agent, body)


async def test_control_planes_from_the_welcome_are_kept_and_the_next_is_dialled(planes, tmp_path):
    second = await planes()
    first = await planes(welcome={"control_planes": None})
    first.welcome["control_planes"] = (first.address, second.address)
    agent = make_agent(tmp_path, first)  # agent.yaml names only the first

    async def body():
        await first.wait_registers(1)
        saved = tmp_path / "state" / "control_planes.json"
        for _ in range(100):
            if saved.exists():
                break
            await asyncio.sleep(0.05)
        kept = json.loads(saved.read_text())["addresses"]
        assert [a.split("//")[1].split("/")[0] for a in kept] == [first.address, second.address]
        registered = json.loads((tmp_path / "state" / "registered.json").read_text())
        assert registered["node_id"] == "node-1"
        await first.stop()  # the first goes: the agent finds the second, which agent.yaml never named
        await second.wait_registers(1, timeout=20)

    await run_until_stopped(agent, body)


def test_old_and_new_agents_read_each_other_s_welcome():
    # A Welcome from a newer control plane, with a field this code does not know, still reads.
    frame = encode(wire.Welcome(node_id="n1", mirror="http://m:8081", control_planes=("a:7443",)))
    import msgpack

    data = msgpack.unpackb(frame)
    data["something_newer"] = {"x": 1}
    welcome = decode(msgpack.packb(data), expect=wire.CONTROL_MESSAGES)
    assert welcome.mirror == "http://m:8081" and welcome.control_planes == ("a:7443",)
    # And one from an older control plane, without the new fields, reads with them empty.
    del data["mirror"], data["control_planes"]
    old = decode(msgpack.packb(data), expect=wire.CONTROL_MESSAGES)
    assert old.mirror == "" and old.control_planes == ()
