"""GPU discovery through NVML (pynvml), the driver's own library.

Everything here is blocking (NVML calls into the driver) and runs in an
executor; the async entry points are in `__init__.py`. Every call is
guarded: a node without the library gets `NvmlUnavailable`, and a reading a
card does not support (NVML_ERROR_NOT_SUPPORTED, a function an older driver
lacks) is `None`, never a crash. Other failures of one reading are kept as
errors and the rest of the card is still read.

`nvml` is the pynvml module or anything shaped like it (the tests' fake):
the functions below are all that is called on it.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Callable

import attrs

from .fabric import RawLink
from .gpu_class import gpu_class, mig_profile, mig_profile_memory_gb
from .nvlink_errors import nvml_nvlink_errors
from .gpus import (
    FAILED, HOT_C, Gpu, GpuSensors, MigInstance, make_mig_instance, normalise_bus_id, sensors_with_health,
    throttle_names, with_health,
)

# NVML's return codes (nvmlReturn_t), for the ones handled by name.
_NOT_SUPPORTED = 3
_INVALID_ARGUMENT = 2
_NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
# Readings a card or driver simply does not have: None, and nothing to report.
_ABSENT = frozenset({_NOT_SUPPORTED, _FUNCTION_NOT_FOUND, _NOT_FOUND})

_MIB = 1 << 20
_MIG_NAME = re.compile(r"MIG\s+(\S+)\s*$")


class NvmlUnavailable(Exception):
    """NVML cannot be used on this node. `quiet` when that is simply a node without NVIDIA's driver."""

    def __init__(self, reason: str, *, quiet: bool = False):
        super().__init__(reason)
        self.quiet = quiet


@attrs.frozen(kw_only=True)
class NvmlReport:
    """What NVML said: the cards, their NVLink links, and what could not be read."""

    gpus: tuple[Gpu, ...]
    driver_version: str | None
    nvlinks: dict[int, tuple[RawLink, ...]]
    errors: tuple[str, ...] = ()


def load_pynvml() -> Any | None:
    """The pynvml module, or None where it is not installed."""
    with warnings.catch_warnings():
        # The "pynvml" distribution warns that it is deprecated in favour of
        # nvidia-ml-py, whose module is the one imported here.
        warnings.simplefilter("ignore", FutureWarning)
        try:
            import pynvml  # type: ignore[import-untyped]
        except ImportError:
            return None
    return pynvml


def _code(e: BaseException) -> int | None:
    return getattr(e, "value", None)


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


class _Reader:
    """Calls NVML functions by name, turning each failure into None and, when it matters, an error."""

    def __init__(self, nvml: Any):
        self.nvml = nvml
        self.error_type: type[BaseException] = getattr(nvml, "NVMLError", Exception)
        self.errors: list[str] = []
        self.lost: str | None = None

    def const(self, name: str, default: int) -> int:
        return getattr(self.nvml, name, default)

    def get(self, what: str, fn_name: str, *args: Any, where: str = "") -> Any:
        fn: Callable[..., Any] | None = getattr(self.nvml, fn_name, None)
        if fn is None:
            return None  # this pynvml predates the call
        try:
            return fn(*args)
        except self.error_type as e:
            code = _code(e)
            if code in _ABSENT:
                return None
            if code == _GPU_IS_LOST:
                self.lost = f"NVML: {e}"
                return None
            self.errors.append(f"{where}{what}: {e}")
            return None


def _init(nvml: Any) -> None:
    if nvml is None:
        raise NvmlUnavailable("pynvml is not installed", quiet=True)
    try:
        nvml.nvmlInit()
    except getattr(nvml, "NVMLError", Exception) as e:
        code = _code(e)
        if code == _LIBRARY_NOT_FOUND:
            raise NvmlUnavailable("the NVML library (libnvidia-ml.so.1) is not installed", quiet=True) from e
        if code == _DRIVER_NOT_LOADED:
            raise NvmlUnavailable("the NVIDIA driver is not loaded (is the kernel module in?)") from e
        raise NvmlUnavailable(f"NVML did not start: {e}") from e
    except OSError as e:
        raise NvmlUnavailable(f"NVML could not be loaded: {e}") from e


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - nothing to do about a failed shutdown
        pass


