"""The devices placement hands out on a node, and the cards it keeps out.

A node's agent reports whole cards (`GpuInfo`), each with its MIG instances
when the card is in MIG mode. Placement works on *devices*:

- a card not in MIG mode is one device, numbered as nvidia-smi numbers it;
- a card in MIG mode is never handed out whole (CUDA cannot open it while
  MIG is on): each of its instances is a device of its own class
  (`a100-40gb-mig-3g.20gb`), with its own memory, numbered
  1000 + 100 × card + instance, and given to an engine by its `MIG-…` UUID.

A device is *kept out* (not handed out, with the reason in
explain-placement) when its card is degraded or failed. The node's agent
judges that and says why: heat (agent.yaml gpu_degraded_temperature_c),
clocks held down, memory errors, recent XID errors, and processes that are
not llmgw's engines holding more of its memory than agent.yaml
gpu_foreign_memory_limit. Only the agent can tell its engines' processes
from others', and each node has its own limits, so placement applies no
thresholds of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import attrs

from llmgw.wire.messages import GpuInfo

#: The first device number of MIG instances: 1000 + 100 × card + the instance's number on its card.
MIG_INDEX_BASE = 1000
MIG_MARKER = "-mig-"


def mig_index(card: int, device: int) -> int:
    """The device number placement knows a MIG instance by."""
    return MIG_INDEX_BASE + 100 * card + device


def is_mig_index(index: int) -> bool:
    return index >= MIG_INDEX_BASE


def mig_class(card_class: str, profile: str) -> str:
    """`a100-40gb` and `3g.20gb` give `a100-40gb-mig-3g.20gb` (as discovery names it)."""
    clean = "".join(c if c.isalnum() or c == "." else "-" for c in profile.strip().lower()).strip("-")
    return f"{card_class}{MIG_MARKER}{clean}"


@attrs.frozen
class Device:
    """One thing placement can give a replica: a whole card or a MIG instance."""

    index: int
    gpu_class: str
    uuid: str = ""
    memory_total_bytes: int = 0
    card: int = 0  #: the card it is (or is carved from)
    #: why it is not handed out, in words; empty when it may be
    kept_out: str = ""

    @property
    def usable(self) -> bool:
        return not self.kept_out

    @property
    def label(self) -> str:
        """How explain names it: `GPU 3`, or `GPU 0/mig1` for an instance."""
        if is_mig_index(self.index):
            return f"GPU {self.card}/mig{(self.index - MIG_INDEX_BASE) % 100}"
        return f"GPU {self.index}"


def _card_problem(g: GpuInfo) -> str:
    if g.health in ("degraded", "failed"):
        return f"{g.health}: {g.problem}" if g.problem else g.health
    return ""


def node_devices(gpus: Sequence[GpuInfo]) -> tuple[Device, ...]:
    """Every device of a node's cards, usable or kept out, in card order (worked out once per set of cards)."""
    key = tuple(gpus)
    # Placement asks for the same node's cards many times a pass: the very tuple is found without hashing it.
    seen = _by_identity.get(id(key))
    if seen is not None and seen[0] is key:
        return seen[1]
    try:
        found = _devices_of(key)
    except TypeError:  # something unhashable in a reading: worked out each time
        return _devices_of.__wrapped__(key)
    if len(_by_identity) >= 8192:
        _by_identity.clear()
    _by_identity[id(key)] = (key, found)
    return found


_by_identity: dict[int, tuple[tuple[GpuInfo, ...], tuple[Device, ...]]] = {}


@functools.lru_cache(maxsize=4096)
def _devices_of(gpus: tuple[GpuInfo, ...]) -> tuple[Device, ...]:
    out: list[Device] = []
    for g in gpus:
        problem = _card_problem(g)
        if g.mig_mode and not g.mig:
            out.append(Device(index=g.index, gpu_class=g.gpu_class, uuid=g.uuid, card=g.index,
                              kept_out="in MIG mode with no instances: create some (nvidia-smi mig -cgi … -C) "
                                       "or turn MIG off"))
            continue
        if g.mig:
            for m in g.mig:
                out.append(Device(
                    index=mig_index(g.index, m.device),
                    gpu_class=m.gpu_class or mig_class(g.gpu_class, m.profile),
                    uuid=m.uuid, memory_total_bytes=m.memory_total_bytes, card=g.index, kept_out=problem,
                ))
            continue
        out.append(Device(index=g.index, gpu_class=g.gpu_class, uuid=g.uuid,
                          memory_total_bytes=g.memory_total_bytes, card=g.index, kept_out=problem))
    return tuple(out)


def kept_out_words(devices: Sequence[Device], gpu_class: str) -> str:
    """The devices of a class (any, when empty) kept out, each with its reason, for a rejection."""
    seen: dict[str, list[str]] = {}
    for d in devices:
        if d.kept_out and (not gpu_class or d.gpu_class == gpu_class):
            seen.setdefault(d.kept_out, []).append(d.label)
    return "; ".join(f"{', '.join(labels)} kept out ({why})" for why, labels in seen.items())


__all__ = ["MIG_INDEX_BASE", "Device", "is_mig_index", "kept_out_words", "mig_class",
           "mig_index", "node_devices"]
