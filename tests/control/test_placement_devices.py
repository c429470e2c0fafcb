"""MIG instances as devices of their own, and cards kept out (degraded, busy with others' work), through place()
and the inventory as agents report it."""

from __future__ import annotations

from pathlib import Path

from llmgw.agent import discovery
from llmgw.agent.gpu_devices import visible_devices
from llmgw.agent.report import wire_gpu_sensors, wire_inventory
from llmgw.control.devices import node_devices
from llmgw.control.inventory import Inventory
from llmgw.control.placement import place
from llmgw.wire import messages as w

from .conftest import ENGINES, GiB, model, register

A100 = "a100-40gb"
DATA = Path(__file__).resolve().parents[1] / "agent" / "discovery" / "data"


def mig_card(index: int = 0) -> w.GpuInfo:
    """An A100 40GB in MIG mode, carved 3g.20gb + 2g.10gb + 1g.5gb, as an agent reports it."""
    return w.GpuInfo(
        index=index, uuid=f"GPU-a100-{index}", name="NVIDIA A100-SXM4-40GB", gpu_class=A100,
        memory_total_bytes=40 * GiB, mig_mode=True,
        mig=(w.MigInstance(uuid="MIG-8e81973e-0bec-47b0-b898-d190f9ebdacc", profile="3g.20gb", device=0,
                           memory_total_bytes=20 * GiB, gpu_class=f"{A100}-mig-3g.20gb"),
             w.MigInstance(uuid="MIG-6b4cb242-4a23-4596-a217-beaddbc496cb", profile="2g.10gb", device=1,
                           memory_total_bytes=10 * GiB),  # an older agent: the class is derived
             w.MigInstance(uuid="MIG-92276658-1e27-41c0-8a6a-63ec24ede6a4", profile="1g.5gb", device=2,
                           memory_total_bytes=5 * GiB)),
    )


def card(index: int, gpu_class: str = "h100-80gb", **kw) -> w.GpuInfo:
    return w.GpuInfo(index=index, uuid=f"GPU-{index}", gpu_class=gpu_class, memory_total_bytes=80 * GiB, **kw)


def one_gpu(gpu_class: str, n: int = 1):
    return model("m", engine="vllm", profiles=[{"name": "default", "gpus": n, "gpu_class": gpu_class}])


def inventory(*regs) -> Inventory:
    inv = Inventory(clock=lambda: 100.0)
    for reg in regs:
        inv.register(reg)
    return inv


