"""Placement: which node runs a model's next replica, and why not the others.

`place()` is a pure function of the model, the nodes and what already holds
their resources. It filters, then orders:

Filters, in this order (a node's first failure is its rejection):
  1. the node is connected and not lost;
  2. it is not cordoned or draining;
  3. the profile's engine is installed there;
  4. it carries every label of the profile's `node_selector`;
  5. it has enough healthy, free GPUs of the profile's class on that one node
     (a card held by another replica is not free; a card in MIG mode is its
     instances, each of its own class, never the whole card; a degraded card,
     or one whose memory processes other than llmgw's engines hold, is kept
     out, and the rejection says which and why: see devices.py);
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
class h100-80gb, has 1`, for `explain` (worded when first read, from what the
decision saw).

Speed: a `PlacementPass` keeps the rooms from one decision to the next (see
its docstring). The reconciler builds one per pass and makes every decision
of the pass through it (placement_round.py); `place()` is the one-shot form,
a pass built for one decision. tests/control/test_placement_speed.py checks
that both decide as the one-shot algorithm did.

Preemption: a critical model that fits nowhere may stop replicas of lower
classes (opportunistic ones first, then standard; replicas above their
model's minimum before others; the newest first) on the node where the
fewest and least important have to go. A critical replica is never stopped
for anything, and nothing but a critical model preempts, or a model whose
owner is within its capacity guarantee (below). A replica already being
stopped is never chosen again: what it holds counts as freed, and when that
is enough, or when stopping every candidate would still leave too little,
nothing is stopped. (The reconciler keeps a victim off the node while the
model it gave way to waits, and rate limits preemption: preemption.py.)

Capacity quotas (llmgw/control/quotas.py), when given: a model's replica
counts against the quota of the scope its `owner` names and of every scope
above it. A profile whose replica would take what those scopes' models hold
(their live replicas; not those being stopped) over a limit is not tried,
and the decision says which quota stops it: `quota of team:acme/ml: 8 GPUs
at most, its models hold 8`. A model whose scopes are guaranteed room for
one more replica may, when no node fits, stop replicas of opportunistic
(then standard, never critical) models whose own scopes keep their
guarantees without them, chosen as a critical model chooses. Without
quotas, or for a model without an owner, nothing of this applies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from llmgw.config.server import ModelConfig, Profile
from llmgw.control.devices import kept_out_words, node_devices
from llmgw.control.inventory import Node
from llmgw.control.placement_index import PackingIndex
from llmgw.control.placement_nodes import decide_nodes, node_fabrics
from llmgw.control.quotas import CapacityQuota, Quotas, owner_path, under
from llmgw.plugins.types import Engine

RACK_LABEL = "llmgw.io/rack"
PDU_LABEL = "llmgw.io/pdu"
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
    owner: str = ""  #: its model's owner: whose capacity quotas it counts against
    leaving: bool = False  #: being stopped: it still holds its node, but no quota counts it


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
    guarantee: str = ""  #: the scope whose capacity guarantee the preemption was made for
    #: a replica over several nodes: ranks 1 and up, each (node, its cards); rank 0 is `node` and `gpus`
    workers: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node the replica runs on, rank 0 first."""
        return (self.node, *(node for node, _ in self.workers))


@attrs.frozen
class Decision:
    """The answer for one replica: where, or why nowhere.

    `rejections` may be given as they are, or (as `place()` does) as a function
    that words them from what the decision saw, called the first time they are read.
    """

    model: str
    placement: Placement | None
    _rejections: tuple[Rejection, ...] | Callable[[], tuple[Rejection, ...]] = attrs.field(
        default=(), alias="rejections", eq=False, repr=False)
    nodes_considered: int = 0
    #: the capacity quotas that keep the model (or some of its profiles) off, in words
    quota: str = ""
    #: why no fabric has room for a replica over several nodes (placement_nodes.py), in words
    fabric: str = ""

    @property
    def rejections(self) -> tuple[Rejection, ...]:
        found = self._rejections
        if callable(found):
            found = tuple(found())
            object.__setattr__(self, "_rejections", found)
        return found

    @property
    def placed(self) -> bool:
        return self.placement is not None

    def sentences(self) -> list[str]:
        return [r.sentence() for r in self.rejections]

    def summary(self) -> str:
        if self.placement is not None:
            p = self.placement
            text = f"placed on {', '.join(p.nodes)}" if p.workers else f"placed on {p.node}"
            if p.preempts:
                text += f" after stopping {', '.join(p.preempts)}"
            return text + (f" ({p.why})" if p.why else "")
        if self.quota and not self.rejections:
            return self.quota
        if not self.nodes_considered:
            return "no node is connected"
        text = f"no node can run it: {'; '.join(self.sentences())}"
        if self.fabric:
            text = f"{self.fabric}" + (f"; {'; '.join(self.sentences())}" if self.rejections else "")
        return f"{text}; {self.quota}" if self.quota else text


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
    #: the node's usable devices as (index, class), when the caller has them worked out already (a pass does)
    healthy: tuple[tuple[int, str], ...] | None = None

    def healthy_gpus(self, gpu_class: str) -> list[int]:
        if self.healthy is not None:
            return [index for index, of in self.healthy if not gpu_class or of == gpu_class]
        return [d.index for d in node_devices(self.node.gpus)
                if d.usable and (not gpu_class or d.gpu_class == gpu_class)]

    def free_gpus(self, gpu_class: str) -> list[int]:
        return [i for i in self.healthy_gpus(gpu_class) if i not in self.held_gpus]


