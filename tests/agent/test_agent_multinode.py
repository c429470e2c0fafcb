"""Rank 0 of a replica over several nodes: its agent picks the port the other ranks meet it at, says it at once,
and keeps it out of other shards' way while the shard runs."""

from __future__ import annotations

import asyncio

import pytest
from agent_cluster import FakeControlPlane, kill_shards, make_agent
from agent_helpers import KEY

from llmgw.wire import messages as wire


@pytest.fixture
async def cp():
    plane = await FakeControlPlane().start()
    yield plane
    await plane.stop()


async def test_rank_0_gets_a_rendezvous_port_said_before_the_engine_starts(cp, tmp_path):
    agent = make_agent(tmp_path, cp)
    task = asyncio.create_task(agent.run())
    try:
        await cp.wait_registers(1)
        await cp.send(wire.StartShard(shard_id="big-0a1b2c3d", model="m", engine="fake", api_key=KEY, nnodes=2,
                                      node_rank=0, command_id="start:big-0a1b2c3d"))
        first = await cp.status("big-0a1b2c3d", "starting")
        lo, hi = (int(p) for p in agent.config.engine_ports.split("-"))
        assert first.dist_port and first.port and first.dist_port != first.port
        assert lo <= first.dist_port <= hi
        ready = await cp.status("big-0a1b2c3d", "ready")
        assert ready.dist_port == first.dist_port and ready.port == first.port
        # Another shard on the node is never given rank 0's rendezvous port.
        await cp.send(wire.StartShard(shard_id="other", model="m", engine="fake", api_key=KEY))
        other = await cp.status("other", "ready")
        assert other.port not in (first.port, first.dist_port) and other.dist_port == 0
        # A worker rank is told where to meet rank 0; its agent picks no port of its own for that.
        await cp.send(wire.StartShard(shard_id="big-0a1b2c3d-r1", model="m", engine="fake", api_key=KEY, nnodes=2,
                                      node_rank=1, head_address="10.1.0.1", dist_port=first.dist_port))
        worker = await cp.status("big-0a1b2c3d-r1", "ready")
        assert worker.dist_port == 0
    finally:
        await agent.stop()
        await asyncio.wait_for(task, 10)
        kill_shards(agent)
