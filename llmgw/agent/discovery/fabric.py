"""How a node's GPUs reach each other (NVLink) and other nodes (InfiniBand).

NVLink comes from NVML only: nvidia-smi's text is not read for it. Links
whose far end is another GPU of this node name that GPU; links to an
NVSwitch are counted, since every GPU on the switches reaches every other.
InfiniBand ports are read from /sys/class/infiniband, which exists only
where an RDMA driver is loaded; RoCE ports are listed too, with link layer
"Ethernet".
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Sequence

import attrs

from .gpus import Gpu, normalise_bus_id

# NVML's nvmlNvLinkDeviceType_t.
NVLINK_REMOTE_GPU = 0
NVLINK_REMOTE_SWITCH = 2

#: One active link as NVML reports it: (the far end's PCI address, its device type or None).
RawLink = tuple[str, "int | None"]


@attrs.frozen(kw_only=True)
class GpuNvLinks:
    """One card's active NVLink links."""

    gpu_index: int
    active_links: int
    peers: tuple[int, ...] = ()  #: GPUs of this node at the far end of a direct link
    switch_links: int = 0  #: links to an NVSwitch
    other_links: int = 0  #: links whose far end is neither (another node's GPU, unknown)


@attrs.frozen(kw_only=True)
class IbPort:
    """One InfiniBand (or RoCE) port."""

    device: str  #: "mlx5_0"
    port: int
    state: str  #: "ACTIVE", "DOWN", "INIT"
    physical_state: str  #: "LinkUp", "Disabled", "Polling"
    rate: str  #: as the kernel says it: "400 Gb/sec (4X NDR)"
    rate_gbps: float | None
    link_layer: str  #: "InfiniBand", or "Ethernet" for RoCE
    lid: str | None = None
    node_guid: str | None = None
    pci_bus_id: str | None = None
    numa_node: int | None = None


@attrs.frozen(kw_only=True)
class Fabric:
    """NVLink per GPU and the node's RDMA ports."""

    nvlink: tuple[GpuNvLinks, ...] = ()
    #: Some GPU's links go to NVSwitches: the GPUs with switch_links reach one another.
    nvswitch: bool = False
    infiniband: tuple[IbPort, ...] = ()


def nvlink_topology(gpus: Sequence[Gpu], raw: Mapping[int, Sequence[RawLink]]) -> tuple[GpuNvLinks, ...]:
    """Each card's links, the far ends named by GPU index where they are ours."""
    by_bus = {g.pci_bus_id: g.index for g in gpus if g.pci_bus_id}
    out = []
    for index in sorted(raw):
        links = raw[index]
        if not links:
            continue
        peers: set[int] = set()
        switch = other = 0
        for bus, kind in links:
            peer = by_bus.get(normalise_bus_id(bus))
            if kind == NVLINK_REMOTE_SWITCH:
                switch += 1
            elif peer is not None and peer != index and kind in (None, NVLINK_REMOTE_GPU):
                peers.add(peer)
            else:
                other += 1
        out.append(GpuNvLinks(gpu_index=index, active_links=len(links), peers=tuple(sorted(peers)),
                              switch_links=switch, other_links=other))
    return tuple(out)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _after_colon(text: str | None) -> str:
    # The kernel writes "4: ACTIVE" and "5: LinkUp".
    if not text:
        return ""
    return text.split(":", 1)[1].strip() if ":" in text else text


_RATE = re.compile(r"([\d.]+)\s*Gb/sec")


def read_infiniband(root: str = "/sys/class/infiniband") -> tuple[IbPort, ...]:
    """Every RDMA device's ports; empty where there are none (or no RDMA driver)."""
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return ()
    ports: list[IbPort] = []
    for dev in devices:
        dev_dir = os.path.join(root, dev)
        pci = None
        try:
            pci = normalise_bus_id(os.path.basename(os.path.realpath(os.path.join(dev_dir, "device"))))
        except OSError:
            pass
        numa = _read(os.path.join(dev_dir, "device", "numa_node"))
        try:
            port_names = sorted(os.listdir(os.path.join(dev_dir, "ports")), key=lambda p: int(p) if p.isdigit() else 0)
        except OSError:
            continue
        for p in port_names:
            if not p.isdigit():
                continue
            pd = os.path.join(dev_dir, "ports", p)
            rate = _read(os.path.join(pd, "rate")) or ""
            m = _RATE.search(rate)
            ports.append(IbPort(
                device=dev,
                port=int(p),
                state=_after_colon(_read(os.path.join(pd, "state"))),
                physical_state=_after_colon(_read(os.path.join(pd, "phys_state"))),
                rate=rate,
                rate_gbps=float(m.group(1)) if m else None,
                link_layer=_read(os.path.join(pd, "link_layer")) or "InfiniBand",
                lid=_read(os.path.join(pd, "lid")),
                node_guid=_read(os.path.join(dev_dir, "node_guid")),
                pci_bus_id=pci if pci and re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d", pci) else None,
                numa_node=int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None,
            ))
    return tuple(ports)
