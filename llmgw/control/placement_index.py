"""The nodes with room for one profile's next replica, by failure domain, in packing order.

A placement pass (placement.py) keeps one `PackingIndex` per profile it has
been asked about. It holds only the nodes that pass the profile's filters
and have room for it now (enough free cards of its class, cores and memory:
all fixed for a profile), grouped by the failure domains a model's replicas
are spread over (the node's rack and PDUs: `spread_domains`), each group in
packing order, and the groups in the order of their first node.

Placement's order is: fewest replicas of the model on the node, then in its
rack and PDUs, then packing. Every node of a group has the same count of the
model's replicas in its domains, so a decision walks the groups, not the
nodes: a group whose domains already hold more of the model than the best
found so far is passed over whole, where a scan over every node would step
over each of its nodes in turn; and the walk stops at the first group whose
first node nothing after it can beat. A node's room changing moves it only
within its own group (a rack's few nodes) and, when it was or becomes the
group's first, moves the group among the groups: no list of the whole
cluster is rewritten when a replica is placed.

The choice is the one a scan over every node in packing order makes
(tests/control/test_placement_index.py compares them over random clusters).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence

#: A node's place in packing order: (free cards, cores free, memory free, node id, slot); the slot makes it unique.
PackKey = tuple[int, int, int, str, int]
#: A node's room: (free cards by class, free cards, memory free, cores free).
Room = tuple[dict[str, int], int, int, int]


class PackingIndex:
    """One profile's nodes with room now, by spread group (see the module's docstring)."""

    __slots__ = ("cores", "gpu_class", "gpus", "groups", "heads", "memory")

    def __init__(self, gpus: int, gpu_class: str, memory: int, cores: int) -> None:
        self.gpus, self.gpu_class, self.memory, self.cores = gpus, gpu_class, memory, cores
        #: group -> its nodes with room, sorted by pack key
        self.groups: dict[int, list[PackKey]] = {}
        #: (first pack key, group) of every group with a node that has room, sorted
        self.heads: list[tuple[PackKey, int]] = []

    def fits(self, room: Room) -> bool:
        """Whether a node with this room has room for one more replica of the profile."""
        by_class, total, memory_free, cores_free = room
        gpus = self.gpus
        if gpus > 0 and (by_class.get(self.gpu_class, 0) if self.gpu_class else total) < gpus:
            return False
        if self.memory and memory_free < self.memory:
            return False
        return not (self.cores and cores_free < self.cores)

    def fill(self, slots: Iterable[int], rooms: Sequence[Room], packs: Sequence[PackKey],
             group_of: Sequence[int]) -> None:
        """Index `slots` (the nodes that pass the profile's filters) as their rooms are now."""
        groups: dict[int, list[PackKey]] = {}
        for s in slots:
            if self.fits(rooms[s]):
                groups.setdefault(group_of[s], []).append(packs[s])
        for members in groups.values():
            members.sort()
        self.groups = groups
        self.heads = sorted((members[0], g) for g, members in groups.items())

    def move(self, group: int, old_room: Room, old: PackKey, room: Room, new: PackKey) -> None:
        """A node of `group` had `old_room` (its pack key `old`) and now has `room` (at `new`)."""
        members = self.groups.get(group)
        head = members[0] if members else None
        if members and self.fits(old_room):
            del members[bisect_left(members, old)]
        if self.fits(room):
            if members is None:
                members = self.groups[group] = []
            insort(members, new)
        first = members[0] if members else None
        if first is not head:
            heads = self.heads
            if head is not None:
                del heads[bisect_left(heads, (head, group))]
            if first is not None:
                insort(heads, (first, group))

    def best(self, here: Mapping[int, int], in_rack: Mapping[str, int], domains: Sequence[tuple[str, ...]],
             floor: int, skip: set[int], best_spread: tuple[int, int] | None, best_slot: int | None) -> int | None:
        """The slot placement's order ranks first: fewest of the model's replicas on the node (`here`), then in
        its domains (`in_rack`, each group's `domains`), then packing; nodes in `skip` left out.

        `best_spread`/`best_slot`: the best of the nodes weighed before (those holding the weights), which a
        node here beats only with fewer replicas; `floor`: the fewest replicas any node's domains can hold."""
        # The best so far beats a node at `spread` and pack key `key` when its spread is fewer, or the same
        # and it comes first in packing order (one of those weighed before always does: best_key None).
        best_key: PackKey | None = None
        lowest = (0, floor)  # no node has fewer
        groups = self.groups
        for head, g in self.heads:
            # Every node from here on is at least `lowest`, and comes after `head`.
            if best_spread == lowest and (best_key is None or best_key < head):
                break
            of = domains[g]
            if not in_rack or not of:
                count = 0
            elif len(of) == 1:
                count = in_rack.get(of[0], 0)
            else:
                count = sum(in_rack.get(d, 0) for d in of)
            least = (0, count)  # what the group's nodes have at least
            for key in groups[g]:
                if best_spread is not None and (least > best_spread or (
                        least == best_spread and (best_key is None or best_key < key))):
                    break  # nor can any of the group's nodes after it
                s = key[4]
                if s in skip:
                    continue
                spread = (here.get(s, 0), count) if here else least
                if best_spread is None or spread < best_spread or (
                        spread == best_spread and best_key is not None and key < best_key):
                    best_spread, best_slot, best_key = spread, s, key
                if not spread[0]:
                    break  # the group's later nodes have no fewer replicas, and come later
        return best_slot


__all__ = ["PackKey", "PackingIndex", "Room"]
