"""GPU classes: the name placement and the catalog use for a kind of card.

A class is the card's model and its marketed memory, `h100-80gb`: two cards
of one class are interchangeable to a replica. The form factor is left out
(an H100 SXM and an H100 PCIe are both `h100-80gb`); the memory is kept,
because it decides what fits (an A100 40GB is not an A100 80GB).

Drivers report memory in MiB, and less than the box says: an H100 "80GB"
reports 81559 MiB (79.6 GiB), an L40S "48GB" 46068 MiB (45 GiB), a T4 "16GB"
15360 MiB. The reported size is rounded up to the nearest size NVIDIA sells.
"""

from __future__ import annotations

import math
import re

# Memory sizes cards and MIG slices are sold with, in GB.
MARKETED_GB = (
    1, 2, 3, 4, 5, 6, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96,
    128, 141, 144, 180, 192, 256, 288,
)  # fmt: skip

# How far below its marketed size a card may report (memory the driver keeps
# for itself, and GB sold as 10^9 bytes): the largest seen is ~7 % (L40S, A10G, T4).
_SHORTFALL = 0.10
# And how far above: an A100 40GB reports exactly 40960 MiB; a little slack for rounding.
_EXCESS = 0.01

# Known models, matched on the lower-cased name with "nvidia", "tesla",
# "geforce" and "quadro" removed. First match wins, so the longer names go first.
_MODELS: tuple[tuple[str, str], ...] = (
    (r"\bgh200\b", "gh200"),
    (r"\bgb200\b", "gb200"),
    (r"\bgb300\b", "gb300"),
    (r"\bb300\b", "b300"),
    (r"\bb200\b", "b200"),
    (r"\bb100\b", "b100"),
    (r"\bh200\b", "h200"),
    (r"\bh100\b", "h100"),
    (r"\bh800\b", "h800"),
    (r"\bh20\b", "h20"),
    (r"\ba100\b", "a100"),
    (r"\ba800\b", "a800"),
    (r"\ba10g\b", "a10g"),
    (r"\ba10\b", "a10"),
    (r"\ba16\b", "a16"),
    (r"\ba30\b", "a30"),
    (r"\ba40\b", "a40"),
    (r"\bl40s\b", "l40s"),
    (r"\bl40\b", "l40"),
    (r"\bl20\b", "l20"),
    (r"\bl4\b", "l4"),
    (r"\bt4\b", "t4"),
    (r"\bv100s?\b", "v100"),
    (r"\bp100\b", "p100"),
    (r"\brtx pro (\d{4})\b.*\bblackwell\b", r"rtxpro\1"),
    (r"\brtx (\d{4}) ada\b", r"rtx\1ada"),
    (r"\brtx a(\d{4})\b", r"rtxa\1"),
    (r"\brtx (\d{4})( ti| super)?\b", r"rtx\1\2"),
    (r"\bgtx (\d{3,4})( ti)?\b", r"gtx\1\2"),
)

_VENDOR_WORDS = re.compile(r"\b(nvidia|tesla|geforce|quadro)\b")
_NOT_SLUG = re.compile(r"[^a-z0-9]+")

MIG_MARKER = "-mig-"


def marketed_gb(memory_mib: int | float) -> int:
    """The memory a card is sold with, in GB, from what its driver reports in MiB."""
    gib = float(memory_mib) / 1024
    if gib <= 0:
        return 0
    for size in MARKETED_GB:
        if gib * (1 - _EXCESS) <= size <= gib * (1 + _SHORTFALL):
            return size
    # Not a size we know: the nearest whole number is the honest answer.
    return max(1, math.ceil(gib - 0.5))


def model_slug(name: str) -> str:
    """The model part of a class: `h100` from "NVIDIA H100 80GB HBM3".

    Names we do not know become a slug of the whole name, vendor words
    dropped: "Quadro RTX 8000" gives `rtx-8000`.
    """
    lowered = re.sub(r"\s+", " ", name.lower().replace("-", " ").replace("_", " "))
    for pattern, slug in _MODELS:
        m = re.search(pattern, lowered)
        if m:
            return m.expand(slug).replace(" ", "")
    rest = _VENDOR_WORDS.sub(" ", lowered)
    # A size in the name ("32GB") is said again by the class's memory.
    rest = re.sub(r"\b\d+\s*gb\b", " ", rest)
    slug = _NOT_SLUG.sub("-", rest).strip("-")
    return slug or "gpu"


def gpu_class(name: str, memory_mib: int | float) -> str:
    """A card's class: model and marketed memory, e.g. `h100-80gb`, `l40s-48gb`."""
    return f"{model_slug(name)}-{marketed_gb(memory_mib)}gb"


def mig_class(card_class: str, profile: str) -> str:
    """A MIG instance's class: its card's class and its profile.

    `a100-40gb` and `3g.20gb` give `a100-40gb-mig-3g.20gb`. The card is part
    of the name because the same profile on another card is another slice
    (other memory bandwidth, other profiles beside it). Characters a class
    does not hold become "-": `1g.10gb+me` is `1g.10gb-me`.
    """
    clean = re.sub(r"[^a-z0-9.]+", "-", profile.strip().lower()).strip("-")
    return f"{card_class}{MIG_MARKER}{clean}"


def is_mig_class(cls: str) -> bool:
    """Whether a class names MIG instances rather than whole cards."""
    return MIG_MARKER in cls


_PROFILE = re.compile(r"(\d+)g\.(\d+)gb")


def mig_profile_memory_gb(profile: str) -> int | None:
    """The memory a MIG profile promises, in GB: 20 for `3g.20gb`; None if unnamed."""
    m = _PROFILE.search(profile.lower())
    return int(m.group(2)) if m else None


def mig_profile(slices: int, memory_mib: int | float) -> str:
    """A profile name from an instance's compute slices and memory, as NVIDIA names them."""
    return f"{slices}g.{marketed_gb(memory_mib)}gb"
