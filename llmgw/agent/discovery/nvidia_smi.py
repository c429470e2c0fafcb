"""GPU discovery through nvidia-smi, for nodes where NVML cannot be loaded.

`nvidia-smi --query-gpu=… --format=csv,noheader,nounits` gives one line a
card; `nvidia-smi -L` names the MIG instances, and `nvidia-smi mig -lgi` and
`-lci` say which GPU and compute instance each is (smi_mig.py);
`--query-compute-apps` says which processes hold memory on which card, so
the agent can tell its engines' memory from others'. A field the card does not
have reads `[N/A]` or `[Not Supported]` and becomes None. A field the driver
does not know fails the whole query ('Field "x" is not a valid field to
query.'), so such a field is swapped for its older name or dropped, and the
query asked again.

The runner is injectable: `runner(args)` gets nvidia-smi's arguments (not
the program's name) and returns its standard output, or an awaitable of it;
it raises SmiMissing where there is no nvidia-smi and SmiError when it fails.
"""

from __future__ import annotations

import asyncio
import csv
import inspect
import re
import shutil
from typing import Awaitable, Callable, Sequence

import attrs

from .gpu_class import gpu_class, mig_profile_memory_gb
from .nvlink_errors import parse_smi_nvlink_errors
from .smi_mig import Paired, pair_instances, parse_compute_instances, parse_gpu_instances
from .gpus import (
    DEGRADED, FAILED, HOT_C, Gpu, GpuSensors, MigInstance, make_mig_instance, normalise_bus_id, sensors_with_health,
    throttle_names, with_health,
)

Runner = Callable[[Sequence[str]], "str | Awaitable[str]"]

TIMEOUT_S = 15.0


class SmiError(Exception):
    """nvidia-smi ran and failed (or timed out)."""


class SmiMissing(SmiError):
    """There is no nvidia-smi on this node."""


@attrs.frozen
class Field:
    key: str
    names: tuple[str, ...]  #: nvidia-smi's names for it, newest driver's last
    required: bool = False


# What discovery asks for, in order. Where a field was renamed, the old name
# goes first: drivers keep accepting it, and older ones know no other.
FIELDS: tuple[Field, ...] = (
    Field("index", ("index",), True),
    Field("uuid", ("uuid",), True),
    Field("name", ("name",), True),
    Field("pci_bus_id", ("pci.bus_id",)),
    Field("memory_total", ("memory.total",), True),
    Field("memory_used", ("memory.used",)),
    Field("compute_cap", ("compute_cap",)),
    Field("driver_version", ("driver_version",)),
    Field("temperature", ("temperature.gpu",)),
    Field("power_draw", ("power.draw", "power.draw.instant")),
    Field("power_limit", ("enforced.power.limit", "power.limit")),
    Field("util_gpu", ("utilization.gpu",)),
    Field("util_memory", ("utilization.memory",)),
    Field("sm_clock", ("clocks.sm",)),
    Field("throttle", ("clocks_throttle_reasons.active", "clocks_event_reasons.active")),
    Field("ecc_uncorrected", ("ecc.errors.uncorrected.volatile.total",)),
    Field("retired_pending", ("retired_pages.pending",)),
    Field("mig_current", ("mig.mode.current",)),
    Field("mig_pending", ("mig.mode.pending",)),
)
SENSOR_KEYS = (
    "index", "uuid", "temperature", "power_draw", "power_limit", "util_gpu", "util_memory", "memory_used",
    "sm_clock", "throttle", "ecc_uncorrected", "retired_pending",
)

_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')
# Values that mean "no reading", with or without brackets.
_ABSENT = {"", "n/a", "not supported", "unknown error", "insufficient permissions", "not available"}
# Values that mean the card itself is gone.
_LOST = ("requires reset", "gpu is lost")


@attrs.frozen(kw_only=True)
class SmiReport:
    gpus: tuple[Gpu, ...]
    errors: tuple[str, ...] = ()