def _handles(r: _Reader) -> list[tuple[int, Any, str | None]]:
    """(index, handle, error) for every card; a card NVML cannot open has no handle."""
    try:
        count = r.nvml.nvmlDeviceGetCount()
    except r.error_type as e:
        raise NvmlUnavailable(f"NVML could not count the GPUs: {e}") from e
    out = []
    for i in range(count):
        try:
            out.append((i, r.nvml.nvmlDeviceGetHandleByIndex(i), None))
        except r.error_type as e:
            out.append((i, None, str(e)))
    return out


def _memory(r: _Reader, h: Any, where: str) -> Any:
    """Memory info, v2 where the driver has it: its "used" leaves out what the driver reserves."""
    v2 = getattr(r.nvml, "nvmlMemory_v2", None)
    if v2 is not None:
        try:
            return r.nvml.nvmlDeviceGetMemoryInfo(h, v2)
        except (r.error_type, TypeError):
            pass  # an older driver: ask the first version
    return r.get("memory", "nvmlDeviceGetMemoryInfo", h, where=where)


def _throttle(r: _Reader, h: Any, where: str) -> tuple[str, ...]:
    # Renamed "clock event reasons" in R535; the old name is kept for older drivers.
    name = ("nvmlDeviceGetCurrentClocksEventReasons" if hasattr(r.nvml, "nvmlDeviceGetCurrentClocksEventReasons")
            else "nvmlDeviceGetCurrentClocksThrottleReasons")
    return throttle_names(r.get("clock event reasons", name, h, where=where))


