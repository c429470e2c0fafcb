"""Placement on synthetic inventories: each filter, each preference, preemption, and the sentences."""

from __future__ import annotations

from llmgw.control.inventory import Inventory
from llmgw.control.placement import Holding, format_bytes, place

from .conftest import ENGINES, GiB, gpus, model, register


def nodes(*regs, cordon: dict[str, str] | None = None, drain: tuple[str, ...] = ()):
    inv = Inventory(clock=lambda: 100.0)
    for reg in regs:
        inv.register(reg)
    for node_id, reason in (cordon or {}).items():
        inv.cordon(node_id, reason)
    for node_id in drain:
        inv.drain(node_id)
    return inv.nodes()


def gpu_model(n: int = 2, gpu_class: str = "h100-80gb", **spec):
    return model("big", engine="vllm", profiles=[{"name": "default", "gpus": n, "gpu_class": gpu_class}], **spec)


def test_gpu_class_and_free_cards_with_the_words_explain_uses():
    ns = nodes(register("node-a", gpu=gpus(2)), register("node-b", gpu=gpus(4, "a100-80gb")))
    held = [Holding("other-1", "other", "node-a", gpus=(1,))]
    decision = place(gpu_model(2), ns, held, engines=ENGINES)
    assert decision.placement is None
    assert decision.sentences() == [
        "node-a: needs 2 free GPUs of class h100-80gb, has 1",
        "node-b: has no GPUs of class h100-80gb (it has 4 × a100-80gb)",
    ]
    assert decision.summary().startswith("no node can run it: node-a: needs 2 free GPUs")


def test_cards_must_be_on_one_node_and_healthy():
    ns = nodes(register("node-a", gpu=gpus(2, failed=[0])), register("node-b", gpu=gpus(1)))
    decision = place(gpu_model(2), ns, engines=ENGINES)
    assert decision.placement is None
    assert decision.sentences() == [
        "node-a: needs 2 free GPUs of class h100-80gb, has 1 healthy card of that kind in all: "
        "GPU 0 kept out (failed)",
        "node-b: needs 2 free GPUs of class h100-80gb, has 1 healthy card of that kind in all",
    ]
    ok = place(gpu_model(1), ns, engines=ENGINES)
    # Both are left with no free card: the tie goes by name; the failed card is never handed out.
    assert ok.placement.node == "node-a" and ok.placement.gpus == (1,)
    assert ok.sentences() == []


def test_a_cpu_only_node_and_any_class():
    ns = nodes(register("cpu-1"), register("gpu-1", gpu=gpus(2, "l40s")))
    decision = place(gpu_model(1, gpu_class=""), ns, engines=ENGINES)
    assert decision.placement.node == "gpu-1"
    assert decision.sentences() == ["cpu-1: has no GPUs; the profile needs 1"]


def test_memory_and_cores_are_reserved():
    m = model("mem", profiles=[{"name": "default", "memory": "64GiB", "cores": 8}])
    ns = nodes(register("small", memory=32 * GiB), register("busy", cores=16), register("roomy", cores=16))
    held = [Holding("x-1", "x", "busy", memory=8 * GiB, cores=12)]
    decision = place(m, ns, held, engines=ENGINES)
    assert decision.placement.node == "roomy"
    assert (decision.placement.memory, decision.placement.cores) == (64 * GiB, 8)
    assert decision.sentences() == [
        "busy: needs 8 cores, 4 free",
        "small: needs 64 GiB of memory reserved, has 32 GiB in all",
    ]
    held.append(Holding("y-1", "y", "roomy", memory=200 * GiB))
    decision = place(m, ns, held, engines=ENGINES)
    assert "roomy: needs 64 GiB of memory reserved, 56 GiB free" in decision.sentences()


def test_labels_engines_cordons_and_lost_nodes():
    m = model("tagged", profiles=[{"name": "default", "node_selector": {"llmgw.io/rack": "r1"}}])
    inv = Inventory(clock=lambda: 100.0)
    inv.register(register("a-nolabel"))
    inv.register(register("b-otherrack", labels={"llmgw.io/rack": "r2"}))
    inv.register(register("c-noengine", labels={"llmgw.io/rack": "r1"}, engines={"vllm": "1"}))
    inv.register(register("d-cordoned", labels={"llmgw.io/rack": "r1"}))
    inv.register(register("e-gone", labels={"llmgw.io/rack": "r1"}))
    inv.register(register("f-good", labels={"llmgw.io/rack": "r1"}))
    inv.cordon("d-cordoned", "PDU swap")
    inv.disconnected("e-gone", "connection reset")
    decision = place(m, inv.nodes(), engines=ENGINES)
    assert decision.placement.node == "f-good"
    assert decision.sentences() == [
        "a-nolabel: lacks the label llmgw.io/rack=r1",
        "b-otherrack: its label llmgw.io/rack is r2, the profile wants r1",
        "c-noengine: engine sim is not installed (it has: vllm)",
        "d-cordoned: cordoned: PDU swap",
        "e-gone: its agent is not connected (connection reset)",
    ]
    inv.drain("f-good")
    inv.expire(-1)  # everything silent "too long"
    decision = place(m, inv.nodes(), engines=ENGINES)
    assert decision.placement is None
    assert "f-good: lost: its agent has not been heard from within the heartbeat window" in decision.sentences()