async def run_nvidia_smi(args: Sequence[str], *, binary: str = "nvidia-smi", timeout: float = TIMEOUT_S) -> str:
    """The default runner: this machine's nvidia-smi."""
    path = shutil.which(binary)
    if path is None:
        raise SmiMissing(f"{binary} is not on PATH")
    proc = await asyncio.create_subprocess_exec(
        path, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise SmiError(f"nvidia-smi {' '.join(args)} did not answer in {timeout:g} s") from None
    if proc.returncode != 0:
        said = (out + err).decode("utf-8", "replace").strip()
        raise SmiError(f"nvidia-smi {args[0] if args else ''} exited with {proc.returncode}: {said[:500]}")
    return out.decode("utf-8", "replace")


async def _run(runner: Runner, args: Sequence[str]) -> str:
    out = runner(list(args))
    if inspect.isawaitable(out):
        out = await out
    return out


def _value(raw: str) -> str | None:
    v = raw.strip()
    # Bracketed is nvidia-smi's way of saying there is no value: "[N/A]", "[Not Supported]".
    return None if v.startswith("[") or v.lower() in _ABSENT else v


def _is_lost(raw: str) -> bool:
    low = raw.lower()
    return any(word in low for word in _LOST)


async def query(runner: Runner, keys: Sequence[str]) -> tuple[list[dict[str, str | None]], list[str]]:
    """Rows of `--query-gpu` for the fields `keys`, by key, and notes on fields dropped.

    A row also carries "_lost": "yes" when a value said the card is lost.
    """
    fields = {f.key: f for f in FIELDS}
    active = list(keys)
    choice = {k: 0 for k in active}
    notes: list[str] = []
    while True:
        names = [fields[k].names[choice[k]] for k in active]
        args = ["--query-gpu=" + ",".join(names), "--format=csv,noheader,nounits"]
        try:
            out = await _run(runner, args)
            break
        except SmiMissing:
            raise
        except SmiError as e:
            m = _INVALID_FIELD.search(str(e))
            if not m or m.group(1) not in names:
                raise
            key = active[names.index(m.group(1))]
            choice[key] += 1
            if choice[key] < len(fields[key].names):
                continue
            if fields[key].required:
                raise SmiError(f"this nvidia-smi does not know {m.group(1)!r}, which discovery needs") from e
            active.remove(key)
            notes.append(f"nvidia-smi does not know {m.group(1)!r}: left out")
    rows = []
    for line_no, cells in enumerate(csv.reader(out.splitlines(), skipinitialspace=True), 1):
        if not cells or not "".join(cells).strip():
            continue
        if len(cells) != len(active):
            notes.append(f"nvidia-smi line {line_no} has {len(cells)} values, expected {len(active)}: skipped")
            continue
        row: dict[str, str | None] = {k: _value(c) for k, c in zip(active, cells)}
        if any(_is_lost(c) for c in cells):
            row["_lost"] = "yes"
        rows.append(row)
    return rows, notes


# --- nvidia-smi -L --------------------------------------------------------------

_LIST_GPU = re.compile(r"^GPU (\d+):\s*(.*?)\s*\(UUID:\s*([^)\s]+)\)")
# "  MIG 3g.40gb     Device  0: (UUID: MIG-c6d4f1ef-…)". Drivers before R470
# name the instance "MIG-GPU-<card uuid>/<gi>/<ci>": taken as it is.
_LIST_MIG = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s*\(UUID:\s*([^)\s]+)\)")


@attrs.frozen
class ListedMig:
    card: int
    device: int
    profile: str
    uuid: str


def parse_list(text: str) -> dict[int, list[ListedMig]]:
    """`nvidia-smi -L` as each card's MIG instances, in device order; cards without any are absent."""
    out: dict[int, list[ListedMig]] = {}
    card = -1
    for line in text.splitlines():
        if m := _LIST_GPU.match(line):
            card = int(m.group(1))
        elif (m := _LIST_MIG.match(line)) and card >= 0:
            out.setdefault(card, []).append(ListedMig(card, int(m.group(2)), m.group(1), m.group(3)))
    for instances in out.values():
        instances.sort(key=lambda x: x.device)
    return out


# --- putting it together ----------------------------------------------------------


