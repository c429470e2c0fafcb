"""Placement of a replica over several nodes (a profile with `nodes` above 1).

One replica of such a profile is `nodes` engine processes, one per node,
each on `gpus` cards of the profile's class, talking over RDMA. So the
nodes are chosen together:

- each passes the profile's filters and has room now, as a one-node
  replica would (placement.py);
- all are on ONE fabric: they report the same fabric id (`ib:<subnet>/<pkey>`,
  `roce:<network>`, or the operator's `llmgw.io/fabric` label). A node
  that reports no fabric is never part of such a set, and no set spans two
  fabrics;
- among the fabrics with enough such nodes, the set chosen is the best by
  the one-node order, summed over its nodes: fewest replicas of the model
  there, weights on disk, cards joined by NVLink or NVSwitch (when a node
  gives more than one card), packing; then the fabric's id.

Rank 0, the node that serves the API and that the others meet, is the best
of the set by that order. A replica over several nodes preempts nothing.

When no fabric has room, the decision says so for each fabric, and names
the nodes with room but no fabric: `no fabric has 2 nodes with 8 free GPUs
of class h100-80gb: fabric ib:fe80::/0x7fff has 1 (gpu-01)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from llmgw.config.server import ModelConfig, Profile
from llmgw.control.devices import node_devices

if TYPE_CHECKING:
    from llmgw.control.placement import PlacementPass, _View

#: The label an operator sets on nodes whose fabric the agent cannot tell (it joins what the agent reports).
FABRIC_LABEL = "llmgw.io/fabric"


def node_fabrics(node) -> tuple[str, ...]:
    """The fabrics a node is on: what its agent reports, and the operator's label."""
    found = list(getattr(node, "fabrics", ()) or ())
    label = node.labels.get(FABRIC_LABEL, "")
    if label and label not in found:
        found.append(label)
    return tuple(found)


def nvlinked(node) -> frozenset[int]:
    """The device numbers of the node's whole cards that have active NVLink links."""
    return frozenset(g.index for g in node.gpus if getattr(g, "nvlink_links", 0) and not g.mig_mode)


def _words_gpus(profile: Profile) -> str:
    text = f"{profile.gpus} free GPU{'s' if profile.gpus != 1 else ''}"
    return f"{text} of class {profile.gpu_class}" if profile.gpu_class else text


def decide_nodes(p: PlacementPass, model: ModelConfig, profile: Profile, engine: str, view: _View,
                 here: Mapping[int, int], in_rack: Mapping[str, int], weights: set[int],
                 avoid: set[int]) -> tuple[list[tuple[int, tuple[int, ...]]] | None, str]:
    """The slots of the chosen nodes, rank 0 first, each with its cards; or None and why no fabric has room."""
    gpus, gpu_class, memory, cores, count = profile.gpus, profile.gpu_class, profile.memory, profile.cores, \
        profile.nodes
    rooms, racks, ids, nodes = p._room, p._rack, p._ids, p._node
    groups: dict[str, list[int]] = {}
    homeless: list[int] = []
    for s in sorted(view.members):
        if s in avoid:
            continue
        fabrics = node_fabrics(nodes[s])
        for fabric in fabrics:
            groups.setdefault(fabric, [])  # named in the reason even when none of its nodes has room
        by_class, total, memory_free, cores_free = rooms[s]
        if (by_class.get(gpu_class, 0) if gpu_class else total) < gpus:
            continue
        if (memory and memory_free < memory) or (cores and cores_free < cores):
            continue
        if not fabrics:
            homeless.append(s)
        for fabric in fabrics:
            groups[fabric].append(s)

    def cards(s: int) -> tuple[int, ...]:
        held = p._held[s]
        linked = nvlinked(nodes[s])
        free = [d.index for d in node_devices(nodes[s].gpus)
                if d.usable and d.index not in held and (not gpu_class or d.gpu_class == gpu_class)]
        free.sort(key=lambda i: (i not in linked, i))
        return tuple(sorted(free[:gpus]))

    def key(s: int) -> tuple:
        _, total, memory_free, cores_free = rooms[s]
        joined = gpus <= 1 or set(cards(s)) <= nvlinked(nodes[s])
        return (here.get(s, 0), sum(in_rack.get(d, 0) for d in racks[s]), 0 if s in weights else 1,
                0 if joined else 1, total - gpus, cores_free - cores, memory_free - memory, ids[s])

    best: tuple | None = None
    chosen: list[int] | None = None
    for fabric, members in groups.items():
        if len(members) < count:
            continue
        ranked = sorted(members, key=key)[:count]
        keys = [key(s) for s in ranked]
        score = (*(sum(k[i] for k in keys) for i in range(7)), fabric)
        if best is None or score < best:
            best, chosen = score, ranked
    if chosen is not None:
        return [(s, cards(s)) for s in chosen], ""
    parts = []
    for fabric in sorted(groups):
        members = groups[fabric]
        parts.append(f"fabric {fabric} has {len(members)}" + (f" ({', '.join(ids[s] for s in members)})"
                                                               if members else ""))
    if homeless:
        names = ", ".join(ids[s] for s in homeless)
        parts.append(f"{names} {'has' if len(homeless) == 1 else 'have'} room but report"
                     f"{'s' if len(homeless) == 1 else ''} no RDMA fabric")
    if not parts:
        parts.append("no node that can run it has room")
    why = f"no fabric has {count} nodes with {_words_gpus(profile)}: " + "; ".join(parts)
    return None, why


__all__ = ["FABRIC_LABEL", "decide_nodes", "node_fabrics", "nvlinked"]
