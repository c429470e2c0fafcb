"""Fakes of pynvml and nvidia-smi, fed from the recordings in data/.

The NVML fixtures (data/nvml_*.json) hold, per device, what each pynvml
function returned, under the function's name. A value {"error": "NOT_SUPPORTED"}
makes the call raise that NVML error instead. "missing" lists names this
pynvml (or driver) does not have; "init_error" makes nvmlInit fail. Each
link under "nvlinks" has its state and far end and, under "errors", its
NVLink error counters by nvmlNvLinkErrorCounter_t number (0 replay,
1 recovery, 2 CRC flit, 3 CRC data); those of nvml_h100x8.json were written
by hand (a few errors on cards 0 and 4), not recorded.

The nvidia-smi fixtures (data/smi_*.csv) are `--query-gpu` output with a
"# fields:" line saying which fields were recorded; the fake answers any
query for a subset of them, in the order asked, and refuses a field it does
not have the way nvidia-smi does. Beside them: `-L` (*.L.txt), `nvidia-smi mig
-lgi` and `-lci` (*.lgi.txt, *.lci.txt) and `--query-compute-apps` output
(*.apps.csv) and `nvidia-smi nvlink -e` (*.nvlink.txt; none given: no card
has NVLink); lines starting "#" are the fixture's notes, not output.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any, Callable

import pytest

from llmgw.agent.discovery.nvidia_smi import SmiError, SmiMissing

DATA = os.path.join(os.path.dirname(__file__), "data")

# nvmlReturn_t values, as pynvml names them.
NVML_CODES = {
    "UNINITIALIZED": 1, "INVALID_ARGUMENT": 2, "NOT_SUPPORTED": 3, "NO_PERMISSION": 4, "NOT_FOUND": 6,
    "DRIVER_NOT_LOADED": 9, "LIBRARY_NOT_FOUND": 12, "FUNCTION_NOT_FOUND": 13, "GPU_IS_LOST": 15,
    "UNKNOWN": 999,
}
_MESSAGES = {
    3: "Not Supported", 6: "Not Found", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found",
    15: "GPU is lost", 2: "Invalid Argument", 4: "Insufficient Permissions", 999: "Unknown Error",
}


class NVMLError(Exception):
    """pynvml's base error: `value` is the nvmlReturn_t code."""

    def __init__(self, value: int):
        super().__init__(_MESSAGES.get(value, f"NVML error {value}"))
        self.value = value


def _error_class(name: str, code: int) -> type[NVMLError]:
    def init(self: NVMLError) -> None:
        NVMLError.__init__(self, code)

    return type(f"NVMLError_{name}", (NVMLError,), {"__init__": init})


NVMLError_NotSupported = _error_class("NotSupported", 3)
NVMLError_NotFound = _error_class("NotFound", 6)
NVMLError_LibraryNotFound = _error_class("LibraryNotFound", 12)
NVMLError_DriverNotLoaded = _error_class("DriverNotLoaded", 9)
NVMLError_GpuIsLost = _error_class("GpuIsLost", 15)
NVMLError_InvalidArgument = _error_class("InvalidArgument", 2)
_BY_CODE = {c().value: c for c in (NVMLError_NotSupported, NVMLError_NotFound, NVMLError_LibraryNotFound,
                                   NVMLError_DriverNotLoaded, NVMLError_GpuIsLost, NVMLError_InvalidArgument)}


def nvml_error(code: int) -> NVMLError:
    cls = _BY_CODE.get(code)
    return cls() if cls else NVMLError(code)


def _struct(value: Any) -> Any:
    """Dicts become objects with attributes, as pynvml's ctypes structures are; busId is bytes."""
    if isinstance(value, dict):
        return SimpleNamespace(**{k: (v.encode() if k == "busId" else v) for k, v in value.items()})
    return value


