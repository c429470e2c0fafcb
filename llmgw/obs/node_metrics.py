"""`llmgw_gpu_*` and `llmgw_node_*`: what a node's agent reads, as metrics, labelled by node.

One function for both places they are served: the agent's own listener (its inventory and the heartbeat
it last built) and the leading control plane's (every node's inventory and last heartbeat, as the
inventory keeps them). Both hold the same wire classes, so a node's series read alike wherever they are
scraped. A reading the agent did not send (None) is left out, never sent as 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from llmgw.obs.metric_defs import MetricDef, for_role
from llmgw.wire.messages import GpuInfo, GpuSensor, Heartbeat

#: The clock event reasons an agent reports (llmgw/agent/discovery/gpus.py THROTTLE_BITS): each card has a
#: series for each, 0 or 1, so an alert can tell "not throttled" from "not read".
THROTTLE_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")
HEALTH_STATES = ("ok", "degraded", "failed")


@attrs.frozen
class NodeReading:
    """One node as last heard: its cards (inventory) and its last heartbeat (None: none yet)."""

    node: str
    gpus: Sequence[GpuInfo] = ()
    cores: int = 0
    memory_total_bytes: int = 0
    heartbeat: Heartbeat | None = None


class _Families:
    """A family per node and GPU metric, made from its definition."""

    def __init__(self) -> None:
        self.by_name: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for d in for_role("agent"):
            if d.section in ("GPUs", "Nodes"):
                self.by_name[d.name] = _family(d)

    def add(self, name: str, labels: Sequence[str], value: float | int | bool | None) -> None:
        if value is None:
            return
        self.by_name[name].add_metric(list(labels), float(value))


def _family(d: MetricDef) -> GaugeMetricFamily | CounterMetricFamily:
    if d.type == "counter":
        return CounterMetricFamily(d.family, d.help, labels=list(d.labels))
    return GaugeMetricFamily(d.family, d.help, labels=list(d.labels))


def node_families(readings: Iterable[NodeReading]) -> list[GaugeMetricFamily | CounterMetricFamily]:
    """Every GPU and node family for these nodes (families without samples included, so a scrape always
    describes the same metrics)."""
    f = _Families()
    for r in readings:
        hb = r.heartbeat
        sensors: dict[int, GpuSensor] = {s.index: s for s in (hb.gpus if hb is not None else ())}
        for g in r.gpus:
            _gpu(f, r.node, g, sensors.get(g.index))
        node = [r.node]
        f.add("llmgw_node_cpu_cores", node, r.cores or None)
        f.add("llmgw_node_memory_total_bytes", node, r.memory_total_bytes or None)
        if hb is None:
            continue
        f.add("llmgw_node_cpu_utilization_percent", node, hb.cpu_percent)
        f.add("llmgw_node_load1", node, hb.load_1m)
        f.add("llmgw_node_memory_available_bytes", node, hb.memory_available_bytes)
        for d in hb.disks:
            f.add("llmgw_node_disk_total_bytes", [r.node, d.path], d.total_bytes or None)
            f.add("llmgw_node_disk_free_bytes", [r.node, d.path], d.free_bytes if d.total_bytes else None)
        f.add("llmgw_node_cpu_temperature_celsius", node, hb.cpu_temperature_c)
        f.add("llmgw_node_inlet_temperature_celsius", node, hb.inlet_temperature_c)
        f.add("llmgw_node_cpu_power_watts", node, hb.cpu_power_w)
        states: dict[str, int] = {}
        for shard in hb.shards:
            states[shard.state or "unknown"] = states.get(shard.state or "unknown", 0) + 1
        for state, count in sorted(states.items()):
            f.add("llmgw_node_engines", [r.node, state], count)
        f.add("llmgw_node_engine_exits_total", node, hb.engine_exits)
    return list(f.by_name.values())


def _gpu(f: _Families, node: str, g: GpuInfo, s: GpuSensor | None) -> None:
    card = [node, str(g.index)]
    f.add("llmgw_gpu_info", [*card, g.uuid, g.name, g.gpu_class], 1)
    f.add("llmgw_gpu_memory_total_bytes", card, g.memory_total_bytes or None)
    if s is None:  # no heartbeat yet: what the registration said
        f.add("llmgw_gpu_memory_used_bytes", card, g.memory_used_bytes)
        f.add("llmgw_gpu_temperature_celsius", card, g.temperature_c)
        f.add("llmgw_gpu_power_watts", card, g.power_w)
        f.add("llmgw_gpu_utilization_percent", card, g.utilisation_percent)
        f.add("llmgw_gpu_pcie_replays_total", card, g.pcie_replays)
        _health(f, card, g.health)
        return
    f.add("llmgw_gpu_memory_used_bytes", card, s.memory_used_bytes)
    f.add("llmgw_gpu_utilization_percent", card, s.utilisation_percent)
    f.add("llmgw_gpu_memory_utilization_percent", card, s.memory_utilisation_percent)
    f.add("llmgw_gpu_temperature_celsius", card, s.temperature_c)
    f.add("llmgw_gpu_power_watts", card, s.power_w)
    f.add("llmgw_gpu_power_limit_watts", card, s.power_limit_w)
    f.add("llmgw_gpu_sm_clock_mhz", card, s.sm_clock_mhz)
    for reason in THROTTLE_REASONS:
        f.add("llmgw_gpu_throttled", [*card, reason], reason in s.throttle)
    f.add("llmgw_gpu_ecc_errors", card, s.ecc_uncorrected)
    f.add("llmgw_gpu_xid_errors", card, len(s.xid_errors))
    f.add("llmgw_gpu_last_xid", card, s.last_xid)
    f.add("llmgw_gpu_pcie_replays_total", card, s.pcie_replays)
    for kind, count in sorted(s.nvlink_errors.items()):
        f.add("llmgw_gpu_nvlink_errors", [*card, kind], count)
    f.add("llmgw_gpu_remap_pending", card, s.row_remap_pending)
    f.add("llmgw_gpu_remap_failure", card, s.row_remap_failure)
    f.add("llmgw_gpu_retirement_pending", card, s.retired_pages_pending)
    f.add("llmgw_gpu_foreign_memory_bytes", card, s.foreign_memory_bytes)
    _health(f, card, s.health)


def _health(f: _Families, card: list[str], health: str) -> None:
    for state in HEALTH_STATES:
        f.add("llmgw_gpu_health", [*card, state], health == state)


class NodeCollector:
    """A prometheus_client collector over whatever `readings()` gives at scrape time."""

    def __init__(self, readings) -> None:
        self.readings = readings

    def describe(self):
        return []

    def collect(self):
        yield from node_families(self.readings())
