"""Print what this node has: `python -m llmgw.agent.discovery [--json]`.

What the agent would register with, read the same way. Run it on a node to
check its GPUs, drivers and disks before (or instead of) starting the agent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any, Sequence

from . import Inventory, Sensors, discover, sample_sensors
from .disk import DEFAULT_PATHS
from .gpus import Gpu


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _v(value: Any, unit: str = "", fmt: str = "g") -> str:
    """A reading, or "-" where there is none (never a made-up zero)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:{fmt}}{unit}"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _gpu_lines(g: Gpu) -> list[str]:
    mig = "no MIG" if g.mig_enabled is None else ("MIG on" if g.mig_enabled else "MIG off")
    if g.mig_enabled is not None and g.mig_pending_enabled != g.mig_enabled:
        mig += f" (after reset: {'on' if g.mig_pending_enabled else 'off'})"
    lines = [
        f"  [{g.index}] {g.gpu_class:<18} {g.name}  {g.pci_bus_id or '-'}  {g.uuid or '-'}",
        f"      memory {_v(g.memory_used_mib)}/{g.memory_total_mib} MiB   compute {_v(g.compute_capability, fmt='')}"
        f"   driver {_v(g.driver_version, fmt='')}   {mig}",
        f"      {_v(g.temperature_c, ' °C')}   power {_v(g.power_draw_w)}/{_v(g.power_limit_w)} W"
        f"   util gpu {_v(g.utilization_gpu_pct, '%')} mem {_v(g.utilization_memory_pct, '%')}"
        f"   sm {_v(g.sm_clock_mhz, ' MHz')}   throttle {','.join(g.throttle_reasons) or 'none'}",
        f"      ECC uncorrected {_v(g.ecc_uncorrected_volatile)}   retired pages pending {_v(g.retired_pages_pending)}"
        f"   rows remap pending {_v(g.row_remap_pending)} failed {_v(g.row_remap_failure)}",
    ]
    for m in g.mig_instances:
        lines.append(
            f"      mig {g.index}/mig{m.device} (device {g.mig_placement_index(m)}) {m.gpu_class}  {m.uuid}"
            f"  {_v(m.memory_used_mib)}/{m.memory_total_mib} MiB  gi {_v(m.gpu_instance_id)} ci {_v(m.compute_instance_id)}")
    lines.append(f"      health {g.health.upper()}")
    lines.extend(f"        - {r}" for r in g.health_reasons)
    return lines


def render(inv: Inventory) -> str:
    """The inventory for a person to read."""
    out = [f"node       {inv.hostname}"]
    out.append("addresses  " + (", ".join(f"{a.address} ({a.interface})" for a in inv.addresses) or "none"))
    if inv.cpu:
        c = inv.cpu
        quota = f"{c.cgroup_quota_cores:g} cores" if c.cgroup_quota_cores is not None else "none"
        out.append(f"cpu        {c.model} ({c.architecture}): {_n(c.sockets, 'socket')}, {_n(c.physical_cores, 'core')}, "
                   f"{_n(c.logical_cores, 'thread')}; usable {c.usable_cores}, cgroup quota {quota}, "
                   f"plan with {c.effective_cores:g}")
    if inv.memory:
        m = inv.memory
        limit = _size(m.cgroup_limit_bytes) if m.cgroup_limit_bytes is not None else "none"
        out.append(f"memory     {_size(m.total_bytes)} total, {_size(m.available_bytes)} available, "
                   f"swap {_size(m.swap_free_bytes)}/{_size(m.swap_total_bytes)} free; cgroup limit {limit}")
    for d in inv.disks:
        where = f"{d.path}" + (f" (measured at {d.measured_path})" if d.measured_path != d.path else "")
        if d.error:
            out.append(f"disk       {d.role:<8} {where}: {d.error}")
        else:
            out.append(f"disk       {d.role:<8} {where} on {d.mount_point or '?'}: "
                       f"{_size(d.free_bytes)} free of {_size(d.total_bytes)}")
    driver = f", driver {inv.driver_version}" if inv.driver_version else ""
    out.append(f"gpus       {len(inv.gpus)} from {inv.gpu_source}{driver}  [{inv.gpu_source_detail}]")
    for g in inv.gpus:
        out.extend(_gpu_lines(g))
    if inv.gpus:
        classes: dict[str, int] = {}
        for g in inv.gpus:
            for cls in [m.gpu_class for m in g.mig_instances] or ([] if g.mig_enabled else [g.gpu_class]):
                classes[cls] = classes.get(cls, 0) + 1
        out.append("classes    " + (", ".join(f"{n} × {c}" for c, n in sorted(classes.items())) or "none usable"))
    if inv.fabric.nvlink:
        out.append("nvlink     " + ("GPUs joined by NVSwitch" if inv.fabric.nvswitch else "direct links between GPUs"))
        for n in inv.fabric.nvlink:
            ends = [f"{n.switch_links} to switches"] if n.switch_links else []
            if n.peers:
                ends.append("to GPU " + ", ".join(map(str, n.peers)))
            if n.other_links:
                ends.append(f"{n.other_links} elsewhere")
            out.append(f"  [{n.gpu_index}] {_n(n.active_links, 'active link')}: {'; '.join(ends)}")
    else:
        out.append("nvlink     none seen" + ("" if inv.gpu_source == "nvml" else " (read from NVML only)"))
    if inv.fabric.infiniband:
        for p in inv.fabric.infiniband:
            out.append(f"rdma       {p.device}/{p.port} {p.state} {p.physical_state} {p.rate or '-'} {p.link_layer}"
                       f"  pci {p.pci_bus_id or '-'} numa {_v(p.numa_node)}")
    else:
        out.append("rdma       none")
    out.append("errors     " + ("none" if not inv.errors else ""))
    out.extend(f"  - {e}" for e in inv.errors)
    return "\n".join(out)


