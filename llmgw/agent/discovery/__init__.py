"""What a node has: CPUs, memory, disks, GPUs, NVLink and InfiniBand.

`discover()` reads the whole inventory once, for the agent's Register
message; `sample_sensors()` reads what changes from moment to moment, for
heartbeats. Both are async and run the blocking reads (NVML, /proc, statvfs)
in the default executor.

GPUs come from NVML where the driver's library loads, from nvidia-smi where
it does not, and are "none" where neither exists: a CPU node, which is not
an error. `nvml=` and `smi_runner=` replace the real pynvml module and
nvidia-smi, so tests feed recorded outputs. The result is attrs classes that
`attrs.asdict()` turns into plain dicts for the wire.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Mapping

import attrs

from .cpu import CpuInfo, read_cpu
from .disk import DEFAULT_PATHS, DiskInfo, read_disks
from .fabric import Fabric, GpuNvLinks, IbPort, fabric_ids, nvlink_topology, read_infiniband
# The class function is not re-exported: it would hide the gpu_class module.
from .gpu_class import is_mig_class, mig_class
from .gpus import DEGRADED, FAILED, HOT_C, OK, Gpu, GpuSensors, MigInstance, add_findings, assess_health
from .host import NetAddress, addresses, hostname
from .memory import MemoryInfo, available_bytes, read_memory
from .nvidia_smi import Runner, SmiError, SmiMissing, read_smi, run_nvidia_smi, sample_smi
from .nvml import NvmlUnavailable, load_pynvml, read_nvml, sample_nvml
from .xid import parse_xid_lines, read_kernel_log, read_uptime, xid_findings

__all__ = [
    "CpuInfo", "DiskInfo", "Fabric", "Gpu", "GpuNvLinks", "GpuSensors", "IbPort", "Inventory", "MemoryInfo",
    "MigInstance", "NetAddress", "Sensors", "OK", "DEGRADED", "FAILED", "SOURCES",
    "assess_health", "discover", "fabric_ids", "is_mig_class", "mig_class", "sample_sensors",
]

#: Where the GPUs were read from: the driver's library, its command, or nowhere.
SOURCES = ("nvml", "nvidia-smi", "none")


@attrs.frozen(kw_only=True)
class Inventory:
    """Everything a node has, as it registers with the control plane."""

    hostname: str
    addresses: tuple[NetAddress, ...]  #: non-loopback
    cpu: CpuInfo | None
    memory: MemoryInfo | None
    disks: tuple[DiskInfo, ...]
    gpus: tuple[Gpu, ...]
    gpu_source: str  #: "nvml" | "nvidia-smi" | "none"
    gpu_source_detail: str  #: why that source, in words: what was tried and what it said
    driver_version: str | None
    fabric: Fabric
    errors: tuple[str, ...] = ()  #: what could not be read; a node without GPUs is not an error

    def to_dict(self) -> dict[str, Any]:
        """Plain dicts and lists, for JSON and msgpack (attrs.asdict keeps tuples)."""
        return attrs.asdict(self, value_serializer=_lists)


@attrs.frozen(kw_only=True)
class Sensors:
    """What changes between heartbeats."""

    gpus: tuple[GpuSensors, ...]
    gpu_source: str
    memory_available_bytes: int | None
    load_average: tuple[float, float, float] | None
    errors: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain dicts and lists, for JSON and msgpack."""
        return attrs.asdict(self, value_serializer=_lists)


