"""A node's own heat and CPU power: hwmon temperatures and RAPL energy counters, from sysfs.

What lm_sensors reads, without it installed: the CPU package temperature (coretemp's "Package id N",
k10temp's Tctl/Tdie, else the chip's hottest sensor) and the board's inlet or ambient sensor where it
has one (a label SYSTIN, Inlet or Ambient). CPU power comes from RAPL: each package's energy counter
read twice, its wrap at max_energy_range_uj handled, subdomains (core, uncore, dram) not counted twice.

A machine without a sensor gives None for it, never 0; a VM usually has none of them.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

CPU_CHIPS = frozenset({"coretemp", "k10temp", "zenpower", "cpu_thermal"})
_PACKAGE = re.compile(r"^(package id \d+|tctl|tdie)$", re.IGNORECASE)
_INLET = re.compile(r"systin|inlet|ambient", re.IGNORECASE)
_PACKAGE_DOMAIN = re.compile(r"^intel-rapl:\d+$")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _temps(chip_dir: str) -> list[tuple[str, float]]:
    """(label, °C) of each tempN_input of one hwmon chip."""
    out = []
    try:
        names = sorted(os.listdir(chip_dir))
    except OSError:
        return out
    for name in names:
        m = re.fullmatch(r"temp(\d+)_input", name)
        if not m:
            continue
        raw = _read(os.path.join(chip_dir, name))
        try:
            value = int(raw) / 1000.0 if raw is not None else None
        except ValueError:
            value = None
        if value is None:
            continue
        label = _read(os.path.join(chip_dir, f"temp{m.group(1)}_label")) or f"temp{m.group(1)}"
        out.append((label, value))
    return out


def read_temperatures(sys: str = "/sys") -> tuple[float | None, float | None]:
    """(the CPU temperature, the inlet temperature) in °C, each None where the machine has no such sensor."""
    root = os.path.join(sys, "class/hwmon")
    try:
        chips = sorted(os.listdir(root))
    except OSError:
        return None, None
    packages: list[float] = []
    hottest: list[float] = []
    inlet: list[float] = []
    for chip in chips:
        path = os.path.join(root, chip)
        name = _read(os.path.join(path, "name")) or ""
        temps = _temps(path)
        if name in CPU_CHIPS:
            packages += [v for label, v in temps if _PACKAGE.match(label)]
            hottest += [v for _, v in temps]
        inlet += [v for label, v in temps if _INLET.search(label)]
    cpu = max(packages) if packages else (max(hottest) if hottest else None)
    return cpu, (max(inlet) if inlet else None)


class RaplMeter:
    """The CPU packages' power between two readings, from /sys/class/powercap/intel-rapl:N/energy_uj."""

    def __init__(self, sys: str = "/sys", clock: Callable[[], float] = time.monotonic) -> None:
        self.root = os.path.join(sys, "class/powercap")
        self.clock = clock
        self._last: tuple[float, dict[str, int]] | None = None

    def _energies(self) -> dict[str, tuple[int, int]]:
        """Each package domain's (energy µJ, the counter's range µJ)."""
        out = {}
        try:
            names = sorted(os.listdir(self.root))
        except OSError:
            return out
        for name in names:
            if not _PACKAGE_DOMAIN.match(name):
                continue  # intel-rapl:0:0 and the like are parts of a package, already in its count
            energy = _read(os.path.join(self.root, name, "energy_uj"))
            span = _read(os.path.join(self.root, name, "max_energy_range_uj"))
            try:
                out[name] = (int(energy), int(span) if span else 0)
            except (TypeError, ValueError):
                continue
        return out

    def watts(self) -> float | None:
        """The packages' mean power since the last call; None at the first call or without RAPL."""
        now = self.clock()
        found = self._energies()
        last, self._last = self._last, (now, {k: e for k, (e, _) in found.items()})
        if not found or last is None or now <= last[0]:
            return None
        then, before = last
        used = 0
        for name, (energy, span) in found.items():
            if name not in before:
                return None  # a package appeared: nothing to compare with yet
            delta = energy - before[name]
            if delta < 0:  # the counter wrapped
                delta += span
            used += max(0, delta)
        return round(used / 1e6 / (now - then), 1)


class HostSensors:
    """What the heartbeat carries of the host's heat and power: cpu_temperature_c, inlet_temperature_c,
    cpu_power_w."""

    def __init__(self, sys: str = "/sys", clock: Callable[[], float] = time.monotonic) -> None:
        self.sys = sys
        self.rapl = RaplMeter(sys, clock)

    def __call__(self) -> dict[str, float | None]:
        cpu, inlet = read_temperatures(self.sys)
        return {"cpu_temperature_c": cpu, "inlet_temperature_c": inlet, "cpu_power_w": self.rapl.watts()}


__all__ = ["HostSensors", "RaplMeter", "read_temperatures"]
