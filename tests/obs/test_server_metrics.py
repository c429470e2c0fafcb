"""`llmgw server`'s /metrics (metrics_listen), served by run_server with a real agent connected: the
gateway's series with tag labels, the scheduler's, and every node's GPUs relayed with a node label;
clean under `promtool check metrics`, in OpenMetrics when asked."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import openai
import pytest

from llmgw.agent import discovery
from llmgw.agent.agent import Agent
from llmgw.agent.discovery.thermal import HostSensors
from llmgw.config import parse_server_config
from llmgw.config.agent import AgentConfig
from llmgw.config.units import Duration
from llmgw.server import run_server
from llmgw.simengine import SimOptions, start

from scrape import OPENMETRICS, discovery_fakes, openmetrics_values, promtool_problems, undeclared, value

FAKES = discovery_fakes()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_agent(tmp_path, agent_port: int) -> Agent:
    nvml = FAKES.FakeNvml(FAKES.load_recording("nvml_h100x8.json"))
    config = AgentConfig(
        node_id="gpu-7", control_planes=[f"127.0.0.1:{agent_port}"], insecure=True,
        state_dir=str(tmp_path / "state"), weights_dir=str(tmp_path / "weights"),
        engines_dir=str(tmp_path / "engines"), engine_host="127.0.0.1", engine_user="",
        heartbeat_interval=Duration(seconds=0.1),
    )
    agent: Agent

    async def discover(**kw):
        return await discovery.discover(nvml=nvml, proc=str(tmp_path / "none"), sys=str(tmp_path / "none"),
                                        kernel_log="", **kw)

    async def sensors():
        return await discovery.sample_sensors(nvml=nvml, proc=str(tmp_path / "none"), kernel_log="")

    agent = Agent(config, discover_fn=discover, sensors_fn=sensors, host_sensors=HostSensors(str(tmp_path / "none")))
    return agent


async def get(http: aiohttp.ClientSession, url: str, accept: str | None = None) -> tuple[str, str]:
    async with http.get(url, headers={"Accept": accept} if accept else {}) as resp:
        assert resp.status == 200
        return await resp.text(), resp.headers["Content-Type"]


@pytest.mark.slow  # a whole server and an agent: about 8 s, most of it the new leader's wait for agents
async def test_the_servers_endpoint_has_the_gateway_the_scheduler_and_every_nodes_gpus(tmp_path):
    engine = await start(SimOptions(models=["m"], ttft=0.0, prefill_per_token=0.0, tpot=0.001, port=0),
                         shutdown_timeout=0.5)
    agent_port = free_port()
    config = parse_server_config({
        "store": {"dsn": str(tmp_path / "llmgw.db")}, "auth": {"keys_required": False},
        "listen": f"127.0.0.1:{free_port()}", "metrics_listen": f"127.0.0.1:{free_port()}",
        "admin_listen": f"127.0.0.1:{free_port()}", "agent_listen": f"127.0.0.1:{agent_port}", "agent_insecure": True,
        "control": {"lease_ttl": "1500ms", "reconcile_interval": "200ms"},
        "router": {"tag_labels": ["team"], "tag_label_values": 2},
        "models": [
            {"name": "m", "endpoints": [{"url": engine.url + "/v1"}], "slo": {"ttft_p99": "1500ms"}},
            # Nine cards on one node: no node has them, so every pass counts a placement that found no room.
            {"name": "huge", "engine": "sim", "profiles": [{"name": "d", "gpus": 9}]},
        ],
    })
    stop = asyncio.Event()
    server = asyncio.create_task(run_server(config, stop=stop, drain_seconds=1))
    agent = gpu_agent(tmp_path, agent_port)
    agent_task = None
    metrics_url = f"http://{config.metrics_listen}/metrics"
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                try:
                    async with http.get(f"http://{config.listen}/ready") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.02)
            agent_task = asyncio.create_task(agent.run())
            async with openai.AsyncOpenAI(base_url=f"http://{config.listen}/v1", api_key="none",
                                          max_retries=0) as client:
                for team in ("infra", "search", "ads", None):
                    stream = await client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "hello there"}], max_tokens=8,
                        stream=True, extra_headers={"x-llmgw-tags": f"team={team},app=x"} if team else {})
                    async for _ in stream:
                        pass
            text = ""
            for _ in range(600):  # the agent registers and sends a heartbeat; a pass runs
                text, content_type = await get(http, metrics_url)
                if (value(text, "llmgw_gpu_throttled", node="gpu-7", gpu="0", reason="hw_thermal") is not None
                        and value(text, "llmgw_placement_failures_total", model="huge", reason="no_fit")):
                    break
                await asyncio.sleep(0.05)
            assert content_type.startswith("text/plain; version=0.0.4")
            # The gateway: tag labels, two values of team and then `other`; none where the tag is not sent.
            assert value(text, "llmgw_requests_total", model="m", outcome="ok", team="infra") == 1
            assert value(text, "llmgw_requests_total", model="m", outcome="ok", team="search") == 1
            assert value(text, "llmgw_requests_total", model="m", outcome="ok", team="other") == 1
            assert value(text, "llmgw_requests_total", model="m", outcome="ok", team="") == 1
            assert value(text, "llmgw_output_tokens_per_second_count", model="m") == 4
            assert value(text, "llmgw_pool_saturation", model="m") == 0
            assert value(text, "llmgw_model_slo_seconds", model="m", kind="ttft_p99") == 1.5
            assert value(text, "llmgw_model_slo_seconds", model="m", kind="tpot_p99") is None  # not set
            # The scheduler, on the leader.
            assert value(text, "llmgw_leader") == 1
            assert value(text, "llmgw_lease_renewals_total") >= 0
            assert value(text, "llmgw_nodes", state="ready") == 1
            assert value(text, "llmgw_placement_failures_total", model="huge", reason="no_fit") >= 1
            assert value(text, "llmgw_reconcile_duration_seconds_count") >= 1
            # The agent's readings (its registration's, then each heartbeat's), relayed with the node's name.
            assert value(text, "llmgw_gpu_power_watts", node="gpu-7", gpu="0") == 69.0
            assert value(text, "llmgw_gpu_temperature_celsius", node="gpu-7", gpu="0") == 29.0
            assert value(text, "llmgw_gpu_throttled", node="gpu-7", gpu="3", reason="hw_thermal") == 1
            assert value(text, "llmgw_gpu_memory_total_bytes", node="gpu-7", gpu="7") == 81559 << 20
            assert value(text, "llmgw_gpu_nvlink_errors", node="gpu-7", gpu="0", kind="crc") == 7  # in heartbeats
            assert value(text, "llmgw_node_cpu_cores", node="gpu-7") >= 1
            assert value(text, "llmgw_node_engine_exits_total", node="gpu-7") == 0
            assert value(text, "llmgw_build_info", role="server") == 1
            assert value(text, "process_open_fds") > 0
            assert "_created" not in text
            assert promtool_problems(text) == []
            assert undeclared(text, "server") == []
            om, content_type = await get(http, metrics_url, OPENMETRICS)
            assert content_type.startswith("application/openmetrics-text")
            assert openmetrics_values(om)[("llmgw_gpu_power_watts", "0")] == 69.0
    finally:
        await agent.stop()
        if agent_task is not None:
            await asyncio.wait_for(agent_task, 10)
        stop.set()
        assert await asyncio.wait_for(server, 15) == 0
        await engine.close()
