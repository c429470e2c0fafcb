"""The heartbeat counts engines that exited without being asked (llmgw_node_engine_exits_total), not stops."""

from __future__ import annotations

import asyncio
import os
import signal

from agent_cluster import FakeControlPlane, kill_shards, make_agent
from agent_helpers import KEY

from llmgw.wire import messages as wire


async def test_an_engine_that_dies_is_counted_and_one_stopped_is_not(tmp_path):
    cp = await FakeControlPlane().start()
    agent = make_agent(tmp_path, cp)
    task = asyncio.create_task(agent.run())
    try:
        await cp.wait_registers(1)
        for shard in ("dies", "stopped"):
            await cp.send(wire.StartShard(shard_id=shard, model="m", engine="fake", api_key=KEY, command_id=shard))
            await cp.status(shard, "ready")
        os.kill(agent.supervisor.get("dies").pid, signal.SIGKILL)  # the engine dies under the agent
        await cp.status("dies", "exited")
        await cp.send(wire.StopShard(shard_id="stopped", command_id="stop"))
        await cp.status("stopped", "stopped")
        beat = await cp.wait_for(lambda m: isinstance(m, wire.Heartbeat), start=len(cp.received))
        assert beat.engine_exits == 1
    finally:
        await agent.stop()
        await asyncio.wait_for(task, 10)
        kill_shards(agent)
        await cp.stop()
