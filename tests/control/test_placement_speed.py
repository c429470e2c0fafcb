"""Placement kept from one decision to the next decides as the one-shot algorithm did.

`reference_place` is `place()` as it was before it kept a pass: every node's room
rebuilt and every node checked on each decision. Random small clusters, with every
filter, preference and preemption in play, are placed one replica after another
through `place()` (which reuses its pass), through a `PlacementPass`, and through
the reference; the placements, the sentences and the node counts must agree,
including after nodes change in place between decisions.
"""

from __future__ import annotations

import random

import attrs
import pytest

from llmgw.control.inventory import Node
from llmgw.control.placement import (
    CLASS_RANK,
    RACK_LABEL,
    Decision,
    Holding,
    PlacementPass,
    Rejection,
    _allocate,
    _gate,
    _order_key,
    _rooms,
    _shortfall,
    _victims,
    place,
)
from llmgw.wire.messages import GpuInfo, WeightsPresent

from .conftest import ENGINES, GiB, model


def reference_place(model, nodes, holdings=(), *, engines=None, avoid=(), preempt=True) -> Decision:
    """The algorithm before it kept anything between decisions (unchanged but for the name)."""
    nodes = list(nodes)
    holdings = list(holdings)
    avoid = set(avoid)
    rooms = _rooms(nodes, holdings, model.name)
    rejections: list[Rejection] = []
    several = len(model.profiles) > 1
    gated = []
    for profile in model.profiles:
        engine = profile.engine or model.engine
        label = profile.name if several else ""
        fits = []
        short = []
        for node in nodes:
            room = rooms[node.id]
            if node.id in avoid:
                rejections.append(Rejection(node.id, "the replica it replaces is there", label))
                continue
            reason = _gate(room, profile, engine, engines)
            if reason is None:
                reason = _shortfall(room, profile)
                if reason is not None:
                    short.append(room)
            if reason is not None:
                rejections.append(Rejection(node.id, reason, label))
                continue
            fits.append(room)
        if fits:
            best = min(fits, key=lambda r: _order_key(r, profile, model))
            return Decision(model.name, _allocate(best, profile, engine, model), tuple(rejections), len(nodes))
        gated.append((profile, engine, short))
    if preempt and model.class_ == "critical":
        options = []
        for profile, engine, short in gated:
            for room in short:
                victims = _victims(room, profile, model.class_)
                if victims is None:
                    continue
                cost = (max(CLASS_RANK.get(v.model_class, 1) for v in victims), len(victims))
                options.append((cost, _order_key(room, profile, model), room, profile, engine, victims))
        if options:
            _, _, room, profile, engine, victims = min(options, key=lambda o: (o[0], o[1]))
            trial = attrs.evolve(room, held_gpus=room.held_gpus - {g for v in victims for g in v.gpus})
            placement = _allocate(trial, profile, engine, model)
            placement = attrs.evolve(
                placement, preempts=tuple(v.replica_id for v in victims),
                why=f"critical: stops {', '.join(f'{v.replica_id} ({v.model_class})' for v in victims)}",
            )
            return Decision(model.name, placement, tuple(rejections), len(nodes))
    return Decision(model.name, None, tuple(rejections), len(nodes))


CLASSES = ("h100-80gb", "a100-80gb", "l4-24gb", "")
ENGINE_SETS = ({"vllm": "1", "llamacpp": "1", "sim": "1"}, {"llamacpp": "1"}, {"sim": "1", "vllm": "1"}, {})
MODEL_NAMES = [f"m{i}" for i in range(6)]


def random_node(rng: random.Random, i: int) -> Node:
    cards = rng.choice((0, 1, 2, 4, 8, 8))
    classes = rng.sample(CLASSES, rng.choice((1, 1, 1, 2)))
    gpus = tuple(GpuInfo(index=g, gpu_class=rng.choice(classes), memory_total_bytes=80 * GiB,
                         health="failed" if rng.random() < 0.1 else "ok") for g in range(cards))
    labels = {}
    if rng.random() < 0.8:
        labels[RACK_LABEL] = rng.choice(("r1", "r2", "r3"))
    if rng.random() < 0.3:
        labels["zone"] = rng.choice(("a", "b"))
    weights = {}
    for name in rng.sample(MODEL_NAMES, rng.choice((0, 0, 1, 2))):
        weights[name] = WeightsPresent(model=name, source=rng.choice(("", "hf://x", "hf://y")))
    node = Node(id=f"n{i:02d}-{rng.randrange(100)}", labels=labels, engines=dict(rng.choice(ENGINE_SETS)),
                gpus=gpus, cores=rng.choice((4, 16, 64)), memory_total=rng.choice((16, 64, 512)) * GiB,
                weights=weights, connected=rng.random() > 0.05)
    node.lost = not node.connected and rng.random() < 0.5
    node.cordoned = rng.random() < 0.08
    node.cordon_reason = rng.choice(("", "PDU swap")) if node.cordoned else ""
    node.draining = rng.random() < 0.04
    return node


def random_profile(rng: random.Random, name: str) -> dict:
    profile = {"name": name, "engine": rng.choice(("vllm", "llamacpp", "sim"))}
    if rng.random() < 0.7:
        profile["gpus"] = rng.choice((1, 1, 2, 4, 8))
        profile["gpu_class"] = rng.choice(CLASSES)
    if rng.random() < 0.4:
        profile["cores"] = rng.choice((2, 8, 32))
    if rng.random() < 0.4:
        profile["memory"] = f"{rng.choice((8, 32, 128))}GiB"
    if rng.random() < 0.15:
        profile["node_selector"] = {rng.choice((RACK_LABEL, "zone")): rng.choice(("r1", "a"))}
    if profile["engine"] == "vllm" and not profile.get("gpus"):
        profile["engine"] = "sim"
    return profile