def spread_domains(node: Node) -> tuple[str, ...]:
    """The failure domains a model's replicas are spread over: the node's rack and each PDU it draws from
    (`llmgw.io/rack`, `llmgw.io/pdu`, a comma-separated list for a dual-fed rack)."""
    rack = node.labels.get(RACK_LABEL, "")
    pdus = node.labels.get(PDU_LABEL, "")
    out = (f"rack:{rack}",) if rack else ()
    return out + tuple(f"pdu:{p.strip()}" for p in pdus.split(",") if p.strip())


def _rooms(nodes: Sequence[Node], holdings: Iterable[Holding], model: str) -> dict[str, _Room]:
    by_node: dict[str, list[Holding]] = {}
    for h in holdings:
        by_node.setdefault(h.node, []).append(h)
    racks: dict[str, int] = {}
    rack_of = {n.id: spread_domains(n) for n in nodes}
    for h in (h for hs in by_node.values() for h in hs):
        if h.model == model:
            for domain in rack_of.get(h.node, ()):
                racks[domain] = racks.get(domain, 0) + 1
    rooms = {}
    for node in nodes:
        held = by_node.get(node.id, [])
        rooms[node.id] = _Room(
            node=node,
            held_gpus={g for h in held for g in h.gpus},
            memory_free=node.memory_total - sum(h.memory for h in held),
            cores_free=node.cores - sum(h.cores for h in held),
            model_here=sum(1 for h in held if h.model == model),
            model_in_rack=sum(racks.get(d, 0) for d in rack_of[node.id]),
            holdings=held,
        )
    return rooms


# ---------------------------------------------------------------- filters


def has_engine(node: Node, engine: str, version: str = "") -> bool:
    """Whether `node` has `engine` installed (at `version`, when one is pinned)."""
    if not version:
        return engine in node.engines
    return node.engines.get(engine) == version or any(
        i.engine == engine and i.version == version for i in node.engine_installs)


def _gate(room: _Room, profile: Profile, engine: str, engines: Mapping[str, Engine] | None,
          version: str = "") -> str | None:
    """Why the node cannot run this profile (its engine at `version`, when pinned) whatever is stopped there."""
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
        problem = node.engine_problems.get(engine)
        if problem:
            return (f"engine {engine} could not be installed here: {problem.strip().splitlines()[-1]} "
                    f"(llmgw ctl engines says more; asking for it again retries)")
        has = ", ".join(sorted(node.engines)) or "none"
        return f"engine {engine} is not installed (it has: {has})"
    if version and not has_engine(node, engine, version):
        problem = node.engine_problems.get(engine)
        if problem:
            last = problem.strip().splitlines()[-1].strip()
            return (f"engine {engine} {version} could not be installed here: {last} "
                    f"(llmgw ctl engines says more; asking for it again retries)")
        have = sorted({i.version for i in node.engine_installs if i.engine == engine} | {node.engines[engine]})
        return (f"has {engine} {', '.join(have)}, not {version} as the model pins"
                + ("; its agent can install it" if engine in node.installable else ""))
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
            devices = node_devices(node.gpus)
            if profile.gpu_class and not any(d.gpu_class == profile.gpu_class for d in devices):
                classes: dict[str, int] = {}
                for d in devices:
                    classes[d.gpu_class or "unknown"] = classes.get(d.gpu_class or "unknown", 0) + 1
                has = ", ".join(f"{n} × {c}" for c, n in sorted(classes.items()))
                return f"has no GPUs of class {profile.gpu_class} (it has {has})"
            kept = kept_out_words(devices, profile.gpu_class)
            return (f"needs {_gpu_words(profile.gpus, profile.gpu_class)}, has "
                    f"{_plural(len(healthy), 'healthy card')} of that kind in all" + (f": {kept}" if kept else ""))
    if profile.memory and node.memory_total < profile.memory:
        return f"needs {format_bytes(profile.memory)} of memory reserved, has {format_bytes(node.memory_total)} in all"
    if profile.cores and node.cores < profile.cores:
        return f"needs {_plural(profile.cores, 'core')}, has {node.cores} in all"
    return None


