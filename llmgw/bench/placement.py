"""`llmgw bench placement`: how long placement takes on large clusters, and how well it packs.

A synthetic cluster of N nodes (mixed GPU classes and CPU-only nodes, in
racks of 20) and a catalog of models of every size are built from a seed.
Then a full placement pass asks for R replicas, one after another, as the
reconciler does when a control plane starts: each decision sees what the
ones before it hold. As the reconciler does, one placement round
(llmgw/control/placement_round.py) is made for the pass and makes every
decision, each started replica held in it. The same pass is then made the
way the reconciler made it before it kept a round: `place()` called for
each decision, which kept its last pass in a module global and, at every
call, checked each node's facts and the holdings against what it kept
before reusing it (`PreviousPlace`, that code as it was); every decision
must agree. A naive first fit (the first node, by id, with room) makes the
decisions again on a copy, for comparison.

What it reports per cluster size: the pass's time (wall clock, and this
process's CPU time, which other work on the machine disturbs less; the
median of `repeat` passes, each through a new round), how that time grew
from the previous size's (and that growth over the cluster's: 1.00 is
linear), the previous way's time, one decision's time on the full cluster,
replicas placed, and two measures of quality:

- **big holes**: 8-card nodes left wholly free, i.e. how many more 8-GPU
  replicas could still start. Packing small replicas tightly keeps these.
- **worst stack**: the most replicas of one model on one node. Fewer is
  better: a node that fails takes fewer of a model's replicas with it.
"""

from __future__ import annotations

import itertools
from operator import attrgetter, is_
import random
import statistics
import time

import attrs

from llmgw.bench.stats import describe_machine, machine, ratio
from llmgw.config.server import ModelConfig, Profile
from llmgw.control.catalog import parse_model
from llmgw.control.inventory import Node
from llmgw.control.placement import RACK_LABEL, Decision, Holding, PlacementPass
from llmgw.control.placement_round import PlacementRound, collector_paused
from llmgw.wire.messages import GpuInfo

GiB = 1 << 30
#: Node kinds: (share of the cluster, GPU class, cards, cores, memory in GiB, engines).
NODE_KINDS = (
    (0.50, "h100-80gb", 8, 96, 1024, ("vllm", "llamacpp")),
    (0.25, "a100-80gb", 8, 64, 512, ("vllm", "llamacpp")),
    (0.15, "l4-24gb", 4, 32, 256, ("vllm", "llamacpp")),
    (0.10, "", 0, 64, 512, ("llamacpp",)),
)
#: Model kinds: (share of the replicas asked for, profiles in order of preference).
MODEL_KINDS = (
    (0.10, [{"name": "h100", "engine": "vllm", "gpus": 8, "gpu_class": "h100-80gb"},
            {"name": "a100", "engine": "vllm", "gpus": 8, "gpu_class": "a100-80gb"}]),
    (0.15, [{"name": "h100", "engine": "vllm", "gpus": 4, "gpu_class": "h100-80gb"},
            {"name": "a100", "engine": "vllm", "gpus": 4, "gpu_class": "a100-80gb"}]),
    (0.20, [{"name": "any", "engine": "vllm", "gpus": 2}]),
    (0.40, [{"name": "l4", "engine": "vllm", "gpus": 1, "gpu_class": "l4-24gb"},
            {"name": "any", "engine": "vllm", "gpus": 1}]),
    (0.15, [{"name": "cpu", "engine": "llamacpp", "cores": 8, "memory": "32GiB"}]),
)
MODELS_PER_KIND = 20


@attrs.frozen
class PlacementBench:
    sizes: tuple[int, ...] = (250, 500, 1000, 2000)
    replicas_per_node: float = 2.0
    decisions_timed: int = 20  # single decisions on the full cluster, for decision_ms
    seed: int = 7
    repeat: int = 3  # passes through a new round per size; their median is reported

    def __attrs_post_init__(self) -> None:
        if not self.sizes or min(self.sizes) < 1:
            raise ValueError("--nodes: one or more cluster sizes, each at least 1")
        if self.replicas_per_node <= 0:
            raise ValueError("--replicas-per-node: more than 0")
        if self.repeat < 1:
            raise ValueError("--repeat: at least 1 pass per size")