_POOL: dict[str, list] = {}


def random_models(rng: random.Random) -> list:
    """One model of each name, drawn from a pool made once (parsing a model is slow)."""
    if not _POOL:
        made = random.Random(1)
        for name in MODEL_NAMES:
            _POOL[name] = [
                model(name, profiles=[random_profile(made, f"p{k}") for k in range(made.choice((1, 1, 2)))],
                      source=made.choice(("", "hf://x", "hf://y")),
                      **{"class": made.choice(("critical", "standard", "opportunistic"))})
                for _ in range(8)
            ]
    return [rng.choice(_POOL[name]) for name in MODEL_NAMES]


def random_holding(rng: random.Random, i: int, nodes: list[Node], models: list) -> Holding:
    node = rng.choice(nodes)
    cards = [g.index for g in node.gpus]
    return Holding(f"h{i}", rng.choice(models).name, node.id if rng.random() > 0.05 else "gone",
                   gpus=tuple(rng.sample(cards, rng.randint(0, len(cards)))) if cards else (),
                   memory=rng.choice((0, 8 * GiB)), cores=rng.choice((0, 2, 8)),
                   model_class=rng.choice(("critical", "standard", "opportunistic")),
                   spare=rng.random() < 0.5, started=rng.random())


def same(ours: Decision, theirs: Decision) -> None:
    assert ours.placement == theirs.placement
    assert ours.sentences() == theirs.sentences()
    assert ours.summary() == theirs.summary()
    assert ours.nodes_considered == theirs.nodes_considered


def change_a_node(rng: random.Random, nodes: list[Node]) -> None:
    node = rng.choice(nodes)
    what = rng.randrange(6)
    if what == 0:
        node.cordoned, node.cordon_reason = not node.cordoned, "disk swap"
    elif what == 1:
        node.weights[rng.choice(MODEL_NAMES)] = WeightsPresent(model="x", source="hf://x")
    elif what == 2:
        node.labels[RACK_LABEL] = rng.choice(("r1", "r2", "r9"))  # in place
    elif what == 3:
        node.gpus = tuple(attrs.evolve(g, health="failed") if g.index == 0 else g for g in node.gpus)
    elif what == 4:
        node.connected = not node.connected
    else:
        node.engines.pop("vllm", None)


@pytest.mark.parametrize("seed", range(200))
def test_a_pass_decides_as_the_reference_does(seed):
    rng = random.Random(seed)
    nodes = [random_node(rng, i) for i in range(rng.randint(1, 9))]
    if rng.random() < 0.1:
        nodes.append(nodes[0])  # the same node twice
    models = random_models(rng)
    holdings = [random_holding(rng, i, nodes, models) for i in range(rng.randint(0, 6))]
    engines = ENGINES if rng.random() < 0.8 else None
    own = PlacementPass(nodes, holdings, engines=engines)
    own_nodes_changed = False
    read_later = []  # the pass's decisions, their sentences read only after later decisions
    for step in range(25):
        m = rng.choice(models)
        avoid = {rng.choice(nodes).id} if rng.random() < 0.15 else set()
        preempt = rng.random() < 0.8
        expected = reference_place(m, nodes, holdings, engines=engines, avoid=avoid, preempt=preempt)
        got = place(m, nodes, holdings, engines=engines, avoid=avoid, preempt=preempt)
        same(got, expected)
        if not own_nodes_changed:
            ours = own.decide(m, avoid=avoid, preempt=preempt)
            assert ours.placement == expected.placement
            read_later.append((ours, expected))
        p = expected.placement
        if p is not None and not p.preempts:
            h = Holding(f"new-{step}", m.name, p.node, gpus=p.gpus, memory=p.memory, cores=p.cores,
                        model_class=m.class_)
            holdings.append(h)
            own.hold(h)
        roll = rng.random()
        if roll < 0.1:
            change_a_node(rng, nodes)
            own_nodes_changed = True
        elif roll < 0.15:
            holdings = [attrs.evolve(h) for h in holdings]  # equal, not the same: as the reconciler passes them
        elif roll < 0.2 and holdings:
            holdings.pop(rng.randrange(len(holdings)))  # one stopped
            own = PlacementPass(nodes, holdings, engines=engines)
            own_nodes_changed = False
    for ours, expected in read_later:
        same(ours, expected)


def test_sentences_are_the_rooms_as_the_decision_saw_them():
    nodes = [Node(id="a", engines={"sim": "1"}, cores=8, connected=True),
             Node(id="b", engines={"sim": "1"}, cores=8, connected=True)]
    m = model("m", profiles=[{"name": "default", "cores": 8}])
    holdings = [Holding("x", "x", "a", cores=4)]
    first = place(m, nodes, holdings, engines=ENGINES)
    holdings.append(Holding("m-1", "m", first.placement.node, cores=8))
    nodes[0].cordoned = True
    second = place(m, nodes, holdings, engines=ENGINES)
    assert second.placement is None
    assert second.sentences() == ["a: cordoned", "b: needs 8 cores, 0 free"]
    # Read after later decisions, the first is still as it was.
    assert first.sentences() == ["a: needs 8 cores, 4 free"]