def _shortfall(room: _Room, profile: Profile) -> str | None:
    """Why what other replicas hold leaves too little, or None when it fits now."""
    free = len(room.free_gpus(profile.gpu_class)) if profile.gpus > 0 else 0
    return _short_words(free, room.memory_free, room.cores_free, profile)


def _short_words(free_gpus: int, memory_free: int, cores_free: int, profile: Profile) -> str | None:
    """`_shortfall` from the numbers: free cards of the profile's class, memory and cores left."""
    if profile.gpus > 0 and free_gpus < profile.gpus:
        return f"needs {_gpu_words(profile.gpus, profile.gpu_class)}, has {free_gpus}"
    if profile.memory and memory_free < profile.memory:
        return (f"needs {format_bytes(profile.memory)} of memory reserved, "
                f"{format_bytes(max(0, memory_free))} free")
    if profile.cores and cores_free < profile.cores:
        return f"needs {_plural(profile.cores, 'core')}, {max(0, cores_free)} free"
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


def _victims(room: _Room, profile: Profile, model_class: str,
             reclaim: _Reclaim | None = None) -> list[Holding] | None:
    """The fewest lower-class replicas whose stopping makes room, or None when no set does.

    A critical model may stop any of them; another only with `reclaim`, those it allows."""
    if model_class != "critical" and reclaim is None:
        return None
    candidates = sorted(
        (h for h in room.holdings if CLASS_RANK.get(h.model_class, 1) < CLASS_RANK["critical"] and not h.leaving),
        key=lambda h: (CLASS_RANK.get(h.model_class, 1), not h.spare, -h.started, h.replica_id),
    )
    usable_cards = set(room.healthy_gpus(profile.gpu_class))
    trial = attrs.evolve(room, held_gpus=set(room.held_gpus), holdings=list(room.holdings))
    # Replicas already being stopped are going: what they hold counts as freed, and none is chosen again.
    for going in (h for h in room.holdings if h.leaving):
        _release(trial, going)
    chosen: list[Holding] = []
    for victim in candidates:
        gpus, memory, cores = _lacking(trial, profile)
        if not (gpus or memory or cores):
            break
        # A victim that frees nothing this profile lacks is left running.
        if not ((gpus and set(victim.gpus) & usable_cards) or (memory and victim.memory)
                or (cores and victim.cores)):
            continue
        if reclaim is not None and not reclaim.take(victim):
            continue
        chosen.append(victim)
        _release(trial, victim)
    # Stopping nothing helps when what is being stopped already makes room (the model waits for it),
    # and stopping some helps nothing when the room stays too small: either way, nothing is stopped.
    if not chosen or any(_lacking(trial, profile)):
        return None
    return chosen


def _release(trial: _Room, holding: Holding) -> None:
    """The room as it is once `holding` has stopped."""
    trial.held_gpus -= set(holding.gpus)
    trial.memory_free += holding.memory
    trial.cores_free += holding.cores


# ---------------------------------------------------------------- capacity quotas


def _needs(profile: Profile) -> tuple[int, int, int]:
    """GPUs, cores and bytes of memory one replica of the profile counts against a quota (on all its nodes)."""
    n = max(1, profile.nodes)
    return profile.gpus * n, profile.cores * n, int(profile.memory) * n


def _limits(quota: CapacityQuota) -> tuple[int | None, int | None, int | None]:
    return quota.limit.gpus, quota.limit.cores, quota.limit.memory


def _guarantees(quota: CapacityQuota) -> tuple[int | None, int | None, int | None]:
    return quota.guaranteed.gpus, quota.guaranteed.cores, quota.guaranteed.memory