def cluster(size: int, rng: random.Random) -> list[Node]:
    """`size` connected nodes, kinds in NODE_KINDS' shares, racks of 20."""
    kinds = [k for k in NODE_KINDS for _ in range(max(1, round(k[0] * 100)))]
    nodes = []
    for i in range(size):
        _, gpu_class, cards, cores, memory, engines = rng.choice(kinds)
        gpus = tuple(GpuInfo(index=g, gpu_class=gpu_class, name=gpu_class, memory_total_bytes=80 * GiB)
                     for g in range(cards))
        nodes.append(Node(id=f"node-{i:05d}", labels={RACK_LABEL: f"rack-{i // 20:04d}"},
                          engines={e: "1" for e in engines}, gpus=gpus, cores=cores,
                          memory_total=memory * GiB, memory_available=memory * GiB, connected=True))
    return nodes


def catalog() -> list[tuple[float, list[ModelConfig]]]:
    """MODELS_PER_KIND models of each kind, with the kind's share."""
    out = []
    for k, (share, profiles) in enumerate(MODEL_KINDS):
        models = [parse_model({"name": f"model-{k}-{i:02d}", "profiles": profiles}) for i in range(MODELS_PER_KIND)]
        out.append((share, models))
    return out


def asked(count: int, rng: random.Random) -> list[ModelConfig]:
    """The replicas a pass places, in the order it places them."""
    kinds = catalog()
    weights = [share for share, _ in kinds]
    return [rng.choice(kinds[rng.choices(range(len(kinds)), weights)[0]][1]) for _ in range(count)]


# ---------------------------------------------------------------- first fit, for comparison


@attrs.define
class _Free:
    gpus: dict[str, list[int]]  # class -> free healthy card indexes
    cores: int
    memory: int
    engines: frozenset[str]


def first_fit(models: list[ModelConfig], nodes: list[Node]) -> list[Holding]:
    """The first node by id with room for the first profile that fits anywhere; no spreading."""
    free = {}
    for n in nodes:
        by_class: dict[str, list[int]] = {}
        for g in n.gpus:
            by_class.setdefault(g.gpu_class, []).append(g.index)
        free[n.id] = _Free(by_class, n.cores, n.memory_total, frozenset(n.engines))
    order = [n.id for n in sorted(nodes, key=lambda n: n.id)]
    holdings = []
    for i, model in enumerate(models):
        spot = _first_spot(model, order, free)
        if spot is None:
            continue
        node_id, profile, cls = spot
        room = free[node_id]
        cards = tuple(room.gpus[cls][:profile.gpus]) if profile.gpus else ()
        if profile.gpus:
            room.gpus[cls] = room.gpus[cls][profile.gpus:]
        room.cores -= profile.cores
        room.memory -= int(profile.memory)
        holdings.append(Holding(f"ff-{i}", model.name, node_id, gpus=cards, memory=int(profile.memory),
                                cores=profile.cores))
    return holdings


def _first_spot(model: ModelConfig, order: list[str], free: dict[str, _Free]) -> tuple[str, Profile, str] | None:
    for profile in model.profiles:
        engine = profile.engine or model.engine
        for node_id in order:
            room = free[node_id]
            if engine not in room.engines or room.cores < profile.cores or room.memory < int(profile.memory):
                continue
            if not profile.gpus:
                return node_id, profile, ""
            classes = [profile.gpu_class] if profile.gpu_class else list(room.gpus)
            for cls in classes:
                if len(room.gpus.get(cls, ())) >= profile.gpus:
                    return node_id, profile, cls
    return None


# ---------------------------------------------------------------- quality


def quality(holdings: list[Holding], nodes: list[Node]) -> dict:
    held: dict[str, int] = {}
    stacks: dict[tuple[str, str], int] = {}
    for h in holdings:
        held[h.node] = held.get(h.node, 0) + len(h.gpus)
        stacks[(h.node, h.model)] = stacks.get((h.node, h.model), 0) + 1
    used_nodes = {h.node for h in holdings}
    big_holes = sum(1 for n in nodes if len(n.gpus) == 8 and held.get(n.id, 0) == 0)
    gpus_total = sum(len(n.gpus) for n in nodes)
    return {
        "placed": len(holdings),
        "gpus_used": sum(held.values()),
        "gpu_use": round(sum(held.values()) / gpus_total, 3) if gpus_total else 0.0,
        "nodes_used": len(used_nodes),
        "big_holes": big_holes,
        "worst_stack": max(stacks.values(), default=0),
    }


