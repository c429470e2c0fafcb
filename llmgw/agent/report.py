"""What the agent tells the control plane, built from what it reads: inventory, sensors, load.

Discovery's classes carry more than the wire does; these functions choose
and convert (MiB to bytes, health reasons to one sentence). Also here: the
node's CPU use between two heartbeats, an engine's busy count from its
Prometheus metrics (for draining), and the engine port range.
"""

from __future__ import annotations

import re
import socket
from typing import Any, Container, Iterable, Mapping

from llmgw.agent import discovery
from llmgw.config.units import ByteSize
from llmgw.wire import messages as wire

__all__ = ["wire_inventory", "wire_gpu_sensors", "CpuMeter", "busy_requests", "parse_port_range", "free_port",
           "engine_addresses"]

MIB = 1024 * 1024


def wire_inventory(inv: discovery.Inventory) -> wire.Inventory:
    cpu = wire.CpuInfo(cores=inv.cpu.usable_cores, model=inv.cpu.model) if inv.cpu else wire.CpuInfo()
    disks = tuple(
        wire.DiskFree(path=d.path, free_bytes=d.free_bytes or 0, total_bytes=d.total_bytes or 0) for d in inv.disks
    )
    gpus = []
    links = {n.gpu_index: n.active_links for n in inv.fabric.nvlink}
    for g in inv.gpus:
        gpus.append(wire.GpuInfo(
            index=g.index, uuid=g.uuid, name=g.name, gpu_class=g.gpu_class,
            memory_total_bytes=g.memory_total_mib * MIB, memory_used_bytes=(g.memory_used_mib or 0) * MIB,
            health=g.health, problem="; ".join(g.health_reasons), temperature_c=g.temperature_c,
            power_w=g.power_draw_w, utilisation_percent=g.utilization_gpu_pct,
            mig=tuple(wire.MigInstance(
                uuid=m.uuid, profile=m.profile, device=m.device, gpu_instance=m.gpu_instance_id or 0,
                compute_instance=m.compute_instance_id or 0, memory_total_bytes=m.memory_total_mib * MIB,
                gpu_class=m.gpu_class,
            ) for m in g.mig_instances),
            mig_mode=bool(g.mig_enabled), pcie_replays=g.pcie_replays, xid_errors=tuple(g.xid_errors),
            nvlink_links=links.get(g.index, 0),
        ))
    return wire.Inventory(
        cpu=cpu,
        memory_total_bytes=inv.memory.total_bytes if inv.memory else 0,
        memory_available_bytes=inv.memory.available_bytes if inv.memory else 0,
        disks=disks,
        gpus=tuple(gpus),
        fabrics=discovery.fabric_ids(inv.fabric.infiniband),
    )


def foreign_memory_bytes(g: discovery.GpuSensors, our_pids: Container[int], our_cards: Container[int] = ()
                         ) -> int | None:
    """What processes other than this agent's engines hold on the card: its used memory less what the
    engines' processes hold; None when the card's memory was not read, or when an engine of ours is there
    and what it holds is not known."""
    if g.memory_used_mib is None or (g.processes is None and g.index in our_cards):
        return None  # the card's processes cannot be told apart, and our engine is one of them
    procs = g.processes or ()
    if any(pid in our_pids and used is None for pid, used in procs):
        return None  # ours is there, holding an amount the driver does not say
    ours = sum(used or 0 for pid, used in procs if pid in our_pids)
    return max(0, g.memory_used_mib * MIB - ours)


def foreign_memory_problem(foreign: int | None, limit: int) -> str:
    """Why a card is degraded when others hold more than `limit` bytes of its memory; "" when they do not."""
    if foreign is None or foreign <= limit:
        return ""
    return (f"{foreign / (1 << 30):.1f} GiB of its memory is held by processes that are not llmgw's engines "
            f"(more than gpu_foreign_memory_limit, {ByteSize(limit)}): find them with nvidia-smi")


def _judged(g: discovery.GpuSensors, foreign: int | None, limit: int | None) -> tuple[str, str]:
    """The card's health and why, with the foreign memory verdict added."""
    reasons = list(g.health_reasons)
    health = g.health
    problem = foreign_memory_problem(foreign, limit) if limit is not None else ""
    if problem:
        reasons.append(problem)
        health = health if health == discovery.FAILED else discovery.DEGRADED
    return health, "; ".join(reasons)


