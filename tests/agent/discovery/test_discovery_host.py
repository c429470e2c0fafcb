"""CPUs, memory, cgroup limits, disks and InfiniBand: this machine and recorded files."""

from __future__ import annotations

import os
import shutil

from llmgw.agent.discovery.cpu import parse_cpuinfo, read_cpu
from llmgw.agent.discovery.disk import read_disk, read_disks
from llmgw.agent.discovery.fabric import read_infiniband
from llmgw.agent.discovery.host import addresses, hostname
from llmgw.agent.discovery.memory import available_bytes, parse_meminfo, read_memory


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_this_machine() -> None:
    cpu = read_cpu()
    assert cpu.logical_cores == os.cpu_count()
    assert 1 <= cpu.physical_cores <= cpu.logical_cores
    assert 1 <= cpu.usable_cores <= cpu.logical_cores
    assert 0 < cpu.effective_cores <= cpu.usable_cores
    assert cpu.model and cpu.architecture
    mem = read_memory()
    assert 0 < mem.available_bytes <= mem.total_bytes
    assert 0 < mem.usable_bytes <= mem.total_bytes
    assert available_bytes() > 0
    assert hostname()
    assert all(not a.address.startswith("127.") and a.address != "::1" for a in addresses())


def test_a_two_socket_xeon_with_hyperthreads(data_dir: str, tmp_path) -> None:
    with open(os.path.join(data_dir, "proc_xeon/cpuinfo")) as f:
        model, logical, physical, sockets = parse_cpuinfo(f.read())
    assert (model, logical, physical, sockets) == ("Intel(R) Xeon(R) Platinum 8480+", 8, 4, 2)
    cpu = read_cpu(proc=os.path.join(data_dir, "proc_xeon"), sys=str(tmp_path), cgroup_root=str(tmp_path), usable=8)
    assert (cpu.sockets, cpu.physical_cores, cpu.logical_cores, cpu.usable_cores) == (2, 4, 8, 8)
    assert cpu.cgroup_quota_cores is None and cpu.effective_cores == 8


def test_an_arm_host_takes_its_topology_from_sysfs(data_dir: str, tmp_path) -> None:
    # Grace's /proc/cpuinfo names no model and no cores: sysfs says how they sit.
    for cpu_no in range(4):
        write(str(tmp_path / f"devices/system/cpu/cpu{cpu_no}/topology/physical_package_id"), "0\n")
        write(str(tmp_path / f"devices/system/cpu/cpu{cpu_no}/topology/core_id"), f"{cpu_no}\n")
    cpu = read_cpu(proc=os.path.join(data_dir, "proc_grace"), sys=str(tmp_path), cgroup_root=str(tmp_path), usable=4)
    assert (cpu.logical_cores, cpu.physical_cores, cpu.sockets) == (4, 4, 1)
    assert cpu.model  # whatever the platform says, never empty


def test_meminfo(data_dir: str, tmp_path) -> None:
    with open(os.path.join(data_dir, "proc_xeon/meminfo")) as f:
        info = parse_meminfo(f.read())
    assert info["MemTotal"] == 2113389556 * 1024
    assert info["HugePages_Total"] == 0  # a count, not kB
    mem = read_memory(proc=os.path.join(data_dir, "proc_xeon"), cgroup_root=str(tmp_path))
    assert mem.total_bytes == 2113389556 * 1024 and mem.available_bytes == 2011554320 * 1024
    assert mem.swap_total_bytes == 8388604 * 1024
    assert mem.cgroup_limit_bytes is None and mem.usable_bytes == mem.total_bytes


def _v2_tree(root: str, *, cpu_max: str, memory_max: str, parent_memory_max: str = "max") -> None:
    write(os.path.join(root, "cgroup.controllers"), "cpuset cpu io memory pids\n")
    write(os.path.join(root, "system.slice/memory.max"), parent_memory_max + "\n")
    unit = os.path.join(root, "system.slice/llmgw-agent.service")
    write(os.path.join(unit, "cpu.max"), cpu_max + "\n")
    write(os.path.join(unit, "memory.max"), memory_max + "\n")
    write(os.path.join(unit, "memory.current"), str(6 << 30) + "\n")


