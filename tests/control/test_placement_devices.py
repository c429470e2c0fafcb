"""MIG instances as devices of their own, and cards kept out (degraded, busy with others' work), through place()
and the inventory as agents report it."""

from __future__ import annotations

from llmgw.control.devices import node_devices
from llmgw.control.inventory import Inventory
from llmgw.control.placement import place
from llmgw.wire import messages as w

from .conftest import ENGINES, GiB, model, register

A100 = "a100-40gb"


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


def test_a_card_another_process_fills_is_kept_out_and_comes_back_when_freed():
    inv = inventory(register("node-a", gpu=(card(0), card(1))))
    inv.heartbeat("node-a", w.Heartbeat(seq=1, gpus=(
        w.GpuSensor(index=0, foreign_memory_bytes=76 * GiB), w.GpuSensor(index=1, foreign_memory_bytes=0))))
    decision = place(one_gpu("h100-80gb", 2), inv.nodes(), engines=ENGINES)
    assert decision.placement is None
    assert "GPU 0 kept out (76.0 GiB of its memory is held by processes that are not llmgw's engines" \
        in decision.sentences()[0]
    inv.heartbeat("node-a", w.Heartbeat(seq=2, gpus=(w.GpuSensor(index=0, foreign_memory_bytes=300 << 20),)))
    assert place(one_gpu("h100-80gb", 2), inv.nodes(), engines=ENGINES).placement.gpus == (0, 1)


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
