"""The agent's own /metrics (agent.yaml metrics_listen) on recorded NVML and nvidia-smi outputs: every
llmgw_gpu_* the cards report, the node's heat, power and disks, clean under `promtool check metrics`."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
import pytest

from llmgw.agent import discovery
from llmgw.agent.agent import Agent
from llmgw.agent.discovery.thermal import HostSensors
from llmgw.config.agent import AgentConfig
from llmgw.config.units import Duration

from scrape import OPENMETRICS, discovery_fakes, openmetrics_values, promtool_problems, undeclared, value

FAKES = discovery_fakes()
MIB = 1 << 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def recorded_sys(root: Path) -> Path:
    """A Xeon's hwmon (coretemp, and a board chip with an inlet sensor) and RAPL (a package and its core
    subdomain), as sysfs lays them out."""
    def put(rel: str, text: str) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")

    put("class/hwmon/hwmon0/name", "coretemp")
    put("class/hwmon/hwmon0/temp1_label", "Package id 0")
    put("class/hwmon/hwmon0/temp1_input", "61000")
    put("class/hwmon/hwmon0/temp2_label", "Core 0")
    put("class/hwmon/hwmon0/temp2_input", "66000")
    put("class/hwmon/hwmon1/name", "nct6775")
    put("class/hwmon/hwmon1/temp1_label", "SYSTIN")
    put("class/hwmon/hwmon1/temp1_input", "24500")
    put("class/powercap/intel-rapl:0/energy_uj", "262143000000")
    put("class/powercap/intel-rapl:0/max_energy_range_uj", "262143328850")
    put("class/powercap/intel-rapl:0:0/energy_uj", "1000")  # the cores: inside the package's count
    put("class/powercap/intel-rapl:0:0/max_energy_range_uj", "262143328850")
    return root


def agent_on(tmp_path: Path, nvml, smi, *, kernel_log: str = "", proc: Path | None = None, clock=None) -> Agent:
    config = AgentConfig(
        node_id="gpu-7", control_planes=[f"127.0.0.1:{free_port()}"], insecure=True,  # nobody listens there
        state_dir=str(tmp_path / "state"), weights_dir=str(tmp_path / "weights"),
        engines_dir=str(tmp_path / "engines"), engine_host="127.0.0.1", engine_user="",
        heartbeat_interval=Duration(seconds=0.01), metrics_listen=f"127.0.0.1:{free_port()}",
    )
    proc = proc or tmp_path / "proc"
    agent: Agent

    async def discover(**kw):
        return await discovery.discover(nvml=nvml, smi_runner=smi, proc=str(proc), sys=str(tmp_path / "none"),
                                        kernel_log=kernel_log, **kw)

    async def sensors():
        return await discovery.sample_sensors(
            nvml=nvml, smi_runner=smi, proc=str(proc), kernel_log=kernel_log,
            bus_ids={g.index: g.pci_bus_id for g in agent.inventory.gpus})

    agent = Agent(config, discover_fn=discover, sensors_fn=sensors,
                  host_sensors=HostSensors(str(recorded_sys(tmp_path / "sys")), clock=clock or Clock()))
    return agent


async def scrape(agent: Agent, accept: str | None = None) -> tuple[str, str]:
    url = f"http://{agent.config.metrics_listen}/metrics"
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            try:
                async with http.get(url, headers={"Accept": accept} if accept else {}) as resp:
                    assert resp.status == 200
                    return await resp.text(), resp.headers["Content-Type"]
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.02)
    raise AssertionError(f"nothing listens on {url}")


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "uptime").write_text("9200.00 100.00\n")
    (proc / "loadavg").write_text("3.25 2.00 1.50 2/900 4242\n")
    (proc / "meminfo").write_text("MemTotal:       1056000000 kB\nMemAvailable:    900000000 kB\n")
    return proc


async def test_an_h100_nodes_cards_read_through_nvml(tmp_path, proc):
    clock = Clock()
    agent = agent_on(tmp_path, FAKES.FakeNvml(FAKES.load_recording("nvml_h100x8.json")), None, proc=proc,
                     clock=clock)
    task = asyncio.create_task(agent.run())
    try:
        text, content_type = await scrape(agent)
        assert content_type.startswith("text/plain; version=0.0.4")
        gpu0 = {"node": "gpu-7", "gpu": "0"}
        assert value(text, "llmgw_gpu_temperature_celsius", **gpu0) == 29.0
        assert value(text, "llmgw_gpu_power_watts", **gpu0) == 69.0
        assert value(text, "llmgw_gpu_power_limit_watts", **gpu0) == 700.0
        assert value(text, "llmgw_gpu_memory_total_bytes", **gpu0) == 81559 * MIB
        assert value(text, "llmgw_gpu_memory_used_bytes", **gpu0) == 1 * MIB
        assert value(text, "llmgw_gpu_info", **gpu0, gpu_class="h100-80gb") == 1
        assert value(text, "llmgw_gpu_throttled", **gpu0, reason="hw_thermal") == 0
        assert value(text, "llmgw_gpu_health", **gpu0, health="ok") == 1
        # Card 3 is held down by heat; card 5 has a memory row waiting for a reset.
        assert value(text, "llmgw_gpu_throttled", node="gpu-7", gpu="3", reason="hw_thermal") == 1
        assert value(text, "llmgw_gpu_health", node="gpu-7", gpu="3", health="degraded") == 1
        assert value(text, "llmgw_gpu_remap_pending", node="gpu-7", gpu="5") == 1
        assert value(text, "llmgw_gpu_remap_pending", **gpu0) == 0
        # NVLink errors by kind, summed over each card's links: card 0 has a few, card 4 more, card 1 none.
        assert value(text, "llmgw_gpu_nvlink_errors", **gpu0, kind="crc") == 7
        assert value(text, "llmgw_gpu_nvlink_errors", **gpu0, kind="replay") == 1
        assert value(text, "llmgw_gpu_nvlink_errors", **gpu0, kind="recovery") == 0
        assert value(text, "llmgw_gpu_nvlink_errors", node="gpu-7", gpu="4", kind="crc") == 40
        assert value(text, "llmgw_gpu_nvlink_errors", node="gpu-7", gpu="1", kind="crc") == 0
        assert len([line for line in text.splitlines() if line.startswith("llmgw_gpu_temperature_celsius{")]) == 8
        # The node: load, memory, the package's temperature (not the hotter core), the inlet sensor.
        node = {"node": "gpu-7"}
        assert value(text, "llmgw_node_load1", **node) == 3.25
        assert value(text, "llmgw_node_cpu_temperature_celsius", **node) == 61.0
        assert value(text, "llmgw_node_inlet_temperature_celsius", **node) == 24.5
        assert value(text, "llmgw_node_disk_total_bytes", **node, path=str(tmp_path / "weights")) > 0
        assert value(text, "llmgw_node_engines", **node) is None  # it runs none
        assert value(text, "llmgw_node_engine_exits_total", **node) == 0
        # RAPL: the package's counter wrapped between two readings two seconds apart; 300 W, cores not added.
        assert value(text, "llmgw_node_cpu_power_watts", **node) is None  # one reading says nothing yet
        energy = tmp_path / "sys/class/powercap/intel-rapl:0/energy_uj"
        energy.write_text(str(600_000_000 - (262143328850 - 262143000000)) + "\n")
        (tmp_path / "sys/class/powercap/intel-rapl:0:0/energy_uj").write_text("500000000\n")
        clock.now += 2
        text, _ = await scrape(agent)
        assert value(text, "llmgw_node_cpu_power_watts", **node) == 300.0
        assert value(text, "llmgw_build_info", role="agent") == 1
        assert value(text, "process_resident_memory_bytes") > 0
        assert "_created" not in text
        assert promtool_problems(text) == []
        assert undeclared(text, "agent") == []
        # OpenMetrics for a scraper that asks for it, as Prometheus does.
        om, content_type = await scrape(agent, OPENMETRICS)
        assert content_type.startswith("application/openmetrics-text") and om.rstrip().endswith("# EOF")
        assert openmetrics_values(om)[("llmgw_gpu_temperature_celsius", "0")] == 29.0
    finally:
        await agent.stop()
        await asyncio.wait_for(task, 10)


async def test_xid_errors_and_mig_cards_read_through_nvidia_smi(tmp_path, proc):
    smi = FAKES.FakeSmi(open(f"{FAKES.DATA}/smi_a100x2_mig.csv").read(),
                        open(f"{FAKES.DATA}/smi_a100x2_mig.L.txt").read())
    kernel_log = open(f"{FAKES.DATA}/dmesg_xid.txt").read()
    agent = agent_on(tmp_path, FAKES.FakeNvml(FAKES.load_recording("nvml_library_missing.json")), smi,
                     kernel_log=kernel_log, proc=proc)
    task = asyncio.create_task(agent.run())
    try:
        text, _ = await scrape(agent)
        card0, card1 = {"node": "gpu-7", "gpu": "0"}, {"node": "gpu-7", "gpu": "1"}
        # Card 0: an MMU fault (31) and a row marked for remapping (63) in the last 15 minutes.
        assert value(text, "llmgw_gpu_xid_errors", **card0) == 2
        assert value(text, "llmgw_gpu_last_xid", **card0) == 63
        assert value(text, "llmgw_gpu_health", **card0, health="degraded") == 1
        # Card 1 fell off the bus.
        assert value(text, "llmgw_gpu_last_xid", **card1) == 79
        assert value(text, "llmgw_gpu_health", **card1, health="failed") == 1
        # In MIG mode no driver measures utilisation: the series is absent, not 0.
        assert value(text, "llmgw_gpu_utilization_percent", **card0) is None
        assert value(text, "llmgw_gpu_info", **card0) == 1
        # These cards have no NVLink (nvidia-smi nvlink -e lists no links): no such series, not zeros.
        assert "llmgw_gpu_nvlink_errors{" not in text
        assert promtool_problems(text) == []
        assert undeclared(text, "agent") == []
    finally:
        await agent.stop()
        await asyncio.wait_for(task, 10)