# ---------------------------------------------------------------- the previous way, for comparison


#: What of a node the previous place() compared before reusing the pass it kept.
_NODE_FACTS = attrgetter("id", "lost", "connected", "disconnect_reason", "draining", "cordoned", "cordon_reason",
                         "gpus", "memory_total", "cores", "labels", "engines", "weights", "fabrics")
_HOLDING_FACTS = attrgetter("node", "model", "gpus", "memory", "cores")


def _facts(node: Node) -> tuple:
    facts = _NODE_FACTS(node)
    return (*facts[:10], dict(facts[10]), dict(facts[11]), dict(facts[12]), *facts[13:])


class PreviousPlace:
    """`place()` as the reconciler called it before it kept a round, for one decision at a time: it kept its last
    pass and reused it when the nodes were the same objects with the same facts (checked at every call) and the
    holdings those it held plus new ones (the same objects, or equal where the rooms are concerned)."""

    def __init__(self) -> None:
        self.kept: PlacementPass | None = None
        self.node_facts: list[tuple] = []
        self.holdings: list[Holding] = []
        self.holding_facts: list[tuple] = []

    def __call__(self, model: ModelConfig, nodes: list[Node], holdings: list[Holding]) -> Decision:
        nodes, holdings = list(nodes), list(holdings)
        kept = self.kept
        if kept is not None and nodes == kept.nodes and list(map(_NODE_FACTS, nodes)) == self.node_facts:
            n = len(self.holdings)
            if len(holdings) >= n and (all(map(is_, holdings, self.holdings))
                                       or list(map(_HOLDING_FACTS, holdings[:n])) == self.holding_facts):
                for h in holdings[n:]:
                    kept.hold(h)
                    self.holdings.append(h)
                    self.holding_facts.append(_HOLDING_FACTS(h))
                return kept.decide(model)
        kept = self.kept = PlacementPass(nodes, holdings)
        self.node_facts = [_facts(node) for node in nodes]
        self.holdings, self.holding_facts = list(holdings), list(map(_HOLDING_FACTS, holdings))
        return kept.decide(model)


# ---------------------------------------------------------------- the run


def one_pass(nodes: list[Node], models: list[ModelConfig]) -> tuple[PlacementRound, list[Decision], list[Holding],
                                                                    float, float]:
    """One pass through a new round, as the reconciler makes it: the round, its decisions, what they started, and
    the pass's wall-clock and CPU seconds."""
    holdings: list[Holding] = []
    decisions = []
    started, cpu_started = time.perf_counter(), time.process_time()
    with collector_paused():  # as the reconciler's pass does
        pass_round = PlacementRound(nodes, holdings)
        for i, model in enumerate(models):
            decision = pass_round.decide(model)
            decisions.append(decision)
            p = decision.placement
            if p is not None:
                h = Holding(f"r-{i}", model.name, p.node, gpus=p.gpus, memory=p.memory, cores=p.cores)
                holdings.append(h)
                pass_round.hold(h)
    return pass_round, decisions, holdings, time.perf_counter() - started, time.process_time() - cpu_started


