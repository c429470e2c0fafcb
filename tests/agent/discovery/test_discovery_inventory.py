"""The whole inventory: which source answers, and what goes on the wire."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import attrs
import pytest

from llmgw.agent.discovery import Inventory, discover, sample_sensors
from llmgw.agent.discovery.__main__ import render


async def test_nvml_is_used_where_it_works(fake_nvml, fake_smi, tmp_path) -> None:
    smi = fake_smi("smi_h100x8.csv")
    inv = await discover({"state": str(tmp_path)}, nvml=fake_nvml("nvml_h100x8.json"), smi_runner=smi)
    assert inv.gpu_source == "nvml" and inv.driver_version == "550.90.07"
    assert len(inv.gpus) == 8 and smi.calls == []  # nvidia-smi not asked
    assert inv.fabric.nvswitch and len(inv.fabric.nvlink) == 8
    assert [d.role for d in inv.disks] == ["state"]
    assert inv.errors == ()


async def test_nvidia_smi_is_the_fallback_when_nvml_is_missing(no_nvml, fake_smi, tmp_path) -> None:
    inv = await discover({"state": str(tmp_path)}, nvml=no_nvml,
                         smi_runner=fake_smi("smi_a100x2_mig.csv", "smi_a100x2_mig.L.txt",
                                             lgi="smi_a100x2_mig.lgi.txt", lci="smi_a100x2_mig.lci.txt"))
    assert inv.gpu_source == "nvidia-smi" and inv.driver_version == "535.129.03"
    assert [g.gpu_class for g in inv.gpus] == ["a100-40gb", "a100-40gb"]
    assert len(inv.gpus[0].mig_instances) == 3
    assert "NVML: the NVML library" in inv.gpu_source_detail
    # A missing library on the way to nvidia-smi is not an error.
    assert inv.errors == ()
    assert inv.fabric.nvlink == ()


async def test_neither_is_none_and_no_error(no_nvml, no_smi, tmp_path) -> None:
    inv = await discover({"state": str(tmp_path)}, nvml=no_nvml, smi_runner=no_smi)
    assert inv.gpu_source == "none" and inv.gpus == () and inv.errors == ()
    assert "not on PATH" in inv.gpu_source_detail


async def test_a_broken_driver_is_reported(fake_nvml, fake_smi, tmp_path) -> None:
    inv = await discover({"state": str(tmp_path)}, nvml=fake_nvml({"init_error": "DRIVER_NOT_LOADED"}),
                         smi_runner=fake_smi(fail="NVIDIA-SMI has failed because it couldn't communicate with the "
                                                  "NVIDIA driver."))
    assert inv.gpu_source == "none"
    assert len(inv.errors) == 2 and "not loaded" in inv.errors[0] and "couldn't communicate" in inv.errors[1]


async def test_a_source_can_be_chosen(fake_nvml, fake_smi, tmp_path) -> None:
    inv = await discover({"state": str(tmp_path)}, nvml=fake_nvml("nvml_h100x8.json"),
                         smi_runner=fake_smi("smi_h100x8.csv"), source="nvidia-smi")
    assert inv.gpu_source == "nvidia-smi" and len(inv.gpus) == 8
    # Both sources describe the same node alike.
    by_nvml = await discover({"state": str(tmp_path)}, nvml=fake_nvml("nvml_h100x8.json"), source="nvml")
    assert [(g.uuid, g.pci_bus_id, g.gpu_class) for g in inv.gpus] == \
        [(g.uuid, g.pci_bus_id, g.gpu_class) for g in by_nvml.gpus]
    with pytest.raises(ValueError, match="source"):
        await discover(source="cuda")


async def test_nvml_runs_off_the_event_loop(fake_nvml, tmp_path) -> None:
    nvml = fake_nvml("nvml_t4x2_old.json")
    seen = []
    original = nvml.nvmlInit

    def init() -> None:
        seen.append(threading.current_thread())
        original()

    nvml.nvmlInit = init
    await discover({"state": str(tmp_path)}, nvml=nvml)
    await sample_sensors(nvml=nvml)
    assert len(seen) == 2 and threading.main_thread() not in seen


async def test_this_machine_reports_no_gpus_without_error() -> None:
    # No GPU, no driver here: the real pynvml and the real nvidia-smi are asked.
    inv = await discover()
    assert inv.gpu_source == "none" and inv.gpus == ()
    assert inv.errors == ()
    assert inv.cpu is not None and inv.cpu.logical_cores >= 1
    assert inv.memory is not None and inv.memory.total_bytes > 0
    assert [d.role for d in inv.disks] == ["state", "weights"] and all(d.total_bytes for d in inv.disks)
    assert inv.hostname
    sensors = await sample_sensors()
    assert sensors.gpu_source == "none" and sensors.gpus == () and sensors.errors == ()
    assert sensors.memory_available_bytes and sensors.load_average is not None


async def test_the_inventory_is_plain_data_for_the_wire(fake_nvml, fake_smi, tmp_path) -> None:
    for inv in (
        await discover({"state": str(tmp_path)}, nvml=fake_nvml("nvml_a100x2_mig.json")),
        await discover({"state": str(tmp_path)}, source="nvidia-smi", smi_runner=fake_smi("smi_l40s_mixed.csv")),
    ):
        # attrs.asdict gives dicts (tuples stay tuples, which JSON and msgpack take as arrays) ...
        assert json.loads(json.dumps(attrs.asdict(inv))) == json.loads(json.dumps(inv.to_dict()))
        # ... and to_dict() the same with lists, equal to itself after a JSON round trip.
        doc = inv.to_dict()
        assert json.loads(json.dumps(doc)) == doc
        assert isinstance(doc["gpus"][0], dict) and isinstance(doc["gpus"][0]["health_reasons"], list)
        assert set(doc) == {f.name for f in attrs.fields(Inventory)}
    assert doc["gpus"][2]["health"] == "failed"
    mig = (await discover({"state": str(tmp_path)}, nvml=fake_nvml("nvml_a100x2_mig.json"))).to_dict()
    assert mig["gpus"][0]["mig_instances"][0]["gpu_class"] == "a100-80gb-mig-3g.40gb"


async def test_sensors_come_from_the_same_sources(fake_nvml, no_nvml, fake_smi, data_dir) -> None:
    proc = os.path.join(data_dir, "proc_xeon")
    s = await sample_sensors(nvml=fake_nvml("nvml_h100x8.json"), proc=proc, cgroup_root=proc)
    assert s.gpu_source == "nvml" and len(s.gpus) == 8
    assert s.load_average == (12.51, 10.02, 8.77) and s.memory_available_bytes == 2011554320 * 1024
    s = await sample_sensors(nvml=no_nvml, smi_runner=fake_smi("smi_rtx4090.csv"), proc=proc, cgroup_root=proc)
    assert s.gpu_source == "nvidia-smi" and s.gpus[0].temperature_c == 41.0 and s.errors == ()


async def test_the_printed_inventory_reads_well(fake_nvml, fake_smi, tmp_path) -> None:
    text = render(await discover({"state": str(tmp_path)}, nvml=fake_nvml("nvml_a100x2_mig.json")))
    assert "gpus       2 from nvml, driver 535.129.03" in text
    assert "mig 0/mig0 (device 1000) a100-80gb-mig-3g.40gb" in text
    assert "health DEGRADED" in text and "no instances" in text
    assert "classes    1 × a100-80gb-mig-1g.10gb, 1 × a100-80gb-mig-2g.20gb, 1 × a100-80gb-mig-3g.40gb" in text
    assert "nvlink     direct links between GPUs\n  [0] 12 active links: to GPU 1\n  [1] 12 active links: to GPU 0" in text
    text = render(await discover({"state": str(tmp_path)}, source="nvidia-smi", smi_runner=fake_smi("smi_l40s_mixed.csv")))
    assert "[1] l40s-48gb" in text and "memory -/46068 MiB" in text  # no reading is "-", never 0


def test_the_module_runs_on_this_machine() -> None:
    env = {**os.environ, "PYTHONWARNINGS": "error::FutureWarning"}
    out = subprocess.run([sys.executable, "-m", "llmgw.agent.discovery", "--json", "--sensors"],
                         capture_output=True, text=True, check=True, env=env, timeout=60)
    doc = json.loads(out.stdout)
    assert doc["inventory"]["gpu_source"] == "none" and doc["inventory"]["errors"] == []
    assert doc["sensors"]["gpus"] == []
    out = subprocess.run([sys.executable, "-m", "llmgw.agent.discovery"], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.startswith("node ") and "gpus       0 from none" in out.stdout and out.stderr == ""
