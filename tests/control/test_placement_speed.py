"""Placement kept from one decision to the next decides as the one-shot algorithm did.

`reference_place` is `place()` as it was before it kept a pass: every node's room
rebuilt and every node checked on each decision, capacity quotas and their
guarantees counted from the holdings each time. Random small clusters, with every
filter, preference, preemption and quota rule in play, are placed one replica after
another through `place()`, through one `PlacementPass` kept across the decisions,
and through the reference; the placements, the sentences and the node counts must
agree, including after holdings are marked as being stopped and nodes change
(test_placement_round.py does the same for the reconciler's whole passes).
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
    _needs,
    _order_key,
    _over_limit_words,
    _Reclaim,
    _rooms,
    _shortfall,
    _victims,
    place,
)
from llmgw.control.quotas import Amounts, CapacityQuota, Quotas, owner_path, under
from llmgw.wire.messages import GpuInfo, WeightsPresent

from .conftest import ENGINES, GiB, model


def reference_place(model, nodes, holdings=(), *, engines=None, avoid=(), preempt=True, quotas=None,
                    held_for=None) -> Decision:
    """The algorithm before it kept anything between decisions, capacity quotas counted afresh each time."""
    nodes = list(nodes)
    holdings = list(holdings)
    avoid = set(avoid) | set(held_for or ())
    rooms = _rooms(nodes, holdings, model.name)
    mine = quotas.of(model.owner) if quotas and model.owner else ()

    def held(quota):
        sums = [0, 0, 0]
        for h in holdings:
            if h.owner and not h.leaving and under(owner_path(h.owner), quota.path):
                sums[0] += len(h.gpus)
                sums[1] += h.cores
                sums[2] += h.memory
        return tuple(sums)

    rejections: list[Rejection] = []
    stopped: list[str] = []
    several = len(model.profiles) > 1
    gated = []
    for profile in model.profiles:
        if mine:
            words = next((w for q in mine if q.limit and (w := _over_limit_words(q, held(q), _needs(profile)))), None)
            if words is not None:
                stopped.append(f"{profile.name}: {words}" if several else words)
                continue
        engine = profile.engine or model.engine
        label = profile.name if several else ""
        fits = []
        short = []
        for node in nodes:
            room = rooms[node.id]
            if node.id in avoid:
                why = (held_for or {}).get(node.id)
                rejections.append(Rejection(node.id, why or "the replica it replaces is there", label))
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
            return Decision(model.name, _allocate(best, profile, engine, model), tuple(rejections), len(nodes),
                            "; ".join(stopped))
        gated.append((profile, engine, short))
    if preempt and (model.class_ == "critical" or mine):
        options = []
        for profile, engine, short in gated:
            guarantee = None
            if model.class_ != "critical":
                guarantee = PlacementPass._guarantee_for(mine, profile, held)
                if guarantee is None:
                    continue
            for room in short:
                reclaim = _Reclaim(quotas, held) if guarantee is not None else None
                victims = _victims(room, profile, model.class_, reclaim)
                if victims is None:
                    continue
                cost = (max(CLASS_RANK.get(v.model_class, 1) for v in victims), len(victims))
                options.append((cost, _order_key(room, profile, model), room, profile, engine, victims, guarantee))
        if options:
            _, _, room, profile, engine, victims, guarantee = min(options, key=lambda o: (o[0], o[1]))
            trial = attrs.evolve(room, held_gpus=room.held_gpus - {g for v in victims for g in v.gpus})
            placement = _allocate(trial, profile, engine, model)
            stops = ", ".join(f"{v.replica_id} ({v.model_class})" for v in victims)
            placement = attrs.evolve(
                placement, preempts=tuple(v.replica_id for v in victims),
                why=f"critical: stops {stops}" if guarantee is None
                else f"within the guarantee of {guarantee.scope}: stops {stops}",
                guarantee=guarantee.scope if guarantee is not None else "",
            )
            return Decision(model.name, placement, tuple(rejections), len(nodes), "; ".join(stopped))
    return Decision(model.name, None, tuple(rejections), len(nodes), "; ".join(stopped))


CLASSES = ("h100-80gb", "a100-80gb", "l4-24gb", "")
ENGINE_SETS = ({"vllm": "1", "llamacpp": "1", "sim": "1"}, {"llamacpp": "1"}, {"sim": "1", "vllm": "1"}, {})
MODEL_NAMES = [f"m{i}" for i in range(6)]
OWNERS = ("", "org:globex", "team:globex/ml", "project:globex/ml/train", "team:initech/x")


def random_quotas(rng: random.Random) -> Quotas:
    """Limits and guarantees on some of the owners' scopes (none, at times)."""
    def amounts(*gpus: int | None) -> Amounts:
        return Amounts(gpus=rng.choice(gpus), cores=rng.choice((None, None, 8, 32)),
                       memory=rng.choice((None, None, 64 * GiB)))

    out = []
    for scope in OWNERS[1:]:
        if rng.random() < 0.6:
            limit = amounts(None, 0, 1, 2, 4, 8, 16) if rng.random() < 0.5 else Amounts()
            guaranteed = amounts(None, 2, 8, 16, 32) if rng.random() < 0.7 else Amounts()
            out.append(CapacityQuota(scope, owner_path(scope), limit, guaranteed))
    return Quotas(out)


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
                      source=made.choice(("", "hf://x", "hf://y")), owner=made.choice(OWNERS),
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
                   spare=rng.random() < 0.5, started=rng.random(), owner=rng.choice(OWNERS),
                   leaving=rng.random() < 0.1)


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
    quotas = random_quotas(rng) if rng.random() < 0.7 else None
    own = PlacementPass(nodes, holdings, engines=engines)
    read_later = []  # the pass's decisions, their sentences read only after later decisions
    for step in range(25):
        m = rng.choice(models)
        avoid = {rng.choice(nodes).id} if rng.random() < 0.15 else set()
        held_for = {rng.choice(nodes).id: "waiting: its cards were taken for critical model x"} \
            if rng.random() < 0.1 else None
        preempt = rng.random() < 0.8
        options = dict(engines=engines, avoid=avoid, preempt=preempt, quotas=quotas, held_for=held_for)
        expected = reference_place(m, nodes, holdings, **options)
        got = place(m, nodes, holdings, **options)
        same(got, expected)
        ours = own.decide(m, avoid=avoid, preempt=preempt, quotas=quotas, held_for=held_for)
        assert ours.placement == expected.placement
        assert ours.quota == expected.quota
        read_later.append((ours, expected))
        p = expected.placement
        if p is not None and p.preempts:  # the victims are being stopped: they hold their cards, count for nothing
            for i, h in enumerate(holdings):
                if h.replica_id in p.preempts:
                    holdings[i] = attrs.evolve(h, leaving=True)
            for victim in p.preempts:
                own.relabel(victim, leaving=True)
        elif p is not None:
            h = Holding(f"new-{step}", m.name, p.node, gpus=p.gpus, memory=p.memory, cores=p.cores,
                        model_class=m.class_, owner=m.owner)
            holdings.append(h)
            own.hold(h)
        roll = rng.random()
        if roll < 0.05 and holdings:  # one is made spare, or no longer
            i = rng.randrange(len(holdings))
            holdings[i] = attrs.evolve(holdings[i], spare=not holdings[i].spare)
            own.relabel(holdings[i].replica_id, spare=holdings[i].spare)
            for j, other in enumerate(holdings):  # a replica id names all its holdings
                if other.replica_id == holdings[i].replica_id:
                    holdings[j] = attrs.evolve(other, spare=holdings[i].spare)
        elif roll < 0.1:
            change_a_node(rng, nodes)  # in place: the next pass is made anew, as the reconciler's is
            own = PlacementPass(nodes, holdings, engines=engines)
        elif roll < 0.15:
            holdings = [attrs.evolve(h) for h in holdings]  # equal, not the same: as the reconciler passes them
        elif roll < 0.2 and holdings:
            holdings.pop(rng.randrange(len(holdings)))  # one stopped
            own = PlacementPass(nodes, holdings, engines=engines)
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