def run_size(size: int, bench: PlacementBench) -> dict:
    rng = random.Random(bench.seed * 7919 + size)
    nodes = cluster(size, rng)
    models = asked(max(1, round(size * bench.replicas_per_node)), rng)
    pass_round, decisions, holdings, pass_s, pass_cpu_s = one_pass(nodes, models)
    walls, cpus = [pass_s], [pass_cpu_s]
    for _ in range(bench.repeat - 1):
        _, again, _, wall_s, cpu_s = one_pass(nodes, models)
        if [d.placement for d in again] != [d.placement for d in decisions]:
            raise AssertionError(f"a pass through a new round decided otherwise at {size} nodes")
        walls.append(wall_s)
        cpus.append(cpu_s)
    pass_s, pass_cpu_s = statistics.median(walls), statistics.median(cpus)
    single = []
    for model in models[: bench.decisions_timed]:
        t0 = time.perf_counter()
        pass_round.decide(model)
        single.append(time.perf_counter() - t0)
    # The previous way, on the same nodes and the same holdings as they grew.
    previous = PreviousPlace()
    held: list[Holding] = []
    started, cpu_started = time.perf_counter(), time.process_time()
    for i, model in enumerate(models):
        again = previous(model, nodes, held)
        if again.placement != decisions[i].placement:
            raise AssertionError(f"decision {i} differs made the previous way: "
                                 f"{decisions[i].summary()} / {again.summary()}")
        if len(held) < len(holdings) and again.placement is not None:
            held.append(holdings[len(held)])
    previous_s, previous_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    t0 = time.perf_counter()
    naive = first_fit(models, nodes)
    naive_s = time.perf_counter() - t0
    return {
        "nodes": size, "replicas": len(models), "gpus": sum(len(n.gpus) for n in nodes),
        "pass_ms": round(pass_s * 1000, 1),
        "pass_cpu_ms": round(pass_cpu_s * 1000, 1),
        "pass_cpu_ms_each": [round(c * 1000, 1) for c in cpus],
        "previous_pass_ms": round(previous_s * 1000, 1),
        "previous_pass_cpu_ms": round(previous_cpu_s * 1000, 1),
        "faster": ratio(previous_cpu_s, pass_cpu_s, 1),
        "decision_ms": round(statistics.median(single) * 1000, 3) if single else None,
        "decision_in_pass_mean_ms": round(pass_s * 1000 / len(models), 3),
        "llmgw": quality(holdings, nodes),
        "first_fit": {**quality(naive, nodes), "pass_ms": round(naive_s * 1000, 1)},
    }


def run(bench: PlacementBench, say=lambda _: None) -> dict:
    runs = []
    for size in bench.sizes:
        say(f"{size} nodes")
        runs.append(run_size(size, bench))
    for before, after in itertools.pairwise(runs):
        after["pass_growth"] = ratio(after["pass_cpu_ms"], before["pass_cpu_ms"])
        after["nodes_growth"] = ratio(after["nodes"], before["nodes"])
        #: the pass's growth over the cluster's: 1.00 is linear, above it faster than linear
        after["growth_vs_linear"] = ratio(after["pass_cpu_ms"] * before["nodes"], before["pass_cpu_ms"] * after["nodes"])
    return {"bench": "placement", "settings": attrs.asdict(bench), "machine": machine(), "runs": runs}


def table(report: dict) -> tuple[list[dict], list[str]]:
    rows = []
    for r in report["runs"]:
        ours, naive = r["llmgw"], r["first_fit"]
        rows.append({
            "nodes": r["nodes"], "replicas": r["replicas"], "pass_ms": r["pass_ms"], "cpu_ms": r["pass_cpu_ms"],
            "previous_ms": r["previous_pass_ms"], "previous_cpu_ms": r["previous_pass_cpu_ms"],
            "faster": f"{r['faster']}x",
            "decision_ms": r["decision_ms"],
            "growth": f"{r['pass_growth']}x for {r['nodes_growth']}x nodes" if "pass_growth" in r else "",
            "vs_linear": f"{r['growth_vs_linear']:.2f}" if r.get("growth_vs_linear") is not None else "",
            "placed": f"{ours['placed']} / {naive['placed']}",
            "big_holes": f"{ours['big_holes']} / {naive['big_holes']}",
            "worst_stack": f"{ours['worst_stack']} / {naive['worst_stack']}",
            "gpu_use": f"{ours['gpu_use']:.2f} / {naive['gpu_use']:.2f}",
        })
    return rows, ["nodes", "replicas", "pass_ms", "cpu_ms", "previous_ms", "previous_cpu_ms", "faster",
                  "decision_ms", "growth", "vs_linear",
                  "placed", "big_holes", "worst_stack", "gpu_use"]


def headline(report: dict) -> list[str]:
    return [
        (f"pass_ms: the pass through one placement round (cpu_ms: this process's CPU time of it), the median of "
         f"{report['settings']['repeat']}; previous_ms: the same pass made by place() per decision, reusing the pass "
         f"it kept, as before; faster: the CPU times' ratio"),
        ("growth: the pass's CPU time over the previous size's; vs_linear: that growth over the cluster's "
         "(1.00: linear; 1.10: 10% more than linear)"),
        "placed, big_holes, worst_stack, gpu_use: llmgw's placement / a naive first fit",
        ("big_holes: 8-card nodes left wholly free (more is better); worst_stack: most replicas of one model "
         "on one node (fewer is better)"),
        f"{report['settings']['replicas_per_node']:g} replicas asked per node; {describe_machine(report['machine'])}",
    ]
