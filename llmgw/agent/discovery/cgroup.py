"""The limits of the cgroup the agent runs in (v1 and v2).

A node's CPUs and memory are not all the agent's when it runs in a container
or a systemd unit with CPUQuota=/MemoryMax=. A limit set on any ancestor
group applies too, so each is read from the agent's own group up to the
root, and the smallest wins.
"""

from __future__ import annotations

import os

# cgroup v1 writes "no limit" as a huge number (PAGE_COUNTER_MAX in bytes).
_V1_UNLIMITED = 1 << 62


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def group_dirs(controller: str, *, proc: str = "/proc", root: str = "/sys/fs/cgroup") -> list[tuple[int, str]]:
    """The directories holding `controller`'s files for this process, leaf first.

    Each is (cgroup version, directory). Empty when the process is in no
    group with that controller, or the hierarchy is not mounted. A
    controller bound to a v1 hierarchy is read there even on a host that
    also mounts v2 (the "hybrid" layout).
    """
    text = _read(os.path.join(proc, "self/cgroup"))
    if not text:
        return []
    v2_path = None
    for line in text.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and controllers == "":
            v2_path = path
        elif controller in controllers.split(","):
            for name in (controller, controllers):
                base = os.path.join(root, name)
                if os.path.isdir(base):
                    return _walk_up(1, base, path)
    if v2_path is None:
        return []
    # v2: one hierarchy, at the root or (hybrid systems) under unified/.
    base = root if os.path.exists(os.path.join(root, "cgroup.controllers")) else os.path.join(root, "unified")
    return _walk_up(2, base, v2_path) if os.path.isdir(base) else []


def _walk_up(version: int, base: str, path: str) -> list[tuple[int, str]]:
    base = os.path.normpath(base)
    leaf = os.path.normpath(os.path.join(base, path.lstrip("/")))
    if not leaf.startswith(base) or not os.path.isdir(leaf):
        # In a cgroup namespace the path names a group outside what is
        # mounted here; what is mounted is then our own group.
        return [(version, base)]
    dirs = [(version, leaf)]
    while leaf != base:
        leaf = os.path.dirname(leaf)
        dirs.append((version, leaf))
    return dirs


def cpu_quota_cores(*, proc: str = "/proc", root: str = "/sys/fs/cgroup") -> float | None:
    """The CPU time the agent's group may use, in cores (1.5 = 150 %); None: no quota."""
    limits = []
    for version, d in group_dirs("cpu", proc=proc, root=root):
        if version == 2:
            text = _read(os.path.join(d, "cpu.max"))
            if not text:
                continue
            quota, _, period = text.partition(" ")
        else:
            quota = _read(os.path.join(d, "cpu.cfs_quota_us")) or "-1"
            period = _read(os.path.join(d, "cpu.cfs_period_us")) or "100000"
        try:
            q, p = int(quota), int(period or "100000")
        except ValueError:
            continue  # "max": no quota at this level
        if q > 0 and p > 0:
            limits.append(q / p)
    return min(limits) if limits else None


def memory_limit_bytes(*, proc: str = "/proc", root: str = "/sys/fs/cgroup") -> int | None:
    """The memory the agent's group may use, in bytes; None: no limit."""
    limits = []
    for version, d in group_dirs("memory", proc=proc, root=root):
        text = _read(os.path.join(d, "memory.max" if version == 2 else "memory.limit_in_bytes"))
        try:
            n = int(text or "")
        except ValueError:
            continue  # "max", or unreadable
        if 0 < n < _V1_UNLIMITED:
            limits.append(n)
    return min(limits) if limits else None


def memory_usage_bytes(*, proc: str = "/proc", root: str = "/sys/fs/cgroup") -> int | None:
    """What the agent's own group uses now (page cache included), in bytes."""
    for version, d in group_dirs("memory", proc=proc, root=root)[:1]:
        text = _read(os.path.join(d, "memory.current" if version == 2 else "memory.usage_in_bytes"))
        try:
            return int(text or "")
        except ValueError:
            return None
    return None