def _over_limit_words(quota: CapacityQuota, held: tuple[int, int, int], need: tuple[int, int, int]) -> str | None:
    """Why one more replica would take the scope over its limit, or None when it stays within."""
    for i, top in enumerate(_limits(quota)):
        if top is None or not need[i] or held[i] + need[i] <= top:
            continue
        if i == 0:
            most, have, more = _plural(top, "GPU"), str(held[i]), str(need[i])
        elif i == 1:
            most, have, more = _plural(top, "core"), str(held[i]), str(need[i])
        else:
            most, have, more = f"{format_bytes(top)} of memory", format_bytes(held[i]), format_bytes(need[i])
        text = f"quota of {quota.scope}: {most} at most, its models hold {have}"
        return text if held[i] >= top else f"{text} and a replica needs {more}"
    return None


class _Reclaim:
    """Which replicas a model within its scope's guarantee may stop, over one node's choice of victims:
    those of opportunistic and standard models, when every scope they count toward keeps what it is
    guaranteed without them (a scope without a guarantee is guaranteed nothing)."""

    def __init__(self, quotas: Quotas, held: Callable[[CapacityQuota], tuple[int, int, int]]) -> None:
        self.quotas = quotas
        self.held = held
        self.taken: dict[CapacityQuota, tuple[int, int, int]] = {}

    def take(self, victim: Holding) -> bool:
        """Whether `victim` may be stopped as well as those taken before; if so it is counted as taken."""
        if victim.leaving or CLASS_RANK.get(victim.model_class, 1) >= CLASS_RANK["critical"]:
            return False
        guarded = [q for q in self.quotas.of(victim.owner) if q.guaranteed] if victim.owner else []
        amounts = (len(victim.gpus), victim.cores, victim.memory)
        for quota in guarded:
            held, taken = self.held(quota), self.taken.get(quota, (0, 0, 0))
            for i, floor in enumerate(_guarantees(quota)):
                if floor is not None and amounts[i] and held[i] - taken[i] - amounts[i] < floor:
                    return False
        for quota in guarded:
            taken = self.taken.get(quota, (0, 0, 0))
            self.taken[quota] = (taken[0] + amounts[0], taken[1] + amounts[1], taken[2] + amounts[2])
        return True


# ---------------------------------------------------------------- a pass: rooms kept from one decision to the next

#: What of a holding the rooms depend on: `relabel()` changes anything but these.
_ROOM_FIELDS = frozenset({"replica_id", "node", "model", "gpus", "memory", "cores"})


class _View:
    """The nodes that pass one profile's filters (whatever is held there), and those with room now, for packing."""

    __slots__ = ("index", "members", "reasons")

    def __init__(self, reasons: list[str | None], index: PackingIndex) -> None:
        self.reasons = reasons  #: by slot: the filter's sentence, None when it passes; never changed
        self.members = {s for s, r in enumerate(reasons) if r is None}
        self.index = index  #: the members with room for the profile now, by rack and PDUs, in packing order


