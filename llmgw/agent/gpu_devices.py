"""The GPU devices a shard is given, as the agent names them to its engine.

The control plane numbers devices as placement does (llmgw/control/devices.py):
a whole card by its nvidia-smi index, a MIG instance 1000 + 100 × card +
its number on the card. CUDA cannot open a card in MIG mode, and numbers
MIG instances its own way, so a shard given an instance is shown it by its
UUID (`CUDA_VISIBLE_DEVICES=MIG-…`); whole cards keep their indices (with
CUDA_DEVICE_ORDER=PCI_BUS_ID, as nvidia-smi numbers them).
"""

from __future__ import annotations

from collections.abc import Sequence

from llmgw.agent import discovery

MIG_INDEX_BASE = 1000


def card_of(index: int) -> int:
    """The card a device number is (or is carved from)."""
    return (index - MIG_INDEX_BASE) // 100 if index >= MIG_INDEX_BASE else index


def device_numbers(inv: discovery.Inventory | None) -> dict[int, str]:
    """Every device this node can give a shard, by number: "" for a whole card, the UUID of a MIG instance.
    A card in MIG mode is not among them: only its instances are."""
    out: dict[int, str] = {}
    for g in inv.gpus if inv is not None else ():
        if g.mig_enabled:
            for m in g.mig_instances:
                out[g.mig_placement_index(m)] = m.uuid
        else:
            out[g.index] = ""
    return out


def visible_devices(inv: discovery.Inventory | None, gpus: Sequence[int]) -> tuple[str, ...]:
    """What CUDA_VISIBLE_DEVICES names for these devices: empty when they are all whole cards (the indices
    do), else each by its UUID (MIG-… for an instance, GPU-… for a whole card beside one)."""
    numbers = device_numbers(inv)
    if not any(numbers.get(g) for g in gpus):
        return ()
    cards = {g.index: g.uuid for g in (inv.gpus if inv is not None else ())}
    return tuple(numbers.get(g) or cards.get(g, str(g)) for g in gpus)


__all__ = ["MIG_INDEX_BASE", "card_of", "device_numbers", "visible_devices"]