def _lists(_inst: Any, _field: Any, value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


@attrs.frozen
class _GpuResult:
    source: str
    detail: str
    gpus: tuple[Gpu, ...] = ()
    driver_version: str | None = None
    nvlink: tuple[GpuNvLinks, ...] = ()
    errors: tuple[str, ...] = ()


async def _gpus(nvml: Any, smi_runner: Runner | None, source: str, hot_c: float) -> _GpuResult:
    loop = asyncio.get_running_loop()
    tried: list[str] = []
    errors: list[str] = []
    if source in ("auto", "nvml"):
        module = nvml if nvml is not None else await loop.run_in_executor(None, load_pynvml)
        try:
            report = await loop.run_in_executor(None, read_nvml, module, hot_c)
        except NvmlUnavailable as e:
            tried.append(f"NVML: {e}")
            if not e.quiet:
                errors.append(f"NVML: {e}")
        except Exception as e:  # noqa: BLE001 - a driver's surprise must not stop the agent
            tried.append(f"NVML: {e!r}")
            errors.append(f"NVML failed unexpectedly: {e!r}")
        else:
            topology = nvlink_topology(report.gpus, report.nvlinks)
            return _GpuResult("nvml", "; ".join(tried + [f"NVML: {len(report.gpus)} GPUs"]), report.gpus,
                              report.driver_version, topology, tuple(errors) + report.errors)
    if source in ("auto", "nvidia-smi"):
        try:
            smi = await read_smi(smi_runner or run_nvidia_smi, hot_c)
        except SmiMissing as e:
            tried.append(f"nvidia-smi: {e}")
        except (SmiError, OSError) as e:
            tried.append(f"nvidia-smi: {e}")
            errors.append(f"nvidia-smi: {e}")
        else:
            driver = next((g.driver_version for g in smi.gpus if g.driver_version), None)
            return _GpuResult("nvidia-smi", "; ".join(tried + [f"nvidia-smi: {len(smi.gpus)} GPUs"]), smi.gpus,
                              driver, (), tuple(errors) + smi.errors)
    return _GpuResult("none", "; ".join(tried) or f"not asked (source={source})", errors=tuple(errors))


def _host(paths: Mapping[str, str] | None, proc: str, sys: str, cgroup_root: str) -> dict[str, Any]:
    """The blocking reads of the host itself, each guarded."""
    out: dict[str, Any] = {"errors": []}

    def guarded(key: str, what: str, fn: Any, default: Any) -> None:
        try:
            out[key] = fn()
        except Exception as e:  # noqa: BLE001 - one unreadable file must not hide the rest
            out[key] = default
            out["errors"].append(f"{what}: {e}")

    guarded("hostname", "hostname", hostname, "unknown")
    guarded("addresses", "addresses", lambda: addresses(proc=proc), ())
    guarded("cpu", "cpu", lambda: read_cpu(proc=proc, sys=sys, cgroup_root=cgroup_root), None)
    guarded("memory", "memory", lambda: read_memory(proc=proc, cgroup_root=cgroup_root), None)
    guarded("disks", "disks", lambda: read_disks(paths), ())
    guarded("infiniband", "infiniband", lambda: read_infiniband(os.path.join(sys, "class/infiniband"), proc), ())
    guarded("uptime", "uptime", lambda: read_uptime(proc), None)
    for d in out["disks"]:
        if d.error:
            out["errors"].append(f"disk {d.role}: {d.error}")
    return out


async def _kernel_log(kernel_log: Any) -> str:
    if kernel_log is None:
        return await read_kernel_log()
    if isinstance(kernel_log, str):
        return kernel_log
    return await kernel_log()


def _with_xids(readings: tuple[Any, ...], text: str, bus_ids: Mapping[int, str], uptime: float | None) -> tuple:
    """Each card's reading with its recent XIDs and what they make of its health."""
    if not text:
        return readings
    found = xid_findings(parse_xid_lines(text), list(bus_ids.values()), now_uptime_s=uptime)
    out = []
    for r in readings:
        x = found.get(bus_ids.get(r.index, ""))
        if x is None:
            out.append(r)
            continue
        out.append(add_findings(attrs.evolve(r, xid_errors=x.codes, xid_last=x.last_text,
                                                xid_last_code=x.last_code), x.findings))
    return tuple(out)


async def discover(
    paths: dict[str, str] | None = None,
    nvml: Any = None,
    smi_runner: Runner | None = None,
    *,
    source: str = "auto",
    proc: str = "/proc",
    sys: str = "/sys",
    cgroup_root: str = "/sys/fs/cgroup",
    kernel_log: Any = None,
    hot_c: float = HOT_C,
) -> Inventory:
    """Everything this node has.

    paths: the directories whose disks matter, by role (default: the
    agent's state and weights directories). nvml: a pynvml-shaped module
    (default: pynvml itself). smi_runner: runs nvidia-smi (see nvidia_smi.py).
    source: "auto" (NVML, then nvidia-smi), or only "nvml" or "nvidia-smi".
    proc, sys, cgroup_root: where the kernel's files are, for recorded copies.
    kernel_log: the kernel log's text, or a coroutine function giving it (default: dmesg), read for
    XID errors when there are GPUs.
    hot_c: the temperature (°C) from which a card is degraded (agent.yaml gpu_degraded_temperature_c).
    """
    if source not in ("auto", "nvml", "nvidia-smi"):
        raise ValueError(f"source: expected auto, nvml or nvidia-smi, got {source!r}")
    loop = asyncio.get_running_loop()
    host, gpus = await asyncio.gather(
        loop.run_in_executor(None, _host, paths if paths is not None else DEFAULT_PATHS, proc, sys, cgroup_root),
        _gpus(nvml, smi_runner, source, hot_c),
    )
    cards = gpus.gpus
    if cards:
        cards = _with_xids(cards, await _kernel_log(kernel_log), {g.index: g.pci_bus_id for g in cards},
                           host.get("uptime"))
    return Inventory(
        hostname=host["hostname"],
        addresses=host["addresses"],
        cpu=host["cpu"],
        memory=host["memory"],
        disks=host["disks"],
        gpus=cards,
        gpu_source=gpus.source,
        gpu_source_detail=gpus.detail,
        driver_version=gpus.driver_version,
        fabric=Fabric(nvlink=gpus.nvlink, nvswitch=any(n.switch_links for n in gpus.nvlink),
                      infiniband=host["infiniband"]),
        errors=tuple(host["errors"]) + gpus.errors,
    )


def _load_average(proc: str) -> tuple[float, float, float] | None:
    try:
        with open(os.path.join(proc, "loadavg")) as f:
            a, b, c = (float(x) for x in f.read().split()[:3])
    except (OSError, ValueError):
        return None
    return (a, b, c)


async def sample_sensors(
    nvml: Any = None,
    smi_runner: Runner | None = None,
    *,
    source: str = "auto",
    proc: str = "/proc",
    cgroup_root: str = "/sys/fs/cgroup",
    kernel_log: Any = None,
    bus_ids: Mapping[int, str] | None = None,
    hot_c: float = HOT_C,
) -> Sensors:
    """The fast-changing readings, for a heartbeat: GPU heat, power, load, memory and health.

    Same sources as discover(), tried in the same order. Each call opens
    and closes NVML; a heartbeat every few seconds can afford that.
    bus_ids: each card's PCI address by index (from discover()), to match
    the kernel log's XID lines to cards; without them XIDs are not read. hot_c: as for discover().
    """
    loop = asyncio.get_running_loop()
    errors: list[str] = []
    gpus: tuple[GpuSensors, ...] = ()
    used = "none"
    if source in ("auto", "nvml"):
        module = nvml if nvml is not None else await loop.run_in_executor(None, load_pynvml)
        try:
            gpus, errs = await loop.run_in_executor(None, sample_nvml, module, hot_c)
            used = "nvml"
            errors.extend(errs)
        except NvmlUnavailable as e:
            if not e.quiet:
                errors.append(f"NVML: {e}")
        except Exception as e:  # noqa: BLE001
            errors.append(f"NVML failed unexpectedly: {e!r}")
    if used == "none" and source in ("auto", "nvidia-smi"):
        try:
            gpus, notes = await sample_smi(smi_runner or run_nvidia_smi, hot_c)
            used = "nvidia-smi"
            errors.extend(notes)
        except SmiMissing:
            pass
        except (SmiError, OSError) as e:
            errors.append(f"nvidia-smi: {e}")

    def host() -> tuple[int | None, tuple[float, float, float] | None]:
        return available_bytes(proc=proc, cgroup_root=cgroup_root), _load_average(proc)

    mem, load = await loop.run_in_executor(None, host)
    if gpus and bus_ids:
        gpus = _with_xids(gpus, await _kernel_log(kernel_log), bus_ids, read_uptime(proc))
    return Sensors(gpus=gpus, gpu_source=used, memory_available_bytes=mem, load_average=load, errors=tuple(errors))
