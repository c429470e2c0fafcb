"""MIG instances as nvidia-smi lists them, for nodes where NVML cannot be loaded.

Three listings together say what each MIG device is:

- `nvidia-smi -L` names every MIG device under its card, with its profile
  and the UUID an engine is given (`MIG 3g.20gb Device 0: (UUID: MIG-…)`);
- `nvidia-smi mig -lgi` lists the GPU instances: card, profile, profile id,
  instance id and the memory slices it holds (`Start:Size`);
- `nvidia-smi mig -lci` lists the compute instances inside them: card, GPU
  instance id, profile, profile id, instance id (and, on newer drivers, the
  compute slices it holds).

A MIG device is one compute instance, so each listed device is paired with
a compute instance of the same profile. The driver numbers a card's devices
in the order of their GPU instance ids, then their compute instance ids
(the MIG user guide's examples show GI 1 as device 0 and GI 2 as device 1,
and a GI's three compute instances as devices 0, 1 and 2), so instances of
one profile are paired in that order. Where a card's profiles all differ the
pairing is certain; where several share a profile (seven 1g.10gb on an H100)
they are the same size and class, so what placement hands out is the same
whichever way round, and only the ids recorded could be swapped.
"""

from __future__ import annotations

import re

import attrs

# "|   0  MIG 3g.20gb       9        2          4:4     |"
_GI_ROW = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|")
# "|   0      2       MIG 3g.20gb          2         0        0:3     |"; the Placement column is
# absent in older drivers' listings, and a default profile id may carry a star ("2*").
_CI_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\*?\s+(\d+)(?:\s+(\d+):(\d+))?\s*\|")


@attrs.frozen
class GpuInstance:
    """One row of `nvidia-smi mig -lgi`."""

    card: int
    profile: str  #: "3g.20gb"
    profile_id: int
    instance_id: int
    start: int  #: the first memory slice it holds
    size: int  #: how many memory slices it holds


@attrs.frozen
class ComputeInstance:
    """One row of `nvidia-smi mig -lci`."""

    card: int
    gpu_instance: int
    profile: str  #: "3g.20gb" for one compute instance filling its GPU instance, "1c.3g.20gb" for a part
    profile_id: int
    instance_id: int


def parse_gpu_instances(text: str) -> list[GpuInstance]:
    """`nvidia-smi mig -lgi` as its rows; "No GPU instances found" and the table's frame are no rows."""
    out = []
    for line in text.splitlines():
        if m := _GI_ROW.match(line.strip()):
            card, profile, pid, gi, start, size = m.groups()
            out.append(GpuInstance(int(card), profile, int(pid), int(gi), int(start), int(size)))
    return out


def parse_compute_instances(text: str) -> list[ComputeInstance]:
    """`nvidia-smi mig -lci` as its rows."""
    out = []
    for line in text.splitlines():
        if m := _CI_ROW.match(line.strip()):
            card, gi, profile, pid, ci = m.groups()[:5]
            out.append(ComputeInstance(int(card), int(gi), profile, int(pid), int(ci)))
    return out


@attrs.frozen
class Paired:
    """What -lgi and -lci say about one device -L lists; None where they do not say."""

    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    placement: str = ""  #: the GPU instance's memory slices as "start:size"


def _base(profile: str) -> str:
    """A profile without its extra engines ("1g.10gb+me" is a 1g.10gb with the media engines)."""
    return profile.split("+", 1)[0]


def pair_instances(card: int, listed: list[tuple[int, str]], gis: list[GpuInstance],
                   cis: list[ComputeInstance]) -> tuple[list[Paired], list[str]]:
    """For each (device, profile) -L lists on `card`, in that order, its GPU and compute instance; and notes on
    what did not match (a device no compute instance accounts for)."""
    by_gi = {g.instance_id: g for g in gis if g.card == card}
    free = sorted((c for c in cis if c.card == card), key=lambda c: (c.gpu_instance, c.instance_id))
    out: list[Paired] = []
    notes: list[str] = []
    for device, profile in sorted(listed, key=lambda x: x[0]):
        match = next((c for c in free if c.profile == profile), None) or next(
            (c for c in free if _base(c.profile) == _base(profile)), None)
        if match is None:
            out.append(Paired())
            notes.append(f"GPU {card}: MIG device {device} ({profile}) is in no compute instance nvidia-smi mig -lci "
                         "lists: its GPU instance is not known")
            continue
        free.remove(match)
        gi = by_gi.get(match.gpu_instance)
        out.append(Paired(match.gpu_instance, match.instance_id, f"{gi.start}:{gi.size}" if gi else ""))
    return out, notes


__all__ = ["ComputeInstance", "GpuInstance", "Paired", "pair_instances", "parse_compute_instances",
           "parse_gpu_instances"]