class PlacementPass:
    """One pass's view of the cluster, kept from one decision to the next.

    Built once from the nodes and what holds them; then `decide()` answers as
    `place()` would, and `hold()` adds what a decision started, so the next
    decision sees it. Each node's room is worked out once and updated when a
    holding lands on it; each profile's filters are checked once per node;
    the nodes that pass them and have room are kept by rack and PDUs, each
    group in packing order (placement_index.py), so a decision looks at
    candidate racks in order, passes over those that already hold more of the
    model, and stops at the first node that nothing else can beat. Rejection
    sentences are worded only when read.

    The nodes must not change while a pass is used: make a new one after they do.
    What a holding says beyond the room it takes (its class, whether it is
    spare, whether it is being stopped) may change: `relabel()`.
    """

    def __init__(self, nodes: Iterable[Node], holdings: Iterable[Holding] = (), *,
                 engines: Mapping[str, Engine] | None = None) -> None:
        self.nodes = list(nodes)
        self.engines = engines
        by_id: dict[str, Node] = {}
        for node in self.nodes:
            by_id[node.id] = node  # a repeated id: the last one counts, as it always did
        self._ids = list(by_id)
        self._slot = {node_id: s for s, node_id in enumerate(self._ids)}
        self._node = [by_id[node_id] for node_id in self._ids]
        self._order = [self._slot[node.id] for node in self.nodes]  # the list's nodes, as slots
        self._rack = [spread_domains(node) for node in self._node]  # its rack and PDUs
        self._domains = {d for domains in self._rack for d in domains}
        self._undomained = any(not domains for domains in self._rack)  # some node has neither rack nor PDU
        #: the nodes' groups for packing: nodes with the same rack and PDUs share one
        self._group_domains: list[tuple[str, ...]] = []
        numbered: dict[tuple[str, ...], int] = {}
        self._group: list[int] = []
        for domains in self._rack:
            g = numbered.get(domains)
            if g is None:
                g = numbered[domains] = len(self._group_domains)
                self._group_domains.append(domains)
            self._group.append(g)
        self._healthy = [tuple((d.index, d.gpu_class) for d in node_devices(node.gpus) if d.usable)
                         for node in self._node]
        self._weights_by_model: dict[str, set[int]] = {}
        self._weights_by_source: dict[str, set[int]] = {}
        for s, node in enumerate(self._node):
            for name, present in node.weights.items():
                if present is not None:
                    self._weights_by_model.setdefault(name, set()).add(s)
            for present in node.weights.values():
                if present is not None:
                    self._weights_by_source.setdefault(present.source, set()).add(s)
        self._views: dict[tuple, _View] = {}
        self._slot_views: list[list[_View]] = [[] for _ in self._node]
        self._reset(holdings)

    # -- what is held -------------------------------------------------------------

    def _reset(self, holdings: Iterable[Holding]) -> None:
        self._holdings: list[Holding] = []
        self._on_slot: list[list[int]] = [[] for _ in self._node]  # by slot: positions in _holdings
        self._of_replica: dict[str, list[int]] = {}  # replica id -> positions in _holdings
        self._held: list[set[int]] = [set() for _ in self._node]
        self._memory = [node.memory_total for node in self._node]
        self._cores = [node.cores for node in self._node]
        self._here: dict[str, dict[int, int]] = {}  # model -> slot -> its replicas there
        self._in_rack: dict[str, dict[str, int]] = {}  # model -> rack -> its replicas there
        #: by owner's path: (GPUs, cores, memory) its replicas not being stopped hold; made when a quota asks
        self._owned: dict[str, list[int]] | None = None
        for h in holdings:
            self._apply(h)
        #: by slot: (free cards by class, free cards, memory free, cores free); replaced, never changed
        self._room = [self._room_of(s) for s in range(len(self._node))]
        #: by slot: its place in packing order (free cards, cores free, memory free, node id, slot)
        self._pack = [(room[1], room[3], room[2], self._ids[s], s) for s, room in enumerate(self._room)]
        #: the rooms at some moment, and each room since, for wording a decision's rejections later
        self._base, self._log = list(self._room), []
        for view in self._views.values():
            self._fill(view)

    def _apply(self, h: Holding) -> int | None:
        at = len(self._holdings)
        self._holdings.append(h)
        self._of_replica.setdefault(h.replica_id, []).append(at)
        s = self._slot.get(h.node)
        if s is None:
            return None
        self._on_slot[s].append(at)
        self._held[s].update(h.gpus)
        self._memory[s] -= h.memory
        self._cores[s] -= h.cores
        here = self._here.setdefault(h.model, {})
        here[s] = here.get(s, 0) + 1
        if self._rack[s]:
            racks = self._in_rack.setdefault(h.model, {})
            for domain in self._rack[s]:
                racks[domain] = racks.get(domain, 0) + 1
        return s

    def _room_of(self, s: int) -> tuple[dict[str, int], int, int, int]:
        held = self._held[s]
        by_class: dict[str, int] = {}
        total = 0
        for index, gpu_class in self._healthy[s]:
            if index not in held:
                by_class[gpu_class] = by_class.get(gpu_class, 0) + 1
                total += 1
        return by_class, total, self._memory[s], self._cores[s]

    def hold(self, holding: Holding) -> None:
        """A replica now holds what `holding` says: the next decision sees it."""
        if self._owned is not None:
            self._count(holding, self._owned)
        s = self._apply(holding)
        if s is None:
            return
        old_room, old_pack = self._room[s], self._pack[s]
        room = self._room[s] = self._room_of(s)
        pack = self._pack[s] = (room[1], room[3], room[2], self._ids[s], s)
        group = self._group[s]
        for view in self._slot_views[s]:
            view.index.move(group, old_room, old_pack, room, pack)
        self._log.append((s, room))
        if len(self._log) > len(self._room):
            self._base, self._log = list(self._room), []  # a new list: decisions keep the old one

    def relabel(self, replica_id: str, **changes: object) -> None:
        """What the replica's holdings say changes (`leaving`, `spare`, `model_class`, `owner`, `started`);
        the room they take does not. The next decision sees it."""
        if _ROOM_FIELDS & changes.keys():
            raise ValueError(f"relabel changes what a holding says, not the room it takes: "
                             f"{sorted(_ROOM_FIELDS & changes.keys())}")
        for at in self._of_replica.get(replica_id, ()):
            old = self._holdings[at]
            new = self._holdings[at] = attrs.evolve(old, **changes)
            if self._owned is not None:
                self._count(old, self._owned, -1)
                self._count(new, self._owned)

    # -- the filters, once per profile --------------------------------------------

    def _view(self, profile: Profile, engine: str, version: str = "") -> _View:
        plugin = self.engines.get(engine) if self.engines else None
        key = (engine, tuple(plugin.devices) if plugin is not None else None, profile.gpus, profile.gpu_class,
               profile.memory, profile.cores, tuple(profile.node_selector.items()), version)
        view = self._views.get(key)
        if view is None:
            healthy = self._healthy
            view = self._views[key] = _View([
                _gate(_Room(node, set(), 0, 0, 0, 0, [], healthy[s]), profile, engine, self.engines, version)
                for s, node in enumerate(self._node)
            ], PackingIndex(profile.gpus, profile.gpu_class, profile.memory, profile.cores))
            for s in view.members:
                self._slot_views[s].append(view)
            self._fill(view)
        return view

    def _fill(self, view: _View) -> None:
        view.index.fill(view.members, self._room, self._pack, self._group)

    # -- the decision -------------------------------------------------------------

    def decide(self, model: ModelConfig, *, avoid: Iterable[str] = (), preempt: bool = True,
               quotas: Quotas | None = None, held_for: Mapping[str, str] | None = None) -> Decision:
        """Where the next replica of `model` goes, as `place()` answers; nothing is held until `hold()`."""
        avoid = set(avoid) | set(held_for or ())
        avoid_slots = {self._slot[a] for a in avoid if a in self._slot}
        here = self._here.get(model.name, {})
        in_rack = self._in_rack.get(model.name, {})
        weights = self._weights_by_model.get(model.name, set())
        if model.source:
            weights = weights | self._weights_by_source.get(model.source, set())
        mine = quotas.of(model.owner) if quotas and model.owner else ()  # the owner's quotas, widest first
        held = self._held_counter() if mine else None
        stopped: list[str] = []  # the profiles a quota's limit stops, in words
        tried: list[tuple[Profile, str, _View]] = []
        fabric_words: list[str] = []  # why no fabric has room, for profiles over several nodes

        def worded() -> Callable[[], list[Rejection]]:
            return self._wording(tried, avoid, model, held_for)

        for profile in model.profiles:
            if mine:
                need = _needs(profile)
                words = next((w for q in mine if q.limit and (w := _over_limit_words(q, held(q), need))), None)
                if words is not None:
                    stopped.append(f"{profile.name}: {words}" if len(model.profiles) > 1 else words)
                    continue
            engine = profile.engine or model.engine
            view = self._view(profile, engine, model.engine_version)
            tried.append((profile, engine, view))
            if profile.nodes > 1:
                chosen, why = decide_nodes(self, model, profile, engine, view, here, in_rack, weights, avoid_slots)
                if chosen is None:
                    fabric_words.append(f"{profile.name}: {why}" if len(model.profiles) > 1 else why)
                    continue
                (head, head_gpus), *rest = chosen
                placement = attrs.evolve(
                    _allocate(self._room_for(head, model.name), profile, engine, model), gpus=head_gpus,
                    workers=tuple((self._ids[s], g) for s, g in rest),
                    why=f"{profile.nodes} nodes on fabric {_shared_fabric([self._node[s] for s, _ in chosen])}, "
                        f"rank 0 on {self._ids[head]}",
                )
                return _answer(model.name, placement, worded(), len(self.nodes), stopped,
                               fabric_words)
            s = self._best(view, profile, here, in_rack, weights, avoid_slots)
            if s is not None:
                placement = _allocate(self._room_for(s, model.name), profile, engine, model)
                return _answer(model.name, placement, worded(), len(self.nodes), stopped)

        if preempt and (model.class_ == "critical" or mine):
            options = []
            for profile, engine, view in tried:
                if profile.nodes > 1:
                    continue  # a replica over several nodes preempts nothing
                guarantee = None  # a critical model needs none
                if model.class_ != "critical":
                    guarantee = self._guarantee_for(mine, profile, held)
                    if guarantee is None:
                        continue
                for s in self._order:
                    if self._ids[s] in avoid or view.reasons[s] is not None:
                        continue
                    room = self._room_for(s, model.name, holdings=True)
                    if _shortfall(room, profile) is None:
                        continue
                    reclaim = _Reclaim(quotas, held) if guarantee is not None else None
                    victims = _victims(room, profile, model.class_, reclaim)
                    if victims is None:
                        continue
                    cost = (max(CLASS_RANK.get(v.model_class, 1) for v in victims), len(victims))
                    options.append((cost, _order_key(room, profile, model), room, profile, engine, victims,
                                    guarantee))
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
                return _answer(model.name, placement, worded(), len(self.nodes), stopped,
                               fabric_words)
        return _answer(model.name, None, worded(), len(self.nodes), stopped, fabric_words)

    @staticmethod
    def _guarantee_for(mine: tuple[CapacityQuota, ...], profile: Profile,
                       held: Callable[[CapacityQuota], tuple[int, int, int]]) -> CapacityQuota | None:
        """The narrowest quota guaranteeing room for one more replica of the profile, when every guarantee
        the owner's scopes give what it needs leaves room for it; None otherwise."""
        need = _needs(profile)
        covering = None
        for quota in mine:
            for i, floor in enumerate(_guarantees(quota)):
                if floor is None or not need[i]:
                    continue
                if held(quota)[i] + need[i] > floor:
                    return None
                covering = quota
        return covering

    def _held_counter(self) -> Callable[[CapacityQuota], tuple[int, int, int]]:
        """`_held_under`, each quota's answer kept for the rest of one decision."""
        counted: dict[CapacityQuota, tuple[int, int, int]] = {}

        def held(quota: CapacityQuota) -> tuple[int, int, int]:
            found = counted.get(quota)
            if found is None:
                found = counted[quota] = self._held_under(quota)
            return found

        return held

    @staticmethod
    def _count(holding: Holding, owned: dict[str, list[int]], sign: int = 1) -> None:
        if holding.owner and not holding.leaving:
            sums = owned.setdefault(owner_path(holding.owner), [0, 0, 0])
            sums[0] += sign * len(holding.gpus)
            sums[1] += sign * holding.cores
            sums[2] += sign * holding.memory

    def _held_under(self, quota: CapacityQuota) -> tuple[int, int, int]:
        """GPUs, cores and memory the replicas of the models the quota covers hold (not those being stopped)."""
        owned = self._owned
        if owned is None:
            owned = self._owned = {}
            for h in self._holdings:
                self._count(h, owned)
        gpus = cores = memory = 0
        for path, (g, c, m) in owned.items():
            if under(path, quota.path):
                gpus, cores, memory = gpus + g, cores + c, memory + m
        return gpus, cores, memory

    def _best(self, view: _View, profile: Profile, here: Mapping[int, int], in_rack: Mapping[str, int],
              weights: set[int], avoid: set[int]) -> int | None:
        """The slot `_order_key` ranks first among the view's nodes with room now, or None."""
        gpus, memory, cores = profile.gpus, profile.memory, profile.cores
        rooms, racks, ids, fits = self._room, self._rack, self._ids, view.index.fits

        # The fewest replicas of the model any node's rack and PDUs can have: a node with that many and none
        # of its own is beaten by none (once every rack has one, the first such need not be one with none).
        floor = 0 if self._undomained or not in_rack or len(in_rack) < len(self._domains) else min(in_rack.values())
        best: tuple | None = None
        best_slot = None
        # Nodes holding the weights are few: each is weighed.
        for s in weights:
            if s in view.members and s not in avoid and fits(rooms[s]):
                _, total, memory_free, cores_free = rooms[s]
                key = (here.get(s, 0), sum(in_rack.get(d, 0) for d in racks[s]), 0,
                       total - gpus, cores_free - cores, memory_free - memory, ids[s])
                if best is None or key < best:
                    best, best_slot = key, s
        if best is not None and not best[0] and best[1] <= floor:
            return best_slot
        # The others, by rack and PDUs in packing order: the first with no replica of the model in its node or
        # rack beats every node after it; racks that hold more of the model than the best so far are passed over.
        skip = weights | avoid if weights and avoid else (weights or avoid)
        return view.index.best(here, in_rack, self._group_domains, floor, skip,
                               best[:2] if best is not None else None, best_slot)

    def _room_for(self, s: int, model: str, *, holdings: bool = False) -> _Room:
        """The node's room as `_rooms` makes it; its holdings listed only when asked (for preemption)."""
        in_rack = self._in_rack.get(model, {})
        return _Room(
            node=self._node[s], held_gpus=set(self._held[s]), memory_free=self._memory[s],
            cores_free=self._cores[s], model_here=self._here.get(model, {}).get(s, 0),
            model_in_rack=sum(in_rack.get(d, 0) for d in self._rack[s]),
            holdings=[self._holdings[at] for at in self._on_slot[s]] if holdings else [],
            healthy=self._healthy[s],
        )

    def _wording(self, tried: list[tuple[Profile, str, _View]], avoid: set[str],
                 model: ModelConfig, held_for: Mapping[str, str] | None = None) -> Callable[[], list[Rejection]]:
        """Every node's rejection, worded when first read, from the rooms as this decision saw them."""
        base, log, upto, order, ids = self._base, self._log, len(self._log), self._order, self._ids
        several = len(model.profiles) > 1

        def words() -> list[Rejection]:
            rooms = list(base)
            for s, room in log[:upto]:
                rooms[s] = room
            out = []
            for profile, _, view in tried:
                label = profile.name if several else ""
                for s in order:
                    node_id = ids[s]
                    if node_id in avoid:
                        why = held_for.get(node_id) if held_for else None
                        out.append(Rejection(node_id, why or "the replica it replaces is there", label))
                        continue
                    reason = view.reasons[s]
                    if reason is None:
                        by_class, total, memory_free, cores_free = rooms[s]
                        free = (by_class.get(profile.gpu_class, 0) if profile.gpu_class else total) \
                            if profile.gpus > 0 else 0
                        reason = _short_words(free, memory_free, cores_free, profile)
                    if reason is not None:
                        out.append(Rejection(node_id, reason, label))
            return out

        return words