def _sensors(r: _Reader, h: Any, where: str) -> dict[str, Any]:
    """The fast-changing readings of one card, as Gpu/GpuSensors fields."""
    mem = _memory(r, h, where)
    temp = r.get("temperature", "nvmlDeviceGetTemperature", h, r.const("NVML_TEMPERATURE_GPU", 0), where=where)
    power = r.get("power draw", "nvmlDeviceGetPowerUsage", h, where=where)
    limit = r.get("power limit", "nvmlDeviceGetEnforcedPowerLimit", h, where=where)
    util = r.get("utilisation", "nvmlDeviceGetUtilizationRates", h, where=where)
    clock = r.get("SM clock", "nvmlDeviceGetClockInfo", h, r.const("NVML_CLOCK_SM", 1), where=where)
    ecc = r.get("ECC errors", "nvmlDeviceGetTotalEccErrors", h, r.const("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                r.const("NVML_VOLATILE_ECC", 0), where=where)
    retired = r.get("retired pages", "nvmlDeviceGetRetiredPagesPendingStatus", h, where=where)
    remap = r.get("remapped rows", "nvmlDeviceGetRemappedRows", h, where=where)
    replays = r.get("PCIe replays", "nvmlDeviceGetPcieReplayCounter", h, where=where)
    return {
        "memory_used_mib": int(mem.used) // _MIB if mem is not None else None,
        "temperature_c": float(temp) if temp is not None else None,
        "power_draw_w": round(power / 1000, 2) if power is not None else None,
        "power_limit_w": round(limit / 1000, 2) if limit is not None else None,
        "utilization_gpu_pct": float(util.gpu) if util is not None else None,
        "utilization_memory_pct": float(util.memory) if util is not None else None,
        "sm_clock_mhz": float(clock) if clock is not None else None,
        "throttle_reasons": _throttle(r, h, where),
        "ecc_uncorrected_volatile": int(ecc) if ecc is not None else None,
        "retired_pages_pending": bool(retired) if retired is not None else None,
        "row_remap_pending": bool(remap[2]) if remap is not None else None,
        "row_remap_failure": bool(remap[3]) if remap is not None else None,
        "pcie_replays": int(replays) if replays is not None else None,
    }


def _processes(r: _Reader, h: Any, where: str) -> tuple[tuple[int, int | None], ...] | None:
    """The compute processes on the card, (pid, bytes); None when NVML cannot list them."""
    procs = r.get("compute processes", "nvmlDeviceGetComputeRunningProcesses", h, where=where)
    if procs is None:
        return None
    out = []
    for p in procs:
        used = getattr(p, "usedGpuMemory", None)
        out.append((int(p.pid), int(used) if used is not None else None))
    return tuple(out)


def _mig_instances(r: _Reader, h: Any, card: str, where: str) -> tuple[MigInstance, ...]:
    count = r.get("MIG device count", "nvmlDeviceGetMaxMigDeviceCount", h, where=where) or 0
    by_index = getattr(r.nvml, "nvmlDeviceGetMigDeviceHandleByIndex", None)
    if by_index is None:
        r.errors.append(f"{where}MIG is enabled but this pynvml cannot list MIG devices")
        return ()
    out = []
    for i in range(count):
        try:
            mh = by_index(h, i)
        except r.error_type as e:
            if _code(e) not in (_NOT_FOUND, _INVALID_ARGUMENT):
                r.errors.append(f"{where}MIG device {i}: {e}")
            continue  # NOT_FOUND: no instance behind this index, which is how NVML says so
        w = f"{where}MIG device {i}: "
        name = _text(r.get("name", "nvmlDeviceGetName", mh, where=w) or "")
        m = _MIG_NAME.search(name)
        mem = _memory(r, mh, w)
        if m:
            profile = m.group(1)
        else:
            # Drivers that do not name the instance: its slices and memory do.
            a = r.get("attributes", "nvmlDeviceGetAttributes", mh, where=w)
            profile = mig_profile(a.gpuInstanceSliceCount, a.memorySizeMB) if a is not None else f"mig{i}"
        total = int(mem.total) // _MIB if mem is not None else (mig_profile_memory_gb(profile) or 0) * 1024
        gi = r.get("GPU instance id", "nvmlDeviceGetGpuInstanceId", mh, where=w)
        ci = r.get("compute instance id", "nvmlDeviceGetComputeInstanceId", mh, where=w)
        out.append(make_mig_instance(
            card, device=i, uuid=_text(r.get("UUID", "nvmlDeviceGetUUID", mh, where=w) or ""), profile=profile,
            memory_total_mib=total, memory_used_mib=int(mem.used) // _MIB if mem is not None else None,
            gpu_instance_id=gi, compute_instance_id=ci,
        ))
    return tuple(out)


def _active_links(r: _Reader, h: Any) -> list[int]:
    """The card's NVLink links that are up; [] for a card without NVLink."""
    out = []
    for link in range(r.const("NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active = r.nvml.nvmlDeviceGetNvLinkState(h, link)
        except r.error_type as e:
            if _code(e) in (_NOT_SUPPORTED, _INVALID_ARGUMENT, _FUNCTION_NOT_FOUND):
                break  # no NVLink on this card, or past its last link
            continue
        except AttributeError:
            break
        if active == r.const("NVML_FEATURE_ENABLED", 1):
            out.append(link)
    return out


def _nvlinks(r: _Reader, h: Any, where: str) -> tuple[RawLink, ...]:
    links: list[RawLink] = []
    for link in _active_links(r, h):
        pci = r.get("NVLink remote", "nvmlDeviceGetNvLinkRemotePciInfo", h, link, where=where)
        kind = r.get("NVLink remote type", "nvmlDeviceGetNvLinkRemoteDeviceType", h, link, where=where)
        bus = normalise_bus_id(_text(pci.busId)) if pci is not None else ""
        links.append((bus, int(kind) if kind is not None else None))
    return tuple(links)


def _read_card(r: _Reader, index: int, h: Any, driver: str | None, hot_c: float) -> tuple[Gpu, tuple[RawLink, ...]]:
    where = f"GPU {index}: "
    r.lost = None
    name = _text(r.get("name", "nvmlDeviceGetName", h, where=where) or "unknown")
    mem = _memory(r, h, where)
    total = int(mem.total) // _MIB if mem is not None else 0
    cls = gpu_class(name, total)
    pci = r.get("PCI info", "nvmlDeviceGetPciInfo", h, where=where)
    cc = r.get("compute capability", "nvmlDeviceGetCudaComputeCapability", h, where=where)
    mig = r.get("MIG mode", "nvmlDeviceGetMigMode", h, where=where)
    enabled_value = r.const("NVML_DEVICE_MIG_ENABLE", 1)
    mig_enabled = mig[0] == enabled_value if mig is not None else None
    gpu = Gpu(
        index=index,
        uuid=_text(r.get("UUID", "nvmlDeviceGetUUID", h, where=where) or ""),
        name=name,
        pci_bus_id=normalise_bus_id(_text(pci.busId)) if pci is not None else "",
        memory_total_mib=total,
        gpu_class=cls,
        compute_capability=f"{cc[0]}.{cc[1]}" if cc is not None else None,
        driver_version=driver,
        mig_enabled=mig_enabled,
        mig_pending_enabled=mig[1] == enabled_value if mig is not None else None,
        mig_instances=_mig_instances(r, h, cls, where) if mig_enabled else (),
        **_sensors(r, h, where),
    )
    links = _nvlinks(r, h, where)
    extra = [(FAILED, f"the driver has lost this GPU ({r.lost}): it needs a reset or the node a reboot")] if r.lost else []
    return with_health(gpu, extra, hot_c=hot_c), links


def _unopened(index: int, error: str, driver: str | None) -> Gpu:
    return Gpu(
        index=index, uuid="", name="unknown", pci_bus_id="", memory_total_mib=0, gpu_class="unknown",
        driver_version=driver, health=FAILED,
        health_reasons=(f"NVML cannot open this GPU ({error}): check `nvidia-smi` and the kernel log",),
    )


def read_nvml(nvml: Any, hot_c: float = HOT_C) -> NvmlReport:
    """Every card NVML sees, fully read. Blocking: run it in an executor. `hot_c`: see assess_health.

    Raises NvmlUnavailable when NVML cannot be used at all.
    """
    _init(nvml)
    try:
        r = _Reader(nvml)
        driver = r.get("driver version", "nvmlSystemGetDriverVersion")
        driver = _text(driver) if driver is not None else None
        gpus: list[Gpu] = []
        nvlinks: dict[int, tuple[RawLink, ...]] = {}
        for index, h, err in _handles(r):
            if h is None:
                gpus.append(_unopened(index, err or "", driver))
                continue
            gpu, links = _read_card(r, index, h, driver, hot_c)
            gpus.append(gpu)
            if links:
                nvlinks[index] = links
        return NvmlReport(gpus=tuple(gpus), driver_version=driver, nvlinks=nvlinks, errors=tuple(r.errors))
    finally:
        _shutdown(nvml)


def sample_nvml(nvml: Any, hot_c: float = HOT_C) -> tuple[tuple[GpuSensors, ...], tuple[str, ...]]:
    """Each card's fast-changing readings, and what could not be read. Blocking."""
    _init(nvml)
    try:
        r = _Reader(nvml)
        out = []
        for index, h, err in _handles(r):
            if h is None:
                out.append(GpuSensors(index=index, uuid="", health=FAILED,
                                      health_reasons=(f"NVML cannot open this GPU ({err})",)))
                continue
            where = f"GPU {index}: "
            r.lost = None
            uuid = _text(r.get("UUID", "nvmlDeviceGetUUID", h, where=where) or "")
            s = GpuSensors(index=index, uuid=uuid, processes=_processes(r, h, where),
                           nvlink_errors=nvml_nvlink_errors(r.nvml, h, _active_links(r, h), r.error_type),
                           **_sensors(r, h, where))
            extra = [(FAILED, f"the driver has lost this GPU ({r.lost})")] if r.lost else []
            out.append(sensors_with_health(s, extra, hot_c=hot_c))
        return tuple(out), tuple(r.errors)
    finally:
        _shutdown(nvml)


__all__ = ["NvmlReport", "NvmlUnavailable", "load_pynvml", "read_nvml", "sample_nvml"]