class FakeNvml:
    """A pynvml-shaped object answering from a recording. `calls` logs what was asked."""

    # Constants, with pynvml's values.
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_NVLINK_DEVICE_TYPE_GPU = 0
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
    NVML_NVLINK_ERROR_DL_REPLAY = 0
    NVML_NVLINK_ERROR_DL_RECOVERY = 1
    NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
    NVML_NVLINK_ERROR_DL_CRC_DATA = 3
    nvmlMemory_v2 = 0x2000028
    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_GpuIsLost = NVMLError_GpuIsLost

    # Per-device calls answered straight from the recording.
    _RECORDED = (
        "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo", "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetMigMode",
        "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetAttributes",
    )

    def __init__(self, recording: dict[str, Any]):
        # What this pynvml or driver lacks reads as absent, as getattr finds it.
        self.missing = frozenset(recording.get("missing", ()))
        self.rec = recording
        self.calls: list[str] = []
        self.initialised = 0
        for name in self._RECORDED:
            setattr(self, name, self._recorded(name))

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    # -- lifecycle ---------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        err = self.rec.get("init_error")
        if err:
            raise nvml_error(NVML_CODES[err])
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")
        self.initialised -= 1

    def _check(self) -> None:
        if self.initialised <= 0:
            raise nvml_error(NVML_CODES["UNINITIALIZED"])

    # -- system and handles ------------------------------------------------------
    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self.rec["driver_version"]

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.rec["devices"])

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict[str, Any]:
        self._check()
        dev = self.rec["devices"][i]
        if dev.get("handle_error"):
            raise nvml_error(NVML_CODES[dev["handle_error"]])
        return dev

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: dict, i: int) -> dict[str, Any]:
        self._answer(h, "nvmlDeviceGetMigDeviceHandleByIndex", {})
        if i >= h.get("nvmlDeviceGetMaxMigDeviceCount", 0):
            raise nvml_error(NVML_CODES["INVALID_ARGUMENT"])
        mig = h.get("mig_devices", {}).get(str(i))
        if mig is None:
            raise nvml_error(NVML_CODES["NOT_FOUND"])
        return mig

    # -- readings ------------------------------------------------------------------
    def _answer(self, h: dict, name: str, default: Any = None) -> Any:
        self._check()
        self.calls.append(name)
        if h.get("lost"):
            raise nvml_error(NVML_CODES["GPU_IS_LOST"])
        value = h.get(name, default if default is not None else {"error": "NOT_SUPPORTED"})
        if isinstance(value, dict) and "error" in value:
            raise nvml_error(NVML_CODES[value["error"]])
        return value

    def _recorded(self, name: str) -> Callable[..., Any]:
        def call(h: dict) -> Any:
            return _struct(self._answer(h, name))

        call.__name__ = name
        return call

    def nvmlDeviceGetMemoryInfo(self, h: dict, version: int | None = None) -> Any:
        value = dict(self._answer(h, "nvmlDeviceGetMemoryInfo"))
        if not version:
            # Version 1 counts the driver's reserve as used.
            value["used"] = value["used"] + value.pop("reserved", 0)
        return _struct(value)

    def nvmlDeviceGetTemperature(self, h: dict, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._answer(h, "nvmlDeviceGetTemperature")

    def nvmlDeviceGetClockInfo(self, h: dict, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return self._answer(h, "nvmlDeviceGetClockInfo")

    def nvmlDeviceGetTotalEccErrors(self, h: dict, error_type: int, counter: int) -> int:
        assert (error_type, counter) == (self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, self.NVML_VOLATILE_ECC)
        return self._answer(h, "nvmlDeviceGetTotalEccErrors")

    def _link(self, h: dict, link: int, name: str) -> dict[str, Any]:
        # The recording keeps each link's state and far end together, under "nvlinks".
        self.calls.append(name)
        links = self._answer(h, "nvlinks")
        if link >= self.NVML_NVLINK_MAX_LINKS:
            raise nvml_error(NVML_CODES["INVALID_ARGUMENT"])
        if link >= len(links):
            return {"state": 0}
        return links[link]

    def nvmlDeviceGetNvLinkState(self, h: dict, link: int) -> int:
        return self._link(h, link, "nvmlDeviceGetNvLinkState")["state"]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: dict, link: int) -> Any:
        return _struct({"busId": self._link(h, link, "nvmlDeviceGetNvLinkRemotePciInfo")["remote_bus_id"]})

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: dict, link: int) -> int:
        return self._link(h, link, "nvmlDeviceGetNvLinkRemoteDeviceType")["remote_type"]

    def nvmlDeviceGetNvLinkErrorCounter(self, h: dict, link: int, counter: int) -> int:
        value = self._link(h, link, "nvmlDeviceGetNvLinkErrorCounter").get("errors", {}).get(str(counter))
        if value is None or isinstance(value, dict):
            raise nvml_error(NVML_CODES[(value or {}).get("error", "NOT_SUPPORTED")])
        return value


def load_recording(name: str) -> dict[str, Any]:
    with open(os.path.join(DATA, name)) as f:
        return json.load(f)


