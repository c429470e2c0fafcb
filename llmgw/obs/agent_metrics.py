"""The agent's own /metrics (agent.yaml `metrics_listen`): this node's `llmgw_gpu_*` and `llmgw_node_*`.

The series are the heartbeat's readings (llmgw/obs/node_metrics.py), the same ones the leader relays: the
last heartbeat when it is fresh, else a reading taken for the scrape, so a node no control plane hears
is still scraped with what it reads now.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from llmgw.obs import logs
from llmgw.obs.exposition import render, role_registry
from llmgw.obs.node_metrics import NodeCollector, NodeReading

log = logs.get("llmgw.agent")


class AgentMetrics:
    """The registry of one agent (llmgw.agent.agent.Agent) and its handler."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.registry = role_registry("agent")
        self.registry.register(NodeCollector(self.readings))

    def readings(self) -> list[NodeReading]:
        from llmgw.agent.report import wire_inventory

        agent = self.agent
        inv = wire_inventory(agent.inventory) if agent.inventory is not None else None
        return [NodeReading(node=agent.node_id, gpus=inv.gpus if inv else (), cores=inv.cpu.cores if inv else 0,
                            memory_total_bytes=inv.memory_total_bytes if inv else 0,
                            heartbeat=agent.last_heartbeat)]

    async def handle(self, request: web.Request) -> web.Response:
        agent = self.agent
        if agent.inventory is None:
            await agent.discover_now()
        loop_time = asyncio.get_running_loop().time()
        stale_after = 2 * agent.config.heartbeat_interval.total_seconds()
        if agent.last_heartbeat is None or loop_time - agent.last_heartbeat_at > stale_after:
            await agent.read_heartbeat(0)
        body, content_type = render(self.registry, request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})


@asynccontextmanager
async def serving(agent: Any, address: str) -> AsyncIterator[int]:
    """Serve `GET /metrics` on `address` (host:port; an empty host is every interface) while inside; yields
    the port."""
    from llmgw.config.validate import split_address

    metrics = AgentMetrics(agent)
    app = web.Application()
    app.router.add_get("/metrics", metrics.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    try:
        host, port = split_address(address)
        site = web.TCPSite(runner, host or None, port)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        logs.event(log, "metrics listening", address=address, port=bound)
        yield bound
    finally:
        await runner.cleanup()