def test_a_systemd_unit_with_cpu_and_memory_limits(data_dir: str, tmp_path) -> None:
    # proc_xeon/self/cgroup puts the agent in system.slice/llmgw-agent.service (cgroup v2).
    proc = os.path.join(data_dir, "proc_xeon")
    _v2_tree(str(tmp_path), cpu_max="250000 100000", memory_max=str(64 << 30))
    cpu = read_cpu(proc=proc, sys=str(tmp_path), cgroup_root=str(tmp_path), usable=8)
    assert cpu.cgroup_quota_cores == 2.5 and cpu.effective_cores == 2.5
    mem = read_memory(proc=proc, cgroup_root=str(tmp_path))
    assert mem.cgroup_limit_bytes == 64 << 30 and mem.usable_bytes == 64 << 30
    # What is left within the limit, not the whole machine's.
    assert available_bytes(proc=proc, cgroup_root=str(tmp_path)) == 58 << 30


def test_a_parents_limit_applies_and_max_means_none(data_dir: str, tmp_path) -> None:
    proc = os.path.join(data_dir, "proc_xeon")
    _v2_tree(str(tmp_path), cpu_max="max 100000", memory_max="max", parent_memory_max=str(32 << 30))
    assert read_cpu(proc=proc, sys=str(tmp_path), cgroup_root=str(tmp_path), usable=8).cgroup_quota_cores is None
    assert read_memory(proc=proc, cgroup_root=str(tmp_path)).cgroup_limit_bytes == 32 << 30


def test_cgroup_v1_limits(data_dir: str, tmp_path) -> None:
    proc = tmp_path / "proc"
    shutil.copytree(os.path.join(data_dir, "proc_xeon"), proc)
    write(str(proc / "self/cgroup"), "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n")
    root = tmp_path / "cgroup"
    write(str(root / "cpu,cpuacct/docker/abc/cpu.cfs_quota_us"), "400000\n")
    write(str(root / "cpu,cpuacct/docker/abc/cpu.cfs_period_us"), "100000\n")
    write(str(root / "cpu,cpuacct/cpu.cfs_quota_us"), "-1\n")
    write(str(root / "memory/docker/abc/memory.limit_in_bytes"), str(16 << 30) + "\n")
    write(str(root / "memory/memory.limit_in_bytes"), "9223372036854771712\n")  # "no limit" in v1
    assert read_cpu(proc=str(proc), sys=str(tmp_path), cgroup_root=str(root), usable=8).cgroup_quota_cores == 4.0
    assert read_memory(proc=str(proc), cgroup_root=str(root)).cgroup_limit_bytes == 16 << 30


def test_disks_for_the_state_and_weights_dirs(tmp_path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    disks = read_disks({"state": str(state), "weights": str(tmp_path / "weights/not/made/yet")})
    assert [d.role for d in disks] == ["state", "weights"]
    s, w = disks
    assert s.measured_path == str(state) and s.error is None
    assert 0 < s.free_bytes <= s.total_bytes
    # A directory not made yet is measured on the filesystem it will be made on.
    assert w.measured_path == str(tmp_path) and w.total_bytes == s.total_bytes
    assert s.mount_point and os.path.ismount(s.mount_point)
    assert read_disk("state", "/var/lib/llmgw").total_bytes  # the default: measured even before the agent made it


def test_infiniband_ports_from_sysfs(tmp_path) -> None:
    root = tmp_path / "infiniband"
    pci = tmp_path / "devices/pci0000:17/0000:17:01.0/0000:18:00.1"
    write(str(pci / "numa_node"), "0\n")
    for dev, port, state, phys, rate, layer in [
        ("mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand"),
        ("mlx5_1", 1, "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)", "Ethernet"),
    ]:
        d = root / dev
        write(str(d / f"ports/{port}/state"), state + "\n")
        write(str(d / f"ports/{port}/phys_state"), phys + "\n")
        write(str(d / f"ports/{port}/rate"), rate + "\n")
        write(str(d / f"ports/{port}/link_layer"), layer + "\n")
        write(str(d / f"ports/{port}/lid"), "0x12\n")
        write(str(d / "node_guid"), "b83f:d203:0042:1a2c\n")
    os.symlink(pci, root / "mlx5_0/device")
    ports = read_infiniband(str(root))
    assert [(p.device, p.port, p.state, p.physical_state, p.rate_gbps, p.link_layer) for p in ports] == [
        ("mlx5_0", 1, "ACTIVE", "LinkUp", 400.0, "InfiniBand"),
        ("mlx5_1", 1, "DOWN", "Disabled", 10.0, "Ethernet"),
    ]
    assert ports[0].pci_bus_id == "0000:18:00.1" and ports[0].numa_node == 0
    assert ports[1].pci_bus_id is None and ports[1].numa_node is None


def test_no_infiniband_is_no_ports(tmp_path) -> None:
    assert read_infiniband(str(tmp_path / "nothing")) == ()
