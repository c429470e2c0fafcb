"""What a node's GPUs are, and whether each is fit to run on.

Both sources (NVML and nvidia-smi) build these same classes, and the same
rules judge their health, so a node reads alike whichever answered. Every
reading a driver may not give is `None`: a card without ECC has no error
count, which is not the same as no errors.
"""

from __future__ import annotations

from typing import Iterable

import attrs

from .gpu_class import mig_class

OK = "ok"
DEGRADED = "degraded"
FAILED = "failed"
_RANK = {OK: 0, DEGRADED: 1, FAILED: 2}

# Above this the card is degraded: most data-centre cards start to slow
# themselves down in the high 80s, and a card that hot is slower than its
# measurements say.
HOT_C = 87.0

# The clock event ("throttle") reasons that mean the card is being held
# back, by NVML's bit. Idle, application clock settings and sync boost are
# left out: they are not the card being slowed against its will.
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
)
# Of those, the ones that say the card is too hot (hw_slowdown is asserted
# for heat or a failing power supply; either way the card is not well).
THERMAL_THROTTLE = frozenset({"sw_thermal", "hw_thermal", "hw_slowdown", "hw_power_brake"})


def throttle_names(bits: int | None) -> tuple[str, ...]:
    """The reasons named in a clock event bit mask; empty for None or nothing set."""
    if not bits:
        return ()
    return tuple(name for bit, name in THROTTLE_BITS if bits & bit)


def normalise_bus_id(bus_id: str | None) -> str:
    """A PCI address as Linux writes it, so sources compare equal.

    nvidia-smi and NVML say "00000000:3B:00.0", sysfs "0000:3b:00.0".
    """
    if not bus_id:
        return ""
    s = bus_id.strip().lower()
    domain, sep, rest = s.partition(":")
    if not sep or rest.count(":") != 1:
        return s
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return s


@attrs.frozen(kw_only=True)
class MigInstance:
    """One MIG instance: a slice of a card that CUDA sees as a device of its own."""

    device: int  #: the instance's number on its card, as `nvidia-smi -L` lists it
    uuid: str  #: "MIG-…": what CUDA_VISIBLE_DEVICES takes to give an engine this slice
    profile: str  #: NVIDIA's name for the slice, "3g.40gb": 3 of 7 compute slices, 40 GB
    gpu_class: str  #: the card's class and the profile: "a100-80gb-mig-3g.40gb"
    memory_total_mib: int
    memory_used_mib: int | None = None
    gpu_instance_id: int | None = None  #: as `nvidia-smi mig -lgi` lists it
    compute_instance_id: int | None = None  #: as `nvidia-smi mig -lci` lists it
    placement: str = ""  #: the GPU instance's memory slices as "start:size" (`nvidia-smi mig -lgi`); "": not read


@attrs.frozen(kw_only=True)
class Gpu:
    """One physical card and what its driver says about it."""

    index: int  #: nvidia-smi's index (PCI bus order)
    uuid: str
    name: str  #: as the driver gives it: "NVIDIA H100 80GB HBM3"
    pci_bus_id: str  #: normalised: "0000:18:00.0"
    memory_total_mib: int
    gpu_class: str  #: "h100-80gb"; see gpu_class.py
    memory_used_mib: int | None = None
    compute_capability: str | None = None  #: "9.0"
    driver_version: str | None = None
    temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None  #: the enforced limit
    utilization_gpu_pct: float | None = None  #: None on a card in MIG mode: no driver measures it
    utilization_memory_pct: float | None = None
    sm_clock_mhz: float | None = None
    throttle_reasons: tuple[str, ...] = ()  #: what holds the clocks down now, see THROTTLE_BITS
    ecc_uncorrected_volatile: int | None = None  #: since the driver loaded; None: no ECC
    retired_pages_pending: bool | None = None  #: pages waiting for a reset (before Ampere)
    row_remap_pending: bool | None = None  #: rows waiting for a reset (Ampere and later)
    row_remap_failure: bool | None = None  #: out of spare rows: the card needs replacing
    mig_enabled: bool | None = None  #: None: the card cannot do MIG
    mig_pending_enabled: bool | None = None  #: the mode after the next reset
    mig_instances: tuple[MigInstance, ...] = ()
    pcie_replays: int | None = None  #: PCIe replays since the driver loaded: a rising count is a bad link
    xid_errors: tuple[int, ...] = ()  #: XID codes in the kernel log within xid.WINDOW_S
    xid_last: str = ""  #: the driver's words on the last of them
    xid_last_code: int | None = None  #: the code of the last of them
    health: str = OK  #: ok | degraded | failed
    health_reasons: tuple[str, ...] = ()

    def mig_placement_index(self, instance: MigInstance) -> int:
        """The device number placement knows an instance by: 1000 + 100 × card + device."""
        return 1000 + 100 * self.index + instance.device


@attrs.frozen(kw_only=True)
class GpuSensors:
    """The fast-changing part of a Gpu, for heartbeats."""

    index: int
    uuid: str
    temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None
    memory_used_mib: int | None = None
    sm_clock_mhz: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    ecc_uncorrected_volatile: int | None = None
    retired_pages_pending: bool | None = None
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    pcie_replays: int | None = None
    #: NVLink errors since the driver loaded, summed over the card's links, as (kind, count): crc, replay,
    #: recovery (nvlink_errors.py); empty for a card without NVLink
    nvlink_errors: tuple[tuple[str, int], ...] = ()
    xid_errors: tuple[int, ...] = ()
    xid_last: str = ""
    xid_last_code: int | None = None
    #: the compute processes on the card as (pid, bytes of its memory or None); None: not listed
    processes: tuple[tuple[int, int | None], ...] | None = None
    health: str = OK
    health_reasons: tuple[str, ...] = ()


