"""The node's memory: what it has, what is free, and the agent's cgroup limit."""

from __future__ import annotations

import os

import attrs

from . import cgroup


@attrs.frozen(kw_only=True)
class MemoryInfo:
    """Host memory, in bytes."""

    total_bytes: int
    available_bytes: int  #: MemAvailable: what can be had without swapping
    swap_total_bytes: int
    swap_free_bytes: int
    cgroup_limit_bytes: int | None  #: the agent's cgroup limit; None: none
    usable_bytes: int  #: the smaller of total and the cgroup limit: what to plan with


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as bytes by field name ("MemTotal"); counts without a unit stay counts."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        if not parts:
            continue
        try:
            n = int(parts[0])
        except ValueError:
            continue
        out[key.strip()] = n * 1024 if len(parts) > 1 and parts[1].lower() == "kb" else n
    return out


def read_memory(*, proc: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> MemoryInfo:
    """This machine's memory (or a recorded /proc under another root)."""
    with open(os.path.join(proc, "meminfo"), encoding="ascii", errors="replace") as f:
        info = parse_meminfo(f.read())
    total = info.get("MemTotal", 0)
    # Kernels before 3.14 have no MemAvailable; free plus cache is the old estimate.
    available = info.get("MemAvailable", info.get("MemFree", 0) + info.get("Cached", 0) + info.get("Buffers", 0))
    limit = cgroup.memory_limit_bytes(proc=proc, root=cgroup_root)
    if limit is not None and total and limit >= total:
        limit = None  # a limit above the machine's memory limits nothing
    return MemoryInfo(
        total_bytes=total,
        available_bytes=available,
        swap_total_bytes=info.get("SwapTotal", 0),
        swap_free_bytes=info.get("SwapFree", 0),
        cgroup_limit_bytes=limit,
        usable_bytes=min(total, limit) if limit is not None else total,
    )


def available_bytes(*, proc: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> int | None:
    """Memory available now, within the cgroup's limit where there is one: for heartbeats."""
    try:
        with open(os.path.join(proc, "meminfo"), encoding="ascii", errors="replace") as f:
            info = parse_meminfo(f.read())
    except OSError:
        return None
    available = info.get("MemAvailable", info.get("MemFree", 0))
    limit = cgroup.memory_limit_bytes(proc=proc, root=cgroup_root)
    usage = cgroup.memory_usage_bytes(proc=proc, root=cgroup_root)
    if limit is not None and usage is not None:
        available = min(available, max(0, limit - usage))
    return available
