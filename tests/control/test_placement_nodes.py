"""A replica over several nodes: placed on nodes of ONE fabric, each with its cards, and explained when no
fabric has room."""

from __future__ import annotations

import attrs
import pytest

from llmgw.control.catalog import CatalogError, check_engines
from llmgw.control.inventory import Inventory
from llmgw.control.placement import Holding, place
from llmgw.wire import messages as w

from .conftest import ENGINES, FakeEngine, gpus, model, register

FAB_A = "ib:fe80:0000:0000:0000/0x7fff"
FAB_B = "ib:fe80:0000:0000:0001/0x7fff"


def on_fabric(reg: w.Register, *fabrics: str, nvlink: bool = False) -> w.Register:
    inv = reg.inventory
    cards = tuple(attrs.evolve(g, nvlink_links=18) for g in inv.gpus) if nvlink else inv.gpus
    return attrs.evolve(reg, inventory=attrs.evolve(inv, fabrics=tuple(fabrics), gpus=cards))


def nodes(*regs):
    inv = Inventory(clock=lambda: 100.0)
    for reg in regs:
        inv.register(reg)
    return inv.nodes()


def big(nodes_: int = 2, gpus_: int = 8, **profile):
    return model("llama-405b", engine="vllm", profiles=[{"name": "h100x16", "gpus": gpus_, "gpu_class": "h100-80gb",
                                                          "nodes": nodes_, **profile}])


def test_two_nodes_of_one_fabric_each_with_its_cards_rank_0_first():
    ns = nodes(on_fabric(register("gpu-01", gpu=gpus(8)), FAB_A),
               on_fabric(register("gpu-02", gpu=gpus(8)), FAB_B),
               on_fabric(register("gpu-03", gpu=gpus(8)), FAB_A))
    decision = place(big(), ns, engines=ENGINES)
    p = decision.placement
    assert p is not None
    assert p.nodes == ("gpu-01", "gpu-03")  # the two on fabric A; gpu-02 is alone on B
    assert p.gpus == tuple(range(8)) and p.workers == (("gpu-03", tuple(range(8))),)
    assert p.why == f"2 nodes on fabric {FAB_A}, rank 0 on gpu-01"
    assert decision.summary().startswith("placed on gpu-01, gpu-03")


def test_never_across_fabrics_and_the_reason_names_each_fabric():
    ns = nodes(on_fabric(register("gpu-01", gpu=gpus(8)), FAB_A),
               on_fabric(register("gpu-02", gpu=gpus(8)), FAB_B),
               register("gpu-03", gpu=gpus(8)),  # no fabric id: never part of a set
               on_fabric(register("gpu-04", gpu=gpus(4)), FAB_A))
    decision = place(big(), ns, engines=ENGINES)
    assert decision.placement is None
    assert decision.fabric == (
        f"no fabric has 2 nodes with 8 free GPUs of class h100-80gb: fabric {FAB_A} has 1 (gpu-01); "
        f"fabric {FAB_B} has 1 (gpu-02); gpu-03 has room but reports no RDMA fabric")
    assert decision.sentences() == ["gpu-04: needs 8 free GPUs of class h100-80gb, has 4 healthy card of that "
                                    "kind in all".replace("4 healthy card", "4 healthy cards")]
    assert decision.summary().startswith("no fabric has 2 nodes with 8 free GPUs")


def test_cards_held_by_others_count_on_every_node_and_each_rank_holds_its_own():
    ns = nodes(*(on_fabric(register(f"gpu-0{i}", gpu=gpus(8)), FAB_A) for i in range(1, 4)))
    held = [Holding("other-1", "other", "gpu-01", gpus=(0,))]
    first = place(big(), ns, held, engines=ENGINES).placement
    assert first.nodes == ("gpu-02", "gpu-03")
    # What the first replica holds on both its nodes: no room is left for a second one.
    held += [Holding("r1", "llama-405b", "gpu-02", gpus=first.gpus), Holding("r1", "llama-405b", "gpu-03",
                                                                                 gpus=first.workers[0][1])]
    again = place(big(), ns, held, engines=ENGINES)
    assert again.placement is None
    assert again.fabric.startswith(f"no fabric has 2 nodes with 8 free GPUs of class h100-80gb: fabric {FAB_A} has 0")
    assert "gpu-01: needs 8 free GPUs of class h100-80gb, has 7" in again.sentences()


def test_nvlink_nodes_are_preferred_and_the_operator_label_joins_a_fabric():
    ns = nodes(on_fabric(register("gpu-01", gpu=gpus(4)), FAB_A),
               on_fabric(register("gpu-02", gpu=gpus(4)), FAB_A, nvlink=True),
               register("gpu-03", gpu=gpus(4), labels={"llmgw.io/fabric": FAB_A}),
               attrs.evolve(on_fabric(register("gpu-04", gpu=gpus(4)), FAB_A, nvlink=True)))
    p = place(big(gpus_=4), ns, engines=ENGINES).placement
    assert p.nodes == ("gpu-02", "gpu-04")
    three = place(big(nodes_=4, gpus_=4), ns, engines=ENGINES).placement
    assert set(three.nodes) == {"gpu-01", "gpu-02", "gpu-03", "gpu-04"}


@pytest.mark.parametrize("profile, problem", [
    ({"gpus": 8, "nodes": 2, "tensor_parallel": 8, "pipeline_parallel": 3},
     "profiles[0].tensor_parallel: tensor_parallel × pipeline_parallel is 8 × 3 = 24, but the replica has "
     "gpus × nodes = 8 × 2 = 16 cards; they must be equal"),
    ({"gpus": 0, "nodes": 2}, "profiles[0].nodes: a replica over 2 nodes runs on GPUs"),
    ({"gpus": 8, "nodes": 0}, "profiles[0].nodes: must be at least 1, got 0"),
    ({"gpus": 4, "nodes": 2, "pipeline_parallel": 3}, "profiles[0].pipeline_parallel: 3 does not divide the "
                                                       "replica's 8 cards"),
])
def test_parallel_sizes_are_checked_naming_the_key(profile, problem):
    with pytest.raises(CatalogError) as info:
        model("bad", engine="vllm", profiles=[{"name": "p", **profile}])
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


def test_tensor_and_pipeline_sizes_that_multiply_to_the_cards_are_taken():
    m = model("ok", engine="vllm", profiles=[{"name": "p", "gpus": 8, "nodes": 2, "tensor_parallel": 8,
                                              "pipeline_parallel": 2}])
    assert m.profiles[0].nodes == 2 and check_engines(m, ENGINES) == []


def test_an_engine_that_runs_on_one_node_only_is_refused_for_several():
    m = model("one", engine="llamacpp", profiles=[{"name": "p", "gpus": 1, "nodes": 2}])
    engines = {**ENGINES, "llamacpp": FakeEngine("llamacpp", ("cpu", "gpu"))}
    assert check_engines(m, engines) == [
        "profiles[0].nodes: engine llamacpp runs a replica on one node only; set nodes to 1, or use an engine "
        "that spans nodes (vllm)"]
