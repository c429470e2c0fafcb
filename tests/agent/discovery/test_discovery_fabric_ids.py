"""Which fabric a node's RDMA ports are on, from recorded /sys/class/infiniband trees."""

from __future__ import annotations

import os

from llmgw.agent.discovery.fabric import fabric_ids, read_infiniband


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def ib_port(root, dev: str, prefix: str, pkey: str = "0xffff", state: str = "4: ACTIVE") -> None:
    p = root / dev / "ports/1"
    write(str(p / "state"), state + "\n")
    write(str(p / "link_layer"), "InfiniBand\n")
    write(str(p / "rate"), "400 Gb/sec (4X NDR)\n")
    write(str(p / "gids/0"), f"{prefix}:0c42:a103:0065:8a3e\n")
    write(str(p / "pkeys/0"), pkey + "\n")


def test_infiniband_ports_are_named_by_subnet_prefix_and_partition(tmp_path):
    root = tmp_path / "infiniband"
    ib_port(root, "mlx5_0", "fe80:0000:0000:0000")
    ib_port(root, "mlx5_1", "fe80:0000:0000:0000", pkey="0x7fff")  # limited member of the same partition
    ib_port(root, "mlx5_2", "fec0:0000:0000:0001", pkey="0x8012")
    ib_port(root, "mlx5_3", "fec0:0000:0000:0002", state="1: DOWN")
    ports = read_infiniband(str(root), str(tmp_path / "proc"))
    assert [p.fabric_id for p in ports] == [
        "ib:fe80:0000:0000:0000/0x7fff", "ib:fe80:0000:0000:0000/0x7fff", "ib:fec0:0000:0000:0001/0x0012",
        "ib:fec0:0000:0000:0002/0x7fff"]
    # A port that is down reaches nothing.
    assert fabric_ids(ports) == ("ib:fe80:0000:0000:0000/0x7fff", "ib:fec0:0000:0000:0001/0x0012")


def test_roce_ports_are_named_by_the_ipv4_network_of_their_rocev2_address(tmp_path):
    root = tmp_path / "infiniband"
    p = root / "mlx5_0/ports/1"
    write(str(p / "state"), "4: ACTIVE\n")
    write(str(p / "link_layer"), "Ethernet\n")
    write(str(p / "rate"), "200 Gb/sec (4X HDR)\n")
    write(str(p / "gids/0"), "fe80:0000:0000:0000:ba3f:d2ff:fe42:1a2c\n")
    write(str(p / "gid_attrs/types/0"), "IB/RoCE v1\n")
    write(str(p / "gids/3"), "0000:0000:0000:0000:0000:ffff:0a01:000b\n")  # 10.1.0.11
    write(str(p / "gid_attrs/types/3"), "RoCE v2\n")
    write(str(p / "gid_attrs/ndevs/3"), "ens1f0np0\n")
    # /proc/net/route as the kernel writes it: little-endian hex; 10.1.0.0/16 on ens1f0np0.
    write(str(tmp_path / "proc/net/route"),
          "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
          "eno1\t00000000\t0100A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
          "ens1f0np0\t0000010A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n")
    ports = read_infiniband(str(root), str(tmp_path / "proc"))
    assert ports[0].fabric_id == "roce:10.1.0.0/16"
    assert fabric_ids(ports) == ("roce:10.1.0.0/16",)
