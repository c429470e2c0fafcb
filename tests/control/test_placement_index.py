"""A pass's packing index (placement_index.py) chooses as a plain scan over every node does.

The plain scan: for each of the model's profiles in order, every node that passes
the profile's filters and has room now, not avoided, ranked by placement's whole
order (`_order_key`: fewest of the model's replicas on the node, then in its rack
and PDUs, weights already there, packing, node id); the first profile with such a
node wins. Random clusters of many racks (nodes without one, nodes on one or two
PDUs, so some share a rack but not their PDUs) are placed one replica after
another, each placement held, until models have replicas in every rack and the
spread has to weigh racks against each other; every choice must be the scan's.
"""

from __future__ import annotations

import random

import pytest

from llmgw.control.inventory import Node
from llmgw.control.devices import node_devices
from llmgw.control.placement import PDU_LABEL, RACK_LABEL, Holding, PlacementPass, _gate, _Room, spread_domains
from llmgw.wire.messages import GpuInfo, WeightsPresent

from .conftest import ENGINES, GiB, model

CLASSES = ("h100-80gb", "l4-24gb")
NAMES = ("m0", "m1", "m2", "m3")
_POOL: dict[str, list] = {}


def models(rng: random.Random) -> list:
    """One model of each name, drawn from a pool made once (parsing a model is slow)."""
    if not _POOL:
        made = random.Random(5)
        for name in NAMES:
            _POOL[name] = []
            for _ in range(6):
                profiles = []
                for k in range(made.choice((1, 1, 2))):
                    profile = {"name": f"p{k}", "engine": made.choice(("vllm", "sim"))}
                    if profile["engine"] == "vllm" or made.random() < 0.5:
                        profile["gpus"] = made.choice((1, 1, 2, 4))
                        profile["gpu_class"] = made.choice((*CLASSES, ""))
                    if made.random() < 0.3:
                        profile["cores"] = made.choice((4, 16))
                    if made.random() < 0.3:
                        profile["memory"] = f"{made.choice((16, 64))}GiB"
                    profiles.append(profile)
                _POOL[name].append(model(name, profiles=profiles, source=made.choice(("", "hf://w"))))
    return [rng.choice(_POOL[name]) for name in NAMES]


def cluster(rng: random.Random) -> list[Node]:
    racks = rng.randint(1, 9)
    nodes = []
    for i in range(rng.randint(4, 40)):
        labels = {}
        if rng.random() < 0.9:
            labels[RACK_LABEL] = f"r{rng.randrange(racks)}"
        if rng.random() < 0.25:
            labels[PDU_LABEL] = ",".join(rng.sample(("p1", "p2", "p3"), rng.choice((1, 2))))
        classes = rng.sample(CLASSES, rng.choice((1, 1, 2)))
        gpus = tuple(GpuInfo(index=g, gpu_class=rng.choice(classes), memory_total_bytes=80 * GiB,
                             health="failed" if rng.random() < 0.05 else "ok")
                     for g in range(rng.choice((0, 2, 4, 8, 8))))
        weights = {name: WeightsPresent(model=name, source=rng.choice(("", "hf://w")))
                   for name in NAMES if rng.random() < 0.08}
        nodes.append(Node(id=f"n{i:02d}", labels=labels, engines={"vllm": "1", "sim": "1"}, gpus=gpus,
                          cores=rng.choice((16, 32, 64)), memory_total=rng.choice((64, 256)) * GiB, weights=weights,
                          connected=rng.random() > 0.03))
    rng.shuffle(nodes)  # the list's order is not the id order
    return nodes


def plain_scan(m, nodes: list[Node], holdings: list[Holding], avoid: set[str], known: dict) -> tuple[str, str] | None:
    """(node, profile) placement's order ranks first over every node, or None when none has room.

    The order, as placement.py's docstring gives it: fewest replicas of the model on the node, then in its rack
    and PDUs; the weights there; fewest free cards left, then cores, then memory; the node id."""
    held: dict[str, set[int]] = {}
    memory: dict[str, int] = {}
    cores: dict[str, int] = {}
    here: dict[str, int] = {}
    in_domain: dict[str, int] = {}
    if not known:  # what does not change: each node's domains and devices, and which profiles' filters it passes
        known.update((node.id, (spread_domains(node), node_devices(node.gpus))) for node in nodes)
    domains = {node_id: facts[0] for node_id, facts in known.items() if isinstance(node_id, str)}
    for h in holdings:
        held.setdefault(h.node, set()).update(h.gpus)
        memory[h.node] = memory.get(h.node, 0) + h.memory
        cores[h.node] = cores.get(h.node, 0) + h.cores
        if h.model == m.name and h.node in domains:
            here[h.node] = here.get(h.node, 0) + 1
            for d in domains[h.node]:
                in_domain[d] = in_domain.get(d, 0) + 1
    for profile in m.profiles:
        engine = profile.engine or m.engine
        ranked = []
        for node in nodes:
            key = (id(profile), node.id)
            if key not in known:  # the filters do not depend on what is held
                known[key] = _gate(_Room(node, set(), 0, 0, 0, 0, []), profile, engine, ENGINES) is None
            if node.id in avoid or not known[key]:
                continue
            usable = [d for d in known[node.id][1] if d.usable and d.index not in held.get(node.id, ())]
            free = sum(1 for d in usable if not profile.gpu_class or d.gpu_class == profile.gpu_class)
            memory_free, cores_free = node.memory_total - memory.get(node.id, 0), node.cores - cores.get(node.id, 0)
            if (profile.gpus and free < profile.gpus) or (profile.memory and memory_free < profile.memory) \
                    or (profile.cores and cores_free < profile.cores):
                continue
            ranked.append(((here.get(node.id, 0), sum(in_domain.get(d, 0) for d in domains[node.id]),
                            0 if node.holds_weights(m.name, m.source) else 1, len(usable) - profile.gpus,
                            cores_free - profile.cores, memory_free - profile.memory, node.id), profile.name))
        if ranked:
            key, name = min(ranked)
            return key[-1], name
    return None


@pytest.mark.parametrize("seed", range(300))
def test_the_index_chooses_as_a_scan_over_every_node(seed):
    rng = random.Random(seed)
    nodes = cluster(rng)
    catalog = models(rng)
    holdings = [Holding(f"old-{i}", rng.choice(NAMES), rng.choice(nodes).id, cores=rng.choice((0, 4)))
                for i in range(rng.randint(0, 6))]
    placement = PlacementPass(nodes, holdings, engines=ENGINES)
    known: dict = {}
    for i in range(rng.randint(10, 50)):
        m = rng.choice(catalog)
        avoid = {rng.choice(nodes).id} if rng.random() < 0.1 else set()
        decision = placement.decide(m, avoid=avoid, preempt=False)
        chosen = decision.placement
        assert ((chosen.node, chosen.profile.name) if chosen else None) == plain_scan(m, nodes, holdings, avoid, known), \
            f"decision {i}: {decision.summary()}"
        if chosen is not None:
            held = Holding(f"r-{i}", m.name, chosen.node, gpus=chosen.gpus, memory=chosen.memory, cores=chosen.cores)
            holdings.append(held)
            placement.hold(held)