# --- health -------------------------------------------------------------------


def assess_health(
    *,
    temperature_c: float | None = None,
    throttle_reasons: Iterable[str] = (),
    ecc_uncorrected_volatile: int | None = None,
    retired_pages_pending: bool | None = None,
    row_remap_pending: bool | None = None,
    row_remap_failure: bool | None = None,
    extra: Iterable[tuple[str, str]] = (),
    hot_c: float = HOT_C,
) -> tuple[str, tuple[str, ...]]:
    """The health of a card from its readings: (status, reasons).

    failed: do not place work here; a person has to look (memory errors,
    no spare rows, a card the driver lost). degraded: it runs, slower or
    waiting for a reset; place elsewhere first. `extra` adds findings a
    source made itself, as (status, reason). `hot_c`: the temperature from which a card is degraded
    (agent.yaml gpu_degraded_temperature_c).
    """
    found: list[tuple[str, str]] = []
    if ecc_uncorrected_volatile:
        found.append((FAILED, f"{ecc_uncorrected_volatile} uncorrected ECC errors since the driver loaded: "
                      "work on this card may have computed on corrupt memory; drain the node and have the card checked"))
    if row_remap_failure:
        found.append((FAILED, "memory row remapping failed: the card has no spare rows left and needs replacing"))
    if retired_pages_pending:
        found.append((DEGRADED, "memory pages are waiting to be retired: drain the node and reset the card"))
    if row_remap_pending:
        found.append((DEGRADED, "memory rows are waiting to be remapped: drain the node and reset the card"))
    hot = sorted(set(throttle_reasons) & THERMAL_THROTTLE)
    if hot:
        found.append((DEGRADED, f"clocks held down ({', '.join(hot)}): check the card's cooling and power"))
    if temperature_c is not None and temperature_c >= hot_c:
        found.append((DEGRADED, f"running at {temperature_c:g} °C (warning from {hot_c:g} °C)"))
    found.extend(extra)
    if not found:
        return OK, ()
    status = max((s for s, _ in found), key=_RANK.__getitem__)
    return status, tuple(reason for _, reason in found)


def with_health(gpu: Gpu, extra: Iterable[tuple[str, str]] = (), *, mig_listed: bool = True,
                hot_c: float = HOT_C) -> Gpu:
    """The card with its health judged from its own readings (and `extra`).

    `mig_listed` is False when the source could not ask for MIG instances,
    so their absence says nothing.
    """
    extra = list(extra)
    if gpu.mig_enabled and not gpu.mig_instances and mig_listed:
        extra.append((DEGRADED, "MIG is enabled but no instances exist: nothing can run on this card until "
                      "instances are created (nvidia-smi mig -cgi … -C) or MIG is turned off"))
    status, reasons = assess_health(
        temperature_c=gpu.temperature_c,
        throttle_reasons=gpu.throttle_reasons,
        ecc_uncorrected_volatile=gpu.ecc_uncorrected_volatile,
        retired_pages_pending=gpu.retired_pages_pending,
        row_remap_pending=gpu.row_remap_pending,
        row_remap_failure=gpu.row_remap_failure,
        extra=extra,
        hot_c=hot_c,
    )
    return attrs.evolve(gpu, health=status, health_reasons=reasons)


def sensors_with_health(s: GpuSensors, extra: Iterable[tuple[str, str]] = (), *, hot_c: float = HOT_C) -> GpuSensors:
    """A sensor reading with its health judged by the same rules as discovery."""
    status, reasons = assess_health(
        temperature_c=s.temperature_c,
        throttle_reasons=s.throttle_reasons,
        ecc_uncorrected_volatile=s.ecc_uncorrected_volatile,
        retired_pages_pending=s.retired_pages_pending,
        row_remap_pending=s.row_remap_pending,
        row_remap_failure=s.row_remap_failure,
        extra=extra,
        hot_c=hot_c,
    )
    return attrs.evolve(s, health=status, health_reasons=reasons)


def add_findings(reading, findings: Iterable[tuple[str, str]]):
    """A Gpu or GpuSensors with more (status, reason) findings added to the health it already has."""
    findings = list(findings)
    if not findings:
        return reading
    status = max([reading.health, *(st for st, _ in findings)], key=_RANK.__getitem__)
    return attrs.evolve(reading, health=status,
                        health_reasons=tuple(reading.health_reasons) + tuple(r for _, r in findings))


def make_mig_instance(card_class: str, *, device: int, uuid: str, profile: str, memory_total_mib: int,
                      memory_used_mib: int | None = None, gpu_instance_id: int | None = None,
                      compute_instance_id: int | None = None, placement: str = "") -> MigInstance:
    """A MigInstance with its class derived from its card's."""
    return MigInstance(
        device=device, uuid=uuid, profile=profile, gpu_class=mig_class(card_class, profile),
        memory_total_mib=memory_total_mib, memory_used_mib=memory_used_mib,
        gpu_instance_id=gpu_instance_id, compute_instance_id=compute_instance_id, placement=placement,
    )

