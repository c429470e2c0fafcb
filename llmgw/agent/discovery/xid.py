"""XID errors: what NVIDIA's kernel driver writes to the kernel log when a card misbehaves.

A line reads

    [1234567.890123] NVRM: Xid (PCI:0000:3b:00): 79, pid=2211, name=python3, GPU has fallen off the bus.

(older drivers leave out the pid and name). `parse_xid_lines` reads such
lines from `dmesg` output; `xid_findings` says, per card, which codes were
seen within the last `WINDOW_S` seconds and how serious they are. The
codes that mean the card itself is in trouble make it degraded or failed;
the ones an application causes (13: a bad memory access in a kernel, 31:
an MMU fault, 43: a program stopped by the driver) are reported but do not
keep the card out.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Iterable, Sequence

import attrs

from .gpus import DEGRADED, FAILED, normalise_bus_id

#: How far back an XID keeps a card out: long enough that a card reset by hand is not placed on at once.
WINDOW_S = 15 * 60

# The codes that say the card is unwell (from NVIDIA's XID catalogue), with what to do.
_FAILED = {
    48: "a double-bit ECC error",
    64: "a failed ECC row remap",
    74: "an NVLink error",
    79: "the GPU has fallen off the bus",
    92: "a high single-bit ECC error rate",
    94: "a contained ECC error",
    95: "an uncontained ECC error",
    119: "a GSP firmware timeout",
    120: "a GSP firmware error",
    140: "an unrecovered ECC error",
}
_DEGRADED = {
    61: "an internal micro-controller breakpoint",
    62: "an internal micro-controller halt",
    63: "an ECC page retirement or row remap recorded",
    45: "channels torn down by the driver (often after another XID)",
    69: "a graphics engine class error",
}

_LINE = re.compile(
    r"^(?:<\d+>)?\s*(?:\[\s*(?P<ts>\d+(?:\.\d+)?)\])?.*?NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)\):\s*(?P<code>\d+)"
    r"(?:,\s*(?P<rest>.*))?$"
)


@attrs.frozen
class XidEvent:
    """One XID line of the kernel log."""

    pci_bus_id: str  #: normalised, function 0: "0000:3b:00.0"
    code: int
    text: str  #: the rest of the line: pid, program, the driver's words
    uptime_s: float | None = None  #: when, in seconds since boot, where the line says


def _bus(pci: str) -> str:
    # The driver writes "0000:3b:00" (no function): cards are function 0.
    s = pci.strip().lower()
    if s.count(":") == 2 and "." not in s:
        s += ".0"
    return normalise_bus_id(s)


def parse_xid_lines(text: str) -> list[XidEvent]:
    """Every XID line of `dmesg` output, in order; other lines are skipped."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        out.append(XidEvent(
            pci_bus_id=_bus(m.group("pci")), code=int(m.group("code")), text=(m.group("rest") or "").strip(),
            uptime_s=float(m.group("ts")) if m.group("ts") else None,
        ))
    return out


def severity(code: int) -> tuple[str | None, str]:
    """(DEGRADED/FAILED, or None when the code is an application's fault; what the code means)."""
    if code in _FAILED:
        return FAILED, _FAILED[code]
    if code in _DEGRADED:
        return DEGRADED, _DEGRADED[code]
    return None, "an application error"


@attrs.frozen
class CardXids:
    """The XIDs of one card within the window."""

    codes: tuple[int, ...] = ()  #: in the order they came, repeats dropped
    last_text: str = ""
    last_code: int | None = None  #: the code of the most recent one
    findings: tuple[tuple[str, str], ...] = ()  #: (status, reason) for gpus.assess_health's `extra`


def xid_findings(events: Iterable[XidEvent], bus_ids: Sequence[str], *, now_uptime_s: float | None,
                 window_s: float = WINDOW_S) -> dict[str, CardXids]:
    """Per card (by normalised PCI address), its recent XIDs and what they make of its health.

    An event without a time counts as recent only when the uptime is not known either.
    """
    wanted = {normalise_bus_id(b) for b in bus_ids if b}
    by_card: dict[str, list[XidEvent]] = {}
    for e in events:
        if e.pci_bus_id not in wanted:
            continue
        if now_uptime_s is not None and e.uptime_s is not None and now_uptime_s - e.uptime_s > window_s:
            continue
        if now_uptime_s is not None and e.uptime_s is None:
            continue
        by_card.setdefault(e.pci_bus_id, []).append(e)
    out = {}
    minutes = f"{window_s / 60:g} minutes"
    for bus, evs in by_card.items():
        codes: list[int] = []
        for e in evs:
            if e.code not in codes:
                codes.append(e.code)
        findings = []
        for code in codes:
            status, meaning = severity(code)
            if status is not None:
                findings.append((status, f"XID {code} ({meaning}) in the kernel log within the last {minutes}: "
                                         "drain the node and check the card (nvidia-smi -q, nvidia-bug-report.sh)"))
        out[bus] = CardXids(codes=tuple(codes), last_text=evs[-1].text, last_code=evs[-1].code, findings=tuple(findings))
    return out


def read_uptime(proc: str = "/proc") -> float | None:
    try:
        with open(f"{proc}/uptime") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


async def read_kernel_log(timeout: float = 10.0) -> str:
    """The kernel's ring buffer as `dmesg --kernel` prints it; empty where it cannot be read (no dmesg,
    or not allowed: the agent runs as root on a GPU node, where it can)."""
    path = shutil.which("dmesg")
    if path is None:
        return ""
    try:
        proc = await asyncio.create_subprocess_exec(path, "--kernel", stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.DEVNULL)
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except (OSError, asyncio.TimeoutError):
        return ""
    return out.decode("utf-8", "replace") if proc.returncode == 0 else ""


__all__ = ["WINDOW_S", "CardXids", "XidEvent", "parse_xid_lines", "read_kernel_log", "read_uptime", "severity",
           "xid_findings"]