def wire_gpu_sensors(sensors: discovery.Sensors, our_pids: Container[int] | None = None,
                     our_cards: Container[int] = (), *, foreign_limit: int | None = None
                     ) -> tuple[wire.GpuSensor, ...]:
    """The cards' readings for a heartbeat. `our_pids`: every process of this agent's engines, so memory they
    hold is not counted as another's (None: foreign memory is not measured); `our_cards`: the cards (by index)
    its engines were given, where memory cannot be put down to anyone when the processes are not listed.
    `foreign_limit`: the bytes others may hold before the card is reported degraded (agent.yaml
    gpu_foreign_memory_limit; None: not judged)."""
    out = []
    for g in sensors.gpus:
        foreign = foreign_memory_bytes(g, our_pids, our_cards) if our_pids is not None else None
        health, problem = _judged(g, foreign, foreign_limit)
        out.append(wire.GpuSensor(
            index=g.index, temperature_c=g.temperature_c, power_w=g.power_draw_w, power_limit_w=g.power_limit_w,
            utilisation_percent=g.utilization_gpu_pct,
            memory_used_bytes=g.memory_used_mib * MIB if g.memory_used_mib is not None else None,
            foreign_memory_bytes=foreign,
            throttle=tuple(g.throttle_reasons), ecc_uncorrected=g.ecc_uncorrected_volatile, health=health,
            problem=problem, pcie_replays=g.pcie_replays, xid_errors=tuple(g.xid_errors),
            memory_utilisation_percent=g.utilization_memory_pct, sm_clock_mhz=g.sm_clock_mhz,
            retired_pages_pending=g.retired_pages_pending, row_remap_pending=g.row_remap_pending,
            row_remap_failure=g.row_remap_failure, last_xid=g.xid_last_code, nvlink_errors=dict(g.nvlink_errors),
        ))
    return tuple(out)


class CpuMeter:
    """The whole node's CPU use since the last reading, from /proc/stat."""

    def __init__(self, proc: str = "/proc") -> None:
        self._path = f"{proc}/stat"
        self._last: tuple[int, int] | None = None

    def percent(self) -> float | None:
        try:
            with open(self._path) as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        total = sum(fields[:8])
        last, self._last = self._last, (idle, total)
        if last is None or total <= last[1]:
            return None
        return round(100.0 * (1 - (idle - last[0]) / (total - last[1])), 1)


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)")


def busy_requests(metrics_text: str, meanings: Mapping[str, str]) -> float | None:
    """Requests an engine is running or holding, from its metrics; None when none of its metrics is there."""
    wanted = {name for name, meaning in meanings.items() if meaning in ("running", "waiting")}
    total, seen = 0.0, False
    for line in metrics_text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) in wanted:
            try:
                total += float(m.group(3))
            except ValueError:
                continue
            seen = True
    return total if seen else None


def parse_port_range(text: str) -> range:
    """`20000-20999` as a range; ValueError in words otherwise."""
    m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", text or "")
    if not m:
        raise ValueError(f"engine_ports: expected FIRST-LAST like 20000-20999, got {text!r}")
    first, last = int(m.group(1)), int(m.group(2))
    if not (1024 <= first <= last <= 65535):
        raise ValueError(f"engine_ports: {text!r} must lie within 1024-65535, first before last")
    return range(first, last + 1)


def free_port(ports: range, taken: Iterable[int], host: str, *, start: int | None = None) -> int | None:
    """The first port of the range, from `start` round, that no shard has and nothing listens on."""
    taken = set(taken)
    span = list(ports)
    if start is not None and start in ports:
        i = span.index(start)
        span = span[i:] + span[:i]
    bind_host = host if host not in ("", "::") else "0.0.0.0"
    for port in span:
        if port in taken:
            continue
        family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            # A port an engine left in TIME_WAIT is free for the next one, which sets SO_REUSEADDR too.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((bind_host, port))
            except OSError:
                continue
        return port
    return None


def engine_addresses(engine_host: str, inv: discovery.Inventory | None) -> tuple[str, ...]:
    """Where the router reaches this node's engines: the one address they listen on, or every one the node has."""
    if engine_host not in ("", "0.0.0.0", "::"):
        return (engine_host,)
    found: list[Any] = list(inv.addresses) if inv is not None else []
    out = tuple(a.address for a in found if getattr(a, "address", None))
    return out or ("127.0.0.1",)
