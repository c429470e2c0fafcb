"""The node's CPUs: model, cores, and how many of them the agent may use."""

from __future__ import annotations

import glob
import os
import platform

import attrs

from . import cgroup


@attrs.frozen(kw_only=True)
class CpuInfo:
    """What the CPUs are, and the share of them this agent's processes get."""

    model: str  #: "AMD EPYC 9654 96-Core Processor"
    architecture: str  #: "x86_64", "aarch64"
    sockets: int
    physical_cores: int  #: cores, all sockets: hyperthreads not counted
    logical_cores: int  #: what the kernel schedules on: hyperthreads counted
    usable_cores: int  #: logical cores this process may run on (affinity, cpuset)
    cgroup_quota_cores: float | None  #: CPU time the cgroup allows, in cores; None: no quota
    effective_cores: float  #: the smaller of usable_cores and the quota: what to plan with


def parse_cpuinfo(text: str) -> tuple[str, int, int, int]:
    """(model, logical, physical, sockets) from /proc/cpuinfo; 0 where it does not say.

    x86 names the model in "model name" and the topology in "physical id" and
    "core id"; ARM has neither, which the caller fills from sysfs.
    """
    model = ""
    logical = 0
    cores: set[tuple[str, str]] = set()
    sockets: set[str] = set()
    physical_id = core_id = None
    for line in text.splitlines() + [""]:
        if not line.strip():
            if physical_id is not None and core_id is not None:
                cores.add((physical_id, core_id))
            physical_id = core_id = None
            continue
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "processor" and value.isdigit():
            logical += 1
        elif key in ("model name", "cpu model", "model") and not model and not value.isdigit():
            model = value
        elif key == "hardware" and not model:
            model = value
        elif key == "physical id":
            physical_id = value
            sockets.add(value)
        elif key == "core id":
            core_id = value
    return model, logical, len(cores), len(sockets)


def _sysfs_topology(sys: str) -> tuple[int, int]:
    """(physical cores, sockets) from /sys/devices/system/cpu; 0 where unreadable."""
    cores: set[tuple[str, str]] = set()
    sockets: set[str] = set()
    for cpu_dir in glob.glob(os.path.join(sys, "devices/system/cpu/cpu[0-9]*/topology")):
        try:
            with open(os.path.join(cpu_dir, "physical_package_id")) as f:
                pkg = f.read().strip()
            with open(os.path.join(cpu_dir, "core_id")) as f:
                core = f.read().strip()
        except OSError:
            continue
        cores.add((pkg, core))
        sockets.add(pkg)
    return len(cores), len(sockets)


def read_cpu(*, proc: str = "/proc", sys: str = "/sys", cgroup_root: str = "/sys/fs/cgroup",
             usable: int | None = None) -> CpuInfo:
    """This machine's CPUs (or a recorded copy of /proc and /sys under other roots).

    `usable` overrides the affinity this process has, for tests of recorded files.
    """
    try:
        with open(os.path.join(proc, "cpuinfo"), encoding="utf-8", errors="replace") as f:
            model, logical, physical, sockets = parse_cpuinfo(f.read())
    except OSError:
        model, logical, physical, sockets = "", 0, 0, 0
    if not physical:
        physical, sockets = _sysfs_topology(sys)
    logical = logical or os.cpu_count() or 1
    physical = physical or logical
    sockets = sockets or 1
    if usable is None:
        try:
            usable = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            usable = logical
    quota = cgroup.cpu_quota_cores(proc=proc, root=cgroup_root)
    effective = float(usable) if quota is None else min(float(usable), quota)
    return CpuInfo(
        model=model or platform.processor() or "unknown",
        architecture=platform.machine() or "unknown",
        sockets=sockets,
        physical_cores=physical,
        logical_cores=logical,
        usable_cores=usable,
        cgroup_quota_cores=quota,
        effective_cores=round(effective, 2),
    )
