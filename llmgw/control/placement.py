"""Placement: which node runs a model's next replica, and why not the others.

`place()` is a pure function of the model, the nodes and what already holds
their resources. It filters, then orders:

Filters, in this order (a node's first failure is its rejection):
  1. the node is connected and not lost;
  2. it is not cordoned or draining;
  3. the profile's engine is installed there;
  4. it carries every label of the profile's `node_selector`;
  5. it has enough healthy, free GPUs of the profile's class on that one node
     (a card held by another replica is not free);
  6. it has the memory and cores the profile reserves, less what other
     replicas reserve there.

Order among the nodes left (first wins):
  1. spread: fewest replicas of this model on the node, then in its rack
     (the `llmgw.io/rack` label);
  2. nodes already holding the model's weights;
  3. pack: the fewest free cards left afterwards (then cores, then memory),
     so large holes stay for large replicas;
  4. the node id, so the answer is the same every time.

Profiles are tried in the model's order; the first one that fits anywhere is
used. Every rejection is kept as a sentence, `node-a: needs 2 free GPUs of
class h100-80gb, has 1`, for `explain`.

Preemption: a critical model that fits nowhere may stop replicas of lower
classes (opportunistic ones first, then standard; replicas above their
model's minimum before others; the newest first) on the node where the
fewest and least important have to go. A critical replica is never stopped
for anything, and nothing but a critical model preempts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from llmgw.config.server import ModelConfig, Profile
from llmgw.control.inventory import Node
from llmgw.plugins.types import Engine

RACK_LABEL = "llmgw.io/rack"
#: How readily a class gives way: lower goes first. Critical never does.
CLASS_RANK = {"opportunistic": 0, "standard": 1, "critical": 2}


@attrs.frozen
class Holding:
    """What one live replica holds on its node."""

    replica_id: str
    model: str
    node: str
    gpus: tuple[int, ...] = ()
    memory: int = 0
    cores: int = 0
    model_class: str = "standard"
    spare: bool = False  #: its model runs more replicas than its minimum
    started: float = 0.0  #: when it was placed (monotonic), for newest-first


@attrs.frozen
class Rejection:
    node: str
    reason: str
    profile: str = ""  #: named when the model has more than one profile

    def sentence(self) -> str:
        where = f"{self.node} ({self.profile})" if self.profile else self.node
        return f"{where}: {self.reason}"


@attrs.frozen
class Placement:
    node: str
    profile: Profile
    engine: str
    gpus: tuple[int, ...] = ()
    memory: int = 0
    cores: int = 0
    preempts: tuple[str, ...] = ()  #: replica ids to stop before this one can start
    why: str = ""


@attrs.frozen
class Decision:
    """The answer for one replica: where, or why nowhere."""

    model: str
    placement: Placement | None
    rejections: tuple[Rejection, ...] = ()
    nodes_considered: int = 0

    @property
    def placed(self) -> bool:
        return self.placement is not None

    def sentences(self) -> list[str]:
        return [r.sentence() for r in self.rejections]

    def summary(self) -> str:
        if self.placement is not None:
            p = self.placement
            text = f"placed on {p.node}"
            if p.preempts:
                text += f" after stopping {', '.join(p.preempts)}"
            return text + (f" ({p.why})" if p.why else "")
        if not self.nodes_considered:
            return "no node is connected"
        return f"no node can run it: {'; '.join(self.sentences())}"


# ---------------------------------------------------------------- wording


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def format_bytes(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) or value >= 100 else f"{value:.1f} {unit}"
    return f"{n} B"


def _gpu_words(n: int, gpu_class: str) -> str:
    text = f"{n} free GPU{'s' if n != 1 else ''}"
    return f"{text} of class {gpu_class}" if gpu_class else text


# ---------------------------------------------------------------- the node's room


@attrs.define
class _Room:
    """What a node has left for one more replica."""

    node: Node
    held_gpus: set[int]
    memory_free: int
    cores_free: int
    model_here: int  # replicas of the model being placed, on this node
    model_in_rack: int
    holdings: list[Holding]

    def healthy_gpus(self, gpu_class: str) -> list[int]:
        return [g.index for g in self.node.gpus
                if g.health != "failed" and (not gpu_class or g.gpu_class == gpu_class)]

    def free_gpus(self, gpu_class: str) -> list[int]:
        return [i for i in self.healthy_gpus(gpu_class) if i not in self.held_gpus]


def _rooms(nodes: Sequence[Node], holdings: Iterable[Holding], model: str) -> dict[str, _Room]:
    by_node: dict[str, list[Holding]] = {}
    for h in holdings:
        by_node.setdefault(h.node, []).append(h)
    racks: dict[str, int] = {}
    rack_of = {n.id: n.labels.get(RACK_LABEL, "") for n in nodes}
    for h in (h for hs in by_node.values() for h in hs):
        rack = rack_of.get(h.node, "")
        if h.model == model and rack:
            racks[rack] = racks.get(rack, 0) + 1
    rooms = {}
    for node in nodes:
        held = by_node.get(node.id, [])
        rooms[node.id] = _Room(
            node=node,
            held_gpus={g for h in held for g in h.gpus},
            memory_free=node.memory_total - sum(h.memory for h in held),
            cores_free=node.cores - sum(h.cores for h in held),
            model_here=sum(1 for h in held if h.model == model),
            model_in_rack=racks.get(rack_of[node.id], 0) if rack_of[node.id] else 0,
            holdings=held,
        )
    return rooms


# ---------------------------------------------------------------- filters


def _gate(room: _Room, profile: Profile, engine: str, engines: Mapping[str, Engine] | None) -> str | None:
    """Why the node cannot run this profile whatever is stopped there, or None."""
    node = room.node
    if node.lost:
        return "lost: its agent has not been heard from within the heartbeat window"
    if not node.connected:
        return "its agent is not connected" + (f" ({node.disconnect_reason})" if node.disconnect_reason else "")
    if node.draining:
        return "draining"
    if node.cordoned:
        return f"cordoned: {node.cordon_reason}" if node.cordon_reason else "cordoned"
    if engine not in node.engines:
        has = ", ".join(sorted(node.engines)) or "none"
        return f"engine {engine} is not installed (it has: {has})"
    plugin = engines.get(engine) if engines else None
    if plugin is not None:
        devices = tuple(plugin.devices)
        if profile.gpus == 0 and "cpu" not in devices:
            return f"engine {engine} needs GPUs, and the profile asks for none"
    for key, wanted in profile.node_selector.items():
        have = node.labels.get(key)
        if have is None:
            return f"lacks the label {key}={wanted}"
        if have != wanted:
            return f"its label {key} is {have}, the profile wants {wanted}"
    if profile.gpus > 0:
        if not node.gpus:
            return f"has no GPUs; the profile needs {profile.gpus}"
        healthy = room.healthy_gpus(profile.gpu_class)
        if len(healthy) < profile.gpus:
            if profile.gpu_class and not any(g.gpu_class == profile.gpu_class for g in node.gpus):
                classes: dict[str, int] = {}
                for g in node.gpus:
                    classes[g.gpu_class or "unknown"] = classes.get(g.gpu_class or "unknown", 0) + 1
                has = ", ".join(f"{n} × {c}" for c, n in sorted(classes.items()))
                return f"has no GPUs of class {profile.gpu_class} (it has {has})"
            return (f"needs {_gpu_words(profile.gpus, profile.gpu_class)}, has "
                    f"{_plural(len(healthy), 'healthy card')} of that kind in all")
    if profile.memory and node.memory_total < profile.memory:
        return f"needs {format_bytes(profile.memory)} of memory reserved, has {format_bytes(node.memory_total)} in all"
    if profile.cores and node.cores < profile.cores:
        return f"needs {_plural(profile.cores, 'core')}, has {node.cores} in all"
    return None


def _shortfall(room: _Room, profile: Profile) -> str | None:
    """Why what other replicas hold leaves too little, or None when it fits now."""
    if profile.gpus > 0:
        free = room.free_gpus(profile.gpu_class)
        if len(free) < profile.gpus:
            return f"needs {_gpu_words(profile.gpus, profile.gpu_class)}, has {len(free)}"
    if profile.memory and room.memory_free < profile.memory:
        return (f"needs {format_bytes(profile.memory)} of memory reserved, "
                f"{format_bytes(max(0, room.memory_free))} free")
    if profile.cores and room.cores_free < profile.cores:
        return f"needs {_plural(profile.cores, 'core')}, {max(0, room.cores_free)} free"
    return None


def _order_key(room: _Room, profile: Profile, model: ModelConfig) -> tuple:
    gpus_left = len(room.free_gpus("")) - profile.gpus
    return (
        room.model_here,
        room.model_in_rack,
        0 if room.node.holds_weights(model.name, model.source) else 1,
        gpus_left,
        room.cores_free - profile.cores,
        room.memory_free - profile.memory,
        room.node.id,
    )


def _why(room: _Room, profile: Profile, model: ModelConfig) -> str:
    parts = []
    parts.append("no replica of it there" if room.model_here == 0
                 else f"{_plural(room.model_here, 'replica')} of it there already")
    if room.node.holds_weights(model.name, model.source):
        parts.append("holds the weights")
    if profile.gpus:
        parts.append(f"leaves {_plural(len(room.free_gpus('')) - profile.gpus, 'free GPU')}")
    return ", ".join(parts)


# ---------------------------------------------------------------- preemption


def _lacking(room: _Room, profile: Profile) -> tuple[int, int, int]:
    """GPUs, bytes of memory and cores the node is short of for this profile."""
    gpus = max(0, profile.gpus - len(room.free_gpus(profile.gpu_class))) if profile.gpus else 0
    memory = max(0, profile.memory - room.memory_free) if profile.memory else 0
    cores = max(0, profile.cores - room.cores_free) if profile.cores else 0
    return gpus, memory, cores


def _victims(room: _Room, profile: Profile, model_class: str) -> list[Holding] | None:
    """The fewest lower-class replicas whose stopping makes room, or None when no set does."""
    if model_class != "critical":
        return None
    candidates = sorted(
        (h for h in room.holdings if CLASS_RANK.get(h.model_class, 1) < CLASS_RANK["critical"]),
        key=lambda h: (CLASS_RANK.get(h.model_class, 1), not h.spare, -h.started, h.replica_id),
    )
    usable_cards = set(room.healthy_gpus(profile.gpu_class))
    trial = attrs.evolve(room, held_gpus=set(room.held_gpus), holdings=list(room.holdings))
    chosen: list[Holding] = []
    for victim in candidates:
        gpus, memory, cores = _lacking(trial, profile)
        if not (gpus or memory or cores):
            break
        # A victim that frees nothing this profile lacks is left running.
        if not ((gpus and set(victim.gpus) & usable_cards) or (memory and victim.memory)
                or (cores and victim.cores)):
            continue
        chosen.append(victim)
        trial.held_gpus -= set(victim.gpus)
        trial.memory_free += victim.memory
        trial.cores_free += victim.cores
    if not chosen or any(_lacking(trial, profile)):
        return None
    return chosen


# ---------------------------------------------------------------- the decision


def place(
    model: ModelConfig,
    nodes: Iterable[Node],
    holdings: Iterable[Holding] = (),
    *,
    engines: Mapping[str, Engine] | None = None,
    avoid: Iterable[str] = (),
    preempt: bool = True,
) -> Decision:
    """Where the next replica of `model` goes, with every node's rejection."""
    nodes = list(nodes)
    holdings = list(holdings)
    avoid = set(avoid)
    rooms = _rooms(nodes, holdings, model.name)
    rejections: list[Rejection] = []
    several = len(model.profiles) > 1
    gated: list[tuple[Profile, str, list[_Room]]] = []  # per profile: nodes that fail only on what is held

    for profile in model.profiles:
        engine = profile.engine or model.engine
        label = profile.name if several else ""
        fits: list[_Room] = []
        short: list[_Room] = []
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


def _allocate(room: _Room, profile: Profile, engine: str, model: ModelConfig) -> Placement:
    gpus = tuple(sorted(room.free_gpus(profile.gpu_class))[: profile.gpus]) if profile.gpus else ()
    return Placement(
        node=room.node.id, profile=profile, engine=engine, gpus=gpus,
        memory=int(profile.memory), cores=profile.cores, why=_why(room, profile, model),
    )


__all__ = [
    "CLASS_RANK",
    "RACK_LABEL",
    "Decision",
    "Holding",
    "Placement",
    "Rejection",
    "format_bytes",
    "place",
]