def _num(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def _int(v: str | None) -> int | None:
    n = _num(v)
    return int(n) if n is not None else None


def _bool(v: str | None, yes: str) -> bool | None:
    return None if v is None else v.strip().lower() == yes


def _throttle(v: str | None) -> tuple[str, ...]:
    try:
        return throttle_names(int(v, 16)) if v else ()
    except ValueError:
        return ()


def _sensor_fields(row: dict[str, str | None]) -> dict:
    return {
        "temperature_c": _num(row.get("temperature")),
        "power_draw_w": _num(row.get("power_draw")),
        "power_limit_w": _num(row.get("power_limit")),
        "utilization_gpu_pct": _num(row.get("util_gpu")),
        "utilization_memory_pct": _num(row.get("util_memory")),
        "memory_used_mib": _int(row.get("memory_used")),
        "sm_clock_mhz": _num(row.get("sm_clock")),
        "throttle_reasons": _throttle(row.get("throttle")),
        "ecc_uncorrected_volatile": _int(row.get("ecc_uncorrected")),
        "retired_pages_pending": _bool(row.get("retired_pending"), "yes"),
    }


_LOST_REASON = (FAILED, "nvidia-smi says this GPU is lost or needs a reset: reset it or reboot the node")


def _instances(card_class: str, listed: list[ListedMig], paired: list[Paired]) -> tuple[MigInstance, ...]:
    # -L does not size an instance: its profile does, nominally ("3g.20gb": 20 GB).
    return tuple(
        make_mig_instance(card_class, device=m.device, uuid=m.uuid, profile=m.profile,
                          memory_total_mib=(mig_profile_memory_gb(m.profile) or 0) * 1024,
                          gpu_instance_id=p.gpu_instance_id, compute_instance_id=p.compute_instance_id,
                          placement=p.placement)
        for m, p in zip(listed, paired)
    )


async def _mig_listing(runner: Runner, what: str, errors: list[str]) -> str | None:
    """`nvidia-smi mig -lgi` or `-lci`; None, with a note, when it fails (the instances are still known by -L)."""
    try:
        return await _run(runner, ["mig", what])
    except SmiMissing:
        raise
    except SmiError as e:
        errors.append(f"nvidia-smi mig {what}: {e} (MIG devices are known by UUID and profile, "
                      "without their instance ids)")
        return None


async def _paired(runner: Runner, listed: dict[int, list[ListedMig]], errors: list[str]) -> dict[int, list[Paired]]:
    """Each listed MIG device's GPU and compute instance, by card."""
    if not listed:
        return {}
    gi_text = await _mig_listing(runner, "-lgi", errors)
    ci_text = await _mig_listing(runner, "-lci", errors) if gi_text is not None else None
    if gi_text is None or ci_text is None:
        return {card: [Paired()] * len(devices) for card, devices in listed.items()}
    gis, cis = parse_gpu_instances(gi_text), parse_compute_instances(ci_text)
    out = {}
    for card, devices in listed.items():
        out[card], notes = pair_instances(card, [(m.device, m.profile) for m in devices], gis, cis)
        errors.extend(notes)
    return out


async def read_smi(runner: Runner, hot_c: float = HOT_C) -> SmiReport:
    """Every card nvidia-smi lists, with MIG instances from `-L` and their instance ids from `mig -lgi`/`-lci`.
    `hot_c`: see assess_health.

    Raises SmiMissing when there is no nvidia-smi, SmiError when it fails.
    """
    rows, errors = await query(runner, [f.key for f in FIELDS])
    listed: dict[int, list[ListedMig]] = {}
    list_error = None
    if any(_bool(r.get("mig_current"), "enabled") for r in rows):
        try:
            listed = parse_list(await _run(runner, ["-L"]))
        except SmiError as e:
            list_error = str(e)
            errors.append(f"nvidia-smi -L: {e}")
    paired = await _paired(runner, listed, errors)
    gpus = []
    for row in rows:
        index = _int(row.get("index"))
        if index is None:
            continue
        name = row.get("name") or "unknown"
        total = _int(row.get("memory_total")) or 0
        cls = gpu_class(name, total)
        mig_enabled = _bool(row.get("mig_current"), "enabled")
        gpu = Gpu(
            index=index,
            uuid=row.get("uuid") or "",
            name=name,
            pci_bus_id=normalise_bus_id(row.get("pci_bus_id")),
            memory_total_mib=total,
            gpu_class=cls,
            compute_capability=row.get("compute_cap"),
            driver_version=row.get("driver_version"),
            mig_enabled=mig_enabled,
            mig_pending_enabled=_bool(row.get("mig_pending"), "enabled"),
            mig_instances=_instances(cls, listed.get(index, []), paired.get(index, [])) if mig_enabled else (),
            **_sensor_fields(row),
        )
        extra = [_LOST_REASON] if row.get("_lost") else []
        if mig_enabled and list_error:
            extra.append((DEGRADED, "MIG is enabled but nvidia-smi -L could not list the instances, "
                                    "so none can be given to an engine"))
        gpus.append(with_health(gpu, extra, mig_listed=list_error is None, hot_c=hot_c))
    return SmiReport(gpus=tuple(gpus), errors=tuple(errors))


# --- nvidia-smi --query-compute-apps ------------------------------------------------

APPS_QUERY = ["--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"]
_MIB = 1 << 20


def parse_compute_apps(text: str) -> list[tuple[int, str, int | None]]:
    """`--query-compute-apps=pid,gpu_uuid,used_memory` as (pid, the device's UUID, bytes or None) rows.

    used_memory is in MiB; "[N/A]" (a driver that cannot attribute it) is None, never 0."""
    out = []
    for cells in csv.reader(text.splitlines(), skipinitialspace=True):
        if len(cells) != 3:
            continue  # "No running processes found", or a blank line
        pid, uuid, used = (c.strip() for c in cells)
        if not pid.isdigit():
            continue
        mib = _int(_value(used))
        out.append((int(pid), uuid, mib * _MIB if mib is not None else None))
    return out


async def _processes(runner: Runner, uuids: dict[str, int], notes: list[str]
                     ) -> dict[int, tuple[tuple[int, int | None], ...]] | None:
    """The compute processes on each card, by index; None when nvidia-smi cannot list them.

    A process on a MIG instance may be listed under the instance's UUID: -L says whose card that is."""
    try:
        apps = parse_compute_apps(await _run(runner, APPS_QUERY))
    except SmiMissing:
        raise
    except SmiError as e:
        notes.append(f"nvidia-smi --query-compute-apps: {e} (memory other processes hold is not told apart)")
        return None
    by_uuid = dict(uuids)
    if any(u not in by_uuid and u.startswith("MIG-") for _, u, _ in apps):
        try:
            for card, instances in parse_list(await _run(runner, ["-L"])).items():
                by_uuid.update({m.uuid: card for m in instances})
        except SmiError as e:
            notes.append(f"nvidia-smi -L: {e}")
    out: dict[int, list[tuple[int, int | None]]] = {i: [] for i in uuids.values()}
    for pid, uuid, used in apps:
        card = by_uuid.get(uuid)
        if card is None:
            notes.append(f"nvidia-smi lists process {pid} on {uuid}, which is no card it lists")
            continue
        out[card].append((pid, used))
    return {card: tuple(procs) for card, procs in out.items()}


async def _nvlink_errors(runner: Runner, notes: list[str]) -> dict[int, tuple[tuple[str, int], ...]]:
    """`nvidia-smi nvlink -e`: each card's NVLink error counters by index ({} when it cannot say)."""
    try:
        return parse_smi_nvlink_errors(await _run(runner, ["nvlink", "-e"]))
    except SmiMissing:
        raise
    except SmiError as e:
        notes.append(f"nvidia-smi nvlink -e: {e} (NVLink errors are not read)")
        return {}


async def sample_smi(runner: Runner, hot_c: float = HOT_C) -> tuple[tuple[GpuSensors, ...], tuple[str, ...]]:
    """Each card's fast-changing readings from one nvidia-smi query, with the processes holding its memory."""
    rows, notes = await query(runner, SENSOR_KEYS)
    cards = [(index, row) for row in rows if (index := _int(row.get("index"))) is not None]
    procs = await _processes(runner, {row.get("uuid") or "": index for index, row in cards if row.get("uuid")},
                             notes) if cards else None
    nvlink = await _nvlink_errors(runner, notes) if cards else {}
    out = []
    for index, row in cards:
        s = GpuSensors(index=index, uuid=row.get("uuid") or "", **_sensor_fields(row),
                       processes=procs.get(index) if procs is not None else None,
                       nvlink_errors=nvlink.get(index, ()))
        out.append(sensors_with_health(s, [_LOST_REASON] if row.get("_lost") else [], hot_c=hot_c))
    return tuple(out), tuple(notes)
