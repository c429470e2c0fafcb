"""A card's NVLink error counters, summed over its links by kind: crc, replay, recovery.

The driver counts each link's errors since it loaded: CRC errors (NVML keeps flit and data CRC apart; both
are "crc" here), replays (a link sending a packet again after a bad one) and recoveries (a link retrained).
A few a day is noise; a count that climbs is a link, a card or an NVSwitch going bad, and tensor-parallel
replicas on the card slow down with it. Read from NVML (`nvmlDeviceGetNvLinkErrorCounter` for each active
link) or from `nvidia-smi nvlink -e`. A card without NVLink has no counters (an empty tuple), never zeros.
"""

from __future__ import annotations

import re
from typing import Any

KINDS = ("crc", "replay", "recovery")

#: NVML's nvmlNvLinkErrorCounter_t, by pynvml's names and values, and the kind each is counted as.
NVML_COUNTERS = (
    ("NVML_NVLINK_ERROR_DL_REPLAY", 0, "replay"),
    ("NVML_NVLINK_ERROR_DL_RECOVERY", 1, "recovery"),
    ("NVML_NVLINK_ERROR_DL_CRC_FLIT", 2, "crc"),
    ("NVML_NVLINK_ERROR_DL_CRC_DATA", 3, "crc"),
)

Counts = tuple[tuple[str, int], ...]  #: (kind, errors) in KINDS order, for the kinds the driver counts


def _counts(sums: dict[str, int]) -> Counts:
    return tuple((kind, sums[kind]) for kind in KINDS if kind in sums)


def nvml_nvlink_errors(nvml: Any, handle: Any, active_links: list[int], error_type: type[BaseException]) -> Counts:
    """The card's counters over `active_links` (the links NVML says are up). A counter the driver does not keep
    for this card is left out; another failure of one read is skipped (the next heartbeat reads again)."""
    read = getattr(nvml, "nvmlDeviceGetNvLinkErrorCounter", None)
    if read is None or not active_links:
        return ()
    sums: dict[str, int] = {}
    for name, default, kind in NVML_COUNTERS:
        counter = getattr(nvml, name, default)
        for link in active_links:
            try:
                value = read(handle, link, counter)
            except error_type:
                continue
            sums[kind] = sums.get(kind, 0) + int(value)
    return _counts(sums)


# `nvidia-smi nvlink -e` prints each card, then a line per link and counter, worded by driver:
# "Link 0: Replay Errors: 0", "Link 0: CRC Errors: 0", "Link 3: Data CRC Errors: 2", "Link 1: Flit CRC Errors: 1".
_CARD = re.compile(r"^GPU (\d+):")
_COUNTER = re.compile(r"Link \d+:\s*(.*?)\s*Errors?\s*:\s*(\d+)\s*$", re.IGNORECASE)


def parse_smi_nvlink_errors(text: str) -> dict[int, Counts]:
    """Each card's counters (by index) from `nvidia-smi nvlink -e`; a card with no link lines is left out."""
    sums: dict[int, dict[str, int]] = {}
    card: int | None = None
    for line in text.splitlines():
        line = line.strip()
        m = _CARD.match(line)
        if m:
            card = int(m.group(1))
            continue
        m = _COUNTER.search(line)
        if m is None or card is None:
            continue
        words = m.group(1).lower()
        kind = next((k for k in KINDS if k in words), None)  # "Data CRC", "Flit CRC", "CRC", "Replay", ...
        if kind is not None:
            by_kind = sums.setdefault(card, {})
            by_kind[kind] = by_kind.get(kind, 0) + int(m.group(2))
    return {card: _counts(by_kind) for card, by_kind in sums.items()}
