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
    #: which fabric the port is on, the same for every port that can reach it: ib:<subnet prefix>/<pkey>
    #: for InfiniBand, roce:<IPv4 network> for RoCE v2; empty when it cannot be told (port down, no address)
    fabric_id: str = ""


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


def _ib_fabric(pd: str) -> str:
    """ib:<subnet prefix>/<partition key>: the subnet manager gives every port of a subnet the prefix,
    and ports talk only within a partition (the full-membership bit dropped, so members of either kind match)."""
    gid = _read(os.path.join(pd, "gids", "0"))
    pkey = _read(os.path.join(pd, "pkeys", "0"))
    if not gid or gid.count(":") != 7:
        return ""
    prefix = ":".join(gid.split(":")[:4])
    try:
        key = int(pkey or "0xffff", 16) & 0x7FFF
    except ValueError:
        key = 0x7FFF
    return f"ib:{prefix}/{key:#06x}"


def _routes(proc: str) -> list[tuple[str, int, int]]:
    """(interface, network, mask) of the directly connected IPv4 routes, from /proc/net/route."""
    out = []
    try:
        with open(os.path.join(proc, "net", "route")) as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return out
    for line in lines:
        cells = line.split()
        if len(cells) < 8:
            continue
        try:
            dest, gateway, mask = (int.from_bytes(bytes.fromhex(c), "little") for c in (cells[1], cells[2], cells[7]))
        except ValueError:
            continue
        if gateway == 0 and mask:
            out.append((cells[0], dest, mask))
    return out


def _roce_fabric(pd: str, routes: list[tuple[str, int, int]]) -> str:
    """roce:<network>/<bits>: the IPv4 network of the port's first RoCE v2 address, from the routes."""
    try:
        entries = sorted(os.listdir(os.path.join(pd, "gids")), key=lambda n: int(n) if n.isdigit() else 0)
    except OSError:
        return ""
    for n in entries:
        kind = (_read(os.path.join(pd, "gid_attrs", "types", n)) or "").lower()
        gid = (_read(os.path.join(pd, "gids", n)) or "").lower()
        if "v2" not in kind or not gid.startswith("0000:0000:0000:0000:0000:ffff:"):
            continue
        hexes = gid.split(":")[-2:]
        addr = int(hexes[0] + hexes[1], 16)
        ndev = _read(os.path.join(pd, "gid_attrs", "ndevs", n)) or ""
        for iface, dest, mask in routes:
            if (not ndev or iface == ndev) and addr & mask == dest:
                bits = bin(mask).count("1")
                net = ".".join(str(b) for b in dest.to_bytes(4, "big"))
                return f"roce:{net}/{bits}"
    return ""


def fabric_ids(ports: Sequence[IbPort]) -> tuple[str, ...]:
    """The fabrics the node's active ports are on, each once, in port order."""
    out: list[str] = []
    for p in ports:
        if p.state == "ACTIVE" and p.fabric_id and p.fabric_id not in out:
            out.append(p.fabric_id)
    return tuple(out)


def read_infiniband(root: str = "/sys/class/infiniband", proc: str = "/proc") -> tuple[IbPort, ...]:
    """Every RDMA device's ports; empty where there are none (or no RDMA driver)."""
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return ()
    ports: list[IbPort] = []
    routes: list[tuple[str, int, int]] | None = None
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
            layer = _read(os.path.join(pd, "link_layer")) or "InfiniBand"
            if layer == "Ethernet":
                routes = _routes(proc) if routes is None else routes
                fabric = _roce_fabric(pd, routes)
            else:
                fabric = _ib_fabric(pd)
            ports.append(IbPort(
                device=dev,
                port=int(p),
                state=_after_colon(_read(os.path.join(pd, "state"))),
                physical_state=_after_colon(_read(os.path.join(pd, "phys_state"))),
                rate=rate,
                rate_gbps=float(m.group(1)) if m else None,
                link_layer=layer,
                fabric_id=fabric,
                lid=_read(os.path.join(pd, "lid")),
                node_guid=_read(os.path.join(dev_dir, "node_guid")),
                pci_bus_id=pci if pci and re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d", pci) else None,
                numa_node=int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None,
            ))
    return tuple(ports)