def render_sensors(s: Sensors) -> str:
    load = " ".join(f"{x:g}" for x in s.load_average) if s.load_average else "-"
    out = [f"sensors    from {s.gpu_source}; memory available {_size(s.memory_available_bytes)}; load {load}"]
    for g in s.gpus:
        out.append(f"  [{g.index}] {_v(g.temperature_c, ' °C')} {_v(g.power_draw_w)}/{_v(g.power_limit_w)} W "
                   f"util {_v(g.utilization_gpu_pct, '%')} mem {_v(g.memory_used_mib)} MiB "
                   f"throttle {','.join(g.throttle_reasons) or 'none'} ECC {_v(g.ecc_uncorrected_volatile)} "
                   f"health {g.health}" + "".join(f"\n        - {r}" for r in g.health_reasons))
    out.extend(f"  error: {e}" for e in s.errors)
    return "\n".join(out)


def _paths(items: Sequence[str]) -> dict[str, str]:
    paths = dict(DEFAULT_PATHS)
    for item in items:
        role, sep, path = item.partition("=")
        if not sep or not role or not path:
            raise ValueError(f"--path {item!r}: expected ROLE=DIR, like weights=/data/weights")
        paths[role] = path
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmgw.agent.discovery",
                                     description="Print what this node has, as the llmgw agent reports it.")
    parser.add_argument("--json", action="store_true", help="print the inventory as JSON, as it goes on the wire")
    parser.add_argument("--path", action="append", default=[], metavar="ROLE=DIR",
                        help="a directory whose disk to report (default: state and weights under /var/lib/llmgw)")
    parser.add_argument("--source", choices=("auto", "nvml", "nvidia-smi"), default="auto",
                        help="where to read GPUs from (default: NVML, else nvidia-smi)")
    parser.add_argument("--sensors", action="store_true", help="also read the heartbeat's sensors once")
    args = parser.parse_args(argv)
    try:
        paths = _paths(args.path)
    except ValueError as e:
        parser.error(str(e))

    async def run() -> tuple[Inventory, Sensors | None]:
        inv = await discover(paths, source=args.source)
        sensors = await sample_sensors(source=args.source) if args.sensors else None
        return inv, sensors

    inv, sensors = asyncio.run(run())
    if args.json:
        doc: dict[str, Any] = inv.to_dict()
        if sensors is not None:
            doc = {"inventory": doc, "sensors": sensors.to_dict()}
        text = json.dumps(doc, indent=2)
    else:
        text = render(inv) + ("\n" + render_sensors(sensors) if sensors is not None else "")
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Piped into `head`: what was wanted was read. Quiet the exit's own flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