def test_mig_instances_are_devices_of_their_own_class_memory_and_uuid():
    devices = node_devices((mig_card(0), card(1, A100)))
    assert [(d.index, d.gpu_class, d.memory_total_bytes // GiB, d.uuid[:12]) for d in devices] == [
        (1000, "a100-40gb-mig-3g.20gb", 20, "MIG-8e81973e"),
        (1001, "a100-40gb-mig-2g.10gb", 10, "MIG-6b4cb242"),
        (1002, "a100-40gb-mig-1g.5gb", 5, "MIG-92276658"),
        (1, A100, 80, "GPU-1"),
    ]


def test_a_profile_asking_for_a_mig_class_gets_that_instance():
    inv = inventory(register("node-a", gpu=(mig_card(0),)))
    decision = place(one_gpu("a100-40gb-mig-2g.10gb"), inv.nodes(), engines=ENGINES)
    assert decision.placement.node == "node-a" and decision.placement.gpus == (1001,)


def test_a_card_in_mig_mode_is_never_handed_out_whole():
    inv = inventory(register("node-a", gpu=(mig_card(0),)))
    decision = place(one_gpu(A100), inv.nodes(), engines=ENGINES)
    assert decision.placement is None
    assert decision.sentences() == [
        "node-a: has no GPUs of class a100-40gb (it has 1 × a100-40gb-mig-1g.5gb, 1 × a100-40gb-mig-2g.10gb, "
        "1 × a100-40gb-mig-3g.20gb)"]
    # Any class: still an instance, never card 0 itself.
    anyclass = place(one_gpu(""), inv.nodes(), engines=ENGINES)
    assert anyclass.placement.gpus[0] >= 1000


def test_a_card_in_mig_mode_without_instances_offers_nothing_and_says_why():
    bare = w.GpuInfo(index=0, gpu_class=A100, memory_total_bytes=40 * GiB, mig_mode=True)
    inv = inventory(register("node-a", gpu=(bare,)))
    decision = place(one_gpu(A100), inv.nodes(), engines=ENGINES)
    assert decision.placement is None
    assert "GPU 0 kept out (in MIG mode with no instances" in decision.sentences()[0]


def test_a_degraded_card_is_kept_out_with_its_reason():
    hot = card(1, health="degraded", problem="running at 89 °C (warning from 87 °C)")
    inv = inventory(register("node-a", gpu=(card(0), hot)))
    decision = place(one_gpu("h100-80gb", 2), inv.nodes(), engines=ENGINES)
    assert decision.placement is None
    assert decision.sentences() == [
        "node-a: needs 2 free GPUs of class h100-80gb, has 1 healthy card of that kind in all: "
        "GPU 1 kept out (degraded: running at 89 °C (warning from 87 °C))"]
    assert place(one_gpu("h100-80gb"), inv.nodes(), engines=ENGINES).placement.gpus == (0,)


def heartbeat_from_readings(seq: int, gpus, our_pids=(), limit: int = 2 * GiB) -> w.Heartbeat:
    """The heartbeat an agent sends for these readings (discovery's GpuSensors), judging foreign memory."""
    sensors = discovery.Sensors(gpus=tuple(gpus), gpu_source="nvidia-smi", memory_available_bytes=None,
                                load_average=None)
    return w.Heartbeat(seq=seq, gpus=wire_gpu_sensors(sensors, set(our_pids), foreign_limit=limit))


def reading(index: int, used_gib: float, processes=()) -> discovery.GpuSensors:
    return discovery.GpuSensors(index=index, uuid=f"GPU-{index}", memory_used_mib=int(used_gib * 1024),
                                processes=tuple((pid, int(gib * GiB)) for pid, gib in processes))


def test_a_card_another_process_fills_is_kept_out_and_comes_back_when_freed():
    inv = inventory(register("node-a", gpu=(card(0), card(1))))
    # Card 0: someone's 76 GiB job; card 1: our own engine's 70 GiB (pid 4100), which is not foreign.
    inv.heartbeat("node-a", heartbeat_from_readings(1, [reading(0, 76, [(51234, 76)]),
                                                        reading(1, 70, [(4100, 70)])], our_pids={4100}))
    decision = place(one_gpu("h100-80gb", 2), inv.nodes(), engines=ENGINES)
    assert decision.placement is None
    assert ("GPU 0 kept out (degraded: 76.0 GiB of its memory is held by processes that are not llmgw's engines "
            "(more than gpu_foreign_memory_limit, 2GiB): find them with nvidia-smi)") in decision.sentences()[0]
    assert inv.get("node-a").describe(100.0)["devices"][1]["kept_out"] == ""
    inv.heartbeat("node-a", heartbeat_from_readings(2, [reading(0, 0.3), reading(1, 0.3)]))
    assert place(one_gpu("h100-80gb", 2), inv.nodes(), engines=ENGINES).placement.gpus == (0, 1)


def test_the_foreign_memory_limit_of_the_node_decides():
    busy = [reading(0, 6, [(7311, 6)])]  # a 6 GiB notebook kernel beside the engines
    inv = inventory(register("node-a", gpu=(card(0),)))
    inv.heartbeat("node-a", heartbeat_from_readings(1, busy, limit=8 * GiB))
    assert place(one_gpu("h100-80gb"), inv.nodes(), engines=ENGINES).placement.gpus == (0,)
    inv.heartbeat("node-a", heartbeat_from_readings(2, busy, limit=4 * GiB))
    decision = place(one_gpu("h100-80gb"), inv.nodes(), engines=ENGINES)
    assert decision.placement is None
    assert "6.0 GiB of its memory is held by processes that are not llmgw's engines (more than " \
           "gpu_foreign_memory_limit, 4GiB)" in decision.sentences()[0]


class RecordedSmi:
    """nvidia-smi answering from the discovery tests' documented-shape outputs (tests/agent/discovery/data)."""

    def __init__(self, stem: str):
        self.files = {("-L",): f"{stem}.L.txt", ("mig", "-lgi"): f"{stem}.lgi.txt", ("mig", "-lci"): f"{stem}.lci.txt"}
        self.query = (DATA / f"{stem}.csv").read_text()

    def __call__(self, args):
        if tuple(args) in self.files:
            return "".join(line for line in (DATA / self.files[tuple(args)]).read_text().splitlines(True)
                           if not line.startswith("#"))
        fields = next(line.split(":", 1)[1].strip().split(",") for line in self.query.splitlines()
                      if line.startswith("# fields:"))
        wanted = args[0].split("=", 1)[1].split(",")
        rows = [[c.strip() for c in line.split(",")] for line in self.query.splitlines()
                if line.strip() and not line.startswith("#")]
        return "".join(", ".join(r[fields.index(f)] for f in wanted) + "\n" for r in rows)


async def test_mig_devices_nvidia_smi_finds_are_placed_and_given_by_uuid():
    found = await discovery.discover({}, nvml=None, smi_runner=RecordedSmi("smi_a100x2_mig"), source="nvidia-smi",
                                     kernel_log="")
    inv = inventory(register("node-a", gpu=wire_inventory(found).gpus))
    decision = place(one_gpu("a100-40gb-mig-2g.10gb"), inv.nodes(), engines=ENGINES)
    assert decision.placement.gpus == (1001,)
    # What the agent puts in CUDA_VISIBLE_DEVICES for that device.
    assert visible_devices(found, decision.placement.gpus) == ("MIG-6b4cb242-4a23-4596-a217-beaddbc496cb",)
    assert [(m.profile, m.gpu_instance) for m in wire_inventory(found).gpus[0].mig] == [
        ("3g.20gb", 2), ("2g.10gb", 4), ("1g.5gb", 7)]
    # Seven like instances of an H100: two of them for a profile asking two.
    h100 = await discovery.discover({}, nvml=None, smi_runner=RecordedSmi("smi_h100_mig"), source="nvidia-smi",
                                    kernel_log="")
    inv = inventory(register("node-b", gpu=wire_inventory(h100).gpus))
    two = place(one_gpu("h100-80gb-mig-1g.10gb", 2), inv.nodes(), engines=ENGINES)
    assert len(two.placement.gpus) == 2 and all(1000 <= g < 1007 for g in two.placement.gpus)
    assert all(u.startswith("MIG-") for u in visible_devices(h100, two.placement.gpus))
    assert place(one_gpu("h100-80gb"), inv.nodes(), engines=ENGINES).placement is None  # never the card whole


def test_a_card_heartbeats_call_degraded_is_kept_out_until_they_say_it_recovered():
    inv = inventory(register("node-a", gpu=(card(0),)))
    inv.heartbeat("node-a", w.Heartbeat(seq=1, gpus=(
        w.GpuSensor(index=0, health="degraded", problem="clocks held down (hw_thermal)", xid_errors=(63,)),)))
    node = inv.get("node-a")
    assert node.describe(100.0)["devices"][0]["kept_out"] == "degraded: clocks held down (hw_thermal)"
    assert node.describe(100.0)["gpus"][0]["xid_errors"] == [63]
    assert place(one_gpu("h100-80gb"), inv.nodes(), engines=ENGINES).placement is None
    inv.heartbeat("node-a", w.Heartbeat(seq=2, gpus=(w.GpuSensor(index=0, health="ok"),)))
    assert place(one_gpu("h100-80gb"), inv.nodes(), engines=ENGINES).placement.gpus == (0,)