def _output(text: str | None) -> str | None:
    """A fixture's text without its "#" notes."""
    if text is None:
        return None
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))


class FakeSmi:
    """nvidia-smi answering from recordings: `query` for --query-gpu, `listing` for -L, `lgi`/`lci` for
    `mig -lgi`/`-lci` (failing as a driver does when they are None), `apps` for --query-compute-apps
    (none running when None)."""

    def __init__(self, query: str | None, listing: str | None = None, *, fail: str | None = None,
                 lgi: str | None = None, lci: str | None = None, apps: str | None = None,
                 nvlink: str | None = None):
        self.fields: list[str] = []
        self.nvlink = _output(nvlink) or ""
        self.rows: list[list[str]] = []
        self.listing = _output(listing)
        self.mig = {"-lgi": _output(lgi), "-lci": _output(lci)}
        self.apps = _output(apps) or ""
        self.fail = fail
        self.calls: list[list[str]] = []
        for line in (query or "").splitlines():
            if line.startswith("# fields:"):
                self.fields = line.split(":", 1)[1].strip().split(",")
            elif line.strip() and not line.startswith("#"):
                self.rows.append([c.strip() for c in line.split(",")])

    def __call__(self, args: list[str]) -> str:
        self.calls.append(args)
        if self.fail:
            raise SmiError(self.fail)
        if args == ["-L"]:
            if self.listing is None:
                raise SmiError("nvidia-smi -L exited with 255: Unknown Error")
            return self.listing
        if args[:1] == ["mig"]:
            out = self.mig.get(args[1])
            if out is None:
                raise SmiError(f"nvidia-smi mig exited with 4: Failed to display {args[1]}: Insufficient Permissions")
            return out
        if args[:1] == ["nvlink"]:
            assert args == ["nvlink", "-e"]
            return self.nvlink
        if args[0].startswith("--query-compute-apps="):
            assert args == ["--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"]
            return self.apps
        (q,) = [a for a in args if a.startswith("--query-gpu=")]
        assert "--format=csv,noheader,nounits" in args
        wanted = q.split("=", 1)[1].split(",")
        for w in wanted:
            if w not in self.fields:
                raise SmiError(f'nvidia-smi --query-gpu exited with 2: Field "{w}" is not a valid field to query.')
        cols = [self.fields.index(w) for w in wanted]
        return "".join(", ".join(row[c] for c in cols) + "\n" for row in self.rows)


def _no_smi(args: list[str]) -> str:
    raise SmiMissing("nvidia-smi is not on PATH")


# Fixtures, so tests need not import this module (conftest is no importable name).


@pytest.fixture
def data_dir() -> str:
    return DATA


@pytest.fixture
def recording() -> Callable[[str], dict[str, Any]]:
    """recording("nvml_h100x8.json"): an NVML recording as a dict, to use or alter."""
    return load_recording


@pytest.fixture
def fake_nvml() -> Callable[[str | dict[str, Any]], FakeNvml]:
    """fake_nvml("nvml_h100x8.json") or fake_nvml(recording_dict): a pynvml stand-in."""
    return lambda rec: FakeNvml(load_recording(rec) if isinstance(rec, str) else rec)


@pytest.fixture
def fake_smi() -> Callable[..., FakeSmi]:
    """fake_smi("smi_h100x8.csv", listing="smi_a100x2_mig.L.txt", text=None, lgi=…, lci=…, apps=…): an
    nvidia-smi stand-in; each of listing, lgi, lci and apps names a file in data/."""

    def read(name: str | None) -> str | None:
        if not name:
            return None
        with open(os.path.join(DATA, name)) as f:
            return f.read()

    def make(name: str | None = None, listing: str | None = None, *, text: str | None = None,
             fail: str | None = None, lgi: str | None = None, lci: str | None = None,
             apps: str | None = None, nvlink: str | None = None) -> FakeSmi:
        return FakeSmi(read(name) if name else text, read(listing), fail=fail, lgi=read(lgi), lci=read(lci),
                       apps=read(apps), nvlink=read(nvlink))

    return make


@pytest.fixture
def no_smi() -> Callable[[list[str]], str]:
    """A runner for a node without nvidia-smi."""
    return _no_smi


@pytest.fixture
def no_nvml() -> FakeNvml:
    """NVML on a node without the library."""
    return FakeNvml(load_recording("nvml_library_missing.json"))