def _answer(model: str, placement: Placement | None, rejections: Callable[[], list[Rejection]], considered: int,
            stopped: list[str], fabric: Sequence[str] = ()) -> Decision:
    """The decision, with the quotas that stopped some profiles when any did (left out otherwise: it is quicker)."""
    if fabric:
        return Decision(model, placement, rejections, considered, "; ".join(stopped), "; ".join(fabric))
    if stopped:
        return Decision(model, placement, rejections, considered, "; ".join(stopped))
    return Decision(model, placement, rejections, considered)


def _shared_fabric(nodes: list[Node]) -> str:
    """The fabric every one of the nodes is on (the first such, in id order)."""
    common = set(node_fabrics(nodes[0]))
    for node in nodes[1:]:
        common &= set(node_fabrics(node))
    return min(common) if common else "?"


def place(
    model: ModelConfig,
    nodes: Iterable[Node],
    holdings: Iterable[Holding] = (),
    *,
    engines: Mapping[str, Engine] | None = None,
    avoid: Iterable[str] = (),
    preempt: bool = True,
    quotas: Quotas | None = None,
    held_for: Mapping[str, str] | None = None,
) -> Decision:
    """Where the next replica of `model` goes, with every node's rejection: one decision, a pure function of
    its arguments (a `PlacementPass` made for it). To place many replicas, make one pass and `hold()` each.

    `quotas`: the capacity quotas in force (none: nothing is held to a quota).
    `held_for`: nodes kept from this model, each with the reason its rejection gives
    (the reconciler's: cards taken from it for a model that still waits for them).
    """
    return PlacementPass(nodes, holdings, engines=engines).decide(
        model, avoid=avoid, preempt=preempt, quotas=quotas, held_for=held_for)


def _allocate(room: _Room, profile: Profile, engine: str, model: ModelConfig) -> Placement:
    gpus = tuple(sorted(room.free_gpus(profile.gpu_class))[: profile.gpus]) if profile.gpus else ()
    return Placement(
        node=room.node.id, profile=profile, engine=engine, gpus=gpus,
        memory=int(profile.memory), cores=profile.cores, why=_why(room, profile, model),
    )


__all__ = [
    "CLASS_RANK",
    "PDU_LABEL",
    "RACK_LABEL",
    "Decision",
    "Holding",
    "Placement",
    "PlacementPass",
    "Rejection",
    "format_bytes",
    "place",
    "spread_domains",
]