def test_spread_first_then_weights_then_pack():
    m = gpu_model(1)
    ns = nodes(
        register("a", gpu=gpus(8)), register("b", gpu=gpus(8), weights=["big"]), register("c", gpu=gpus(2)),
    )
    # Pack alone: c (1 card left) beats a and b (7 left), whatever holds the weights.
    first = place(m, ns, engines=ENGINES)
    assert first.placement.node == "b"  # holds the weights: ranks above packing
    assert "holds the weights" in first.placement.why
    held = [Holding("big-1", "big", "b", gpus=(0,))]
    second = place(m, ns, held, engines=ENGINES)
    assert second.placement.node == "c"  # spread: not b again; then pack: c over a
    held.append(Holding("big-2", "big", "c", gpus=(0,)))
    third = place(m, ns, held, engines=ENGINES)
    assert third.placement.node == "a"


def test_spread_across_racks():
    m = model("spread")
    ns = nodes(register("a1", labels={"llmgw.io/rack": "r1"}), register("a2", labels={"llmgw.io/rack": "r1"}),
               register("b1", labels={"llmgw.io/rack": "r2"}, cores=64))
    held = [Holding("spread-1", "spread", "a1")]
    assert place(m, ns, held, engines=ENGINES).placement.node == "b1"


def test_spread_across_pdus_too_fewer_shared_first():
    """Two racks on one PDU, a third on its own: the second replica goes to the rack that shares nothing with
    the first; a dual-fed rack sharing one of its feeds comes after one sharing none."""
    m = model("spread")
    ns = nodes(register("a1", labels={"llmgw.io/rack": "r1", "llmgw.io/pdu": "p1"}),
               register("b1", labels={"llmgw.io/rack": "r2", "llmgw.io/pdu": "p1,p2"}),
               register("c1", labels={"llmgw.io/rack": "r3", "llmgw.io/pdu": "p3"}, cores=16))
    held = [Holding("spread-1", "spread", "a1")]
    assert place(m, ns, held, engines=ENGINES).placement.node == "c1"
    held.append(Holding("spread-2", "spread", "c1"))
    # b1 shares p1 with a1; a1 shares its rack and PDU with a replica: b1 shares fewer.
    assert place(m, ns, held, engines=ENGINES).placement.node == "b1"


def test_profiles_in_order_of_preference():
    m = model("two", profiles=[
        {"name": "gpu", "engine": "vllm", "gpus": 1, "gpu_class": "h100-80gb"},
        {"name": "cpu", "engine": "llamacpp", "cores": 4},
    ])
    ns = nodes(register("cpu-only"))
    decision = place(m, ns, engines=ENGINES)
    assert decision.placement.profile.name == "cpu" and decision.placement.engine == "llamacpp"
    assert decision.sentences() == ["cpu-only (gpu): has no GPUs; the profile needs 1"]


def test_avoid_is_for_drain_replacements():
    ns = nodes(register("a"), register("b"))
    decision = place(model(), ns, avoid={"a"}, engines=ENGINES)
    assert decision.placement.node == "b"
    assert decision.sentences() == ["a: the replica it replaces is there"]


def test_preemption_stops_opportunistic_before_standard_and_never_critical():
    ns = nodes(register("a", gpu=gpus(2)), register("b", gpu=gpus(2)))
    held = [
        Holding("std-1", "std", "a", gpus=(0,), model_class="standard"),
        Holding("opp-1", "opp", "a", gpus=(1,), model_class="opportunistic", started=1),
        Holding("crit-1", "crit", "b", gpus=(0, 1), model_class="critical"),
    ]
    critical = model("vip", engine="vllm", profiles=[{"name": "d", "gpus": 1}], **{"class": "critical"})
    decision = place(critical, ns, held, engines=ENGINES)
    assert decision.placement.node == "a" and decision.placement.preempts == ("opp-1",)
    assert decision.placement.gpus == (1,)
    assert decision.sentences() == ["a: needs 1 free GPU, has 0", "b: needs 1 free GPU, has 0"]

    # Two cards: the opportunistic one is not enough, the standard one goes too; never the critical.
    two = model("vip2", engine="vllm", profiles=[{"name": "d", "gpus": 2}], **{"class": "critical"})
    decision = place(two, ns, held, engines=ENGINES)
    assert decision.placement.node == "a" and set(decision.placement.preempts) == {"opp-1", "std-1"}

    # A standard model preempts nothing.
    standard = model("plain", engine="vllm", profiles=[{"name": "d", "gpus": 1}])
    assert place(standard, ns, held, engines=ENGINES).placement is None

    # Where only critical replicas hold the cards, nothing is stopped.
    only_critical = [Holding("crit-2", "crit", "a", gpus=(0, 1), model_class="critical"), held[2]]
    assert place(critical, ns, only_critical, engines=ENGINES).placement is None


def test_preemption_prefers_the_cheapest_node():
    ns = nodes(register("a", gpu=gpus(1)), register("b", gpu=gpus(1)))
    held = [Holding("std-1", "std", "a", gpus=(0,), model_class="standard"),
            Holding("opp-1", "opp", "b", gpus=(0,), model_class="opportunistic")]
    critical = model("vip", engine="vllm", profiles=[{"name": "d", "gpus": 1}], **{"class": "critical"})
    decision = place(critical, ns, held, engines=ENGINES)
    assert (decision.placement.node, decision.placement.preempts) == ("b", ("opp-1",))


def test_no_nodes_at_all():
    decision = place(model(), [], engines=ENGINES)
    assert decision.placement is None and decision.summary() == "no node is connected"


def test_format_bytes():
    assert [format_bytes(n) for n in (512, 1536, 64 * GiB, 3 * (1 << 40))] == ["512 B", "1.5 KiB", "64 GiB", "3 TiB"]
