"""Discovery through NVML, from recordings fed to a pynvml stand-in."""

from __future__ import annotations

import pytest

from llmgw.agent.discovery.fabric import nvlink_topology
from llmgw.agent.discovery.gpus import DEGRADED, FAILED, OK
from llmgw.agent.discovery.nvml import NvmlUnavailable, load_pynvml, read_nvml, sample_nvml


def test_an_hgx_h100_node_on_nvswitches(fake_nvml) -> None:
    nvml = fake_nvml("nvml_h100x8.json")
    report = read_nvml(nvml)
    assert report.driver_version == "550.90.07"
    assert [g.gpu_class for g in report.gpus] == ["h100-80gb"] * 8
    g0 = report.gpus[0]
    assert g0.pci_bus_id == "0000:18:00.0" and g0.uuid.startswith("GPU-")
    assert g0.compute_capability == "9.0" and g0.driver_version == "550.90.07"
    # Memory v2: the driver's reserve is not counted as used.
    assert (g0.memory_total_mib, g0.memory_used_mib) == (81559, 1)
    assert (g0.temperature_c, g0.power_draw_w, g0.power_limit_w) == (29.0, 69.0, 700.0)
    assert g0.throttle_reasons == () and g0.retired_pages_pending is None
    assert g0.row_remap_pending is False and g0.mig_enabled is False
    assert g0.health == OK
    # Card 3: hot, and the hardware slowing it down.
    g3 = report.gpus[3]
    assert g3.throttle_reasons == ("hw_thermal",) and g3.health == DEGRADED
    # Card 5: a row waiting to be remapped at the next reset.
    g5 = report.gpus[5]
    assert g5.row_remap_pending is True and g5.health == DEGRADED and "reset" in g5.health_reasons[0]
    # Every link goes to an NVSwitch.
    links = nvlink_topology(report.gpus, report.nvlinks)
    assert [(n.gpu_index, n.active_links, n.switch_links, n.peers) for n in links] == [(i, 18, 18, ()) for i in range(8)]
    assert report.errors == ()
    assert nvml.calls[0] == "nvmlInit" and nvml.calls[-1] == "nvmlShutdown"


def test_mig_instances_from_nvml(fake_nvml) -> None:
    report = read_nvml(fake_nvml("nvml_a100x2_mig.json"))
    card0, card1 = report.gpus
    assert card0.gpu_class == "a100-80gb" and card0.mig_enabled is True
    assert [(m.device, m.profile, m.gpu_class, m.memory_total_mib, m.memory_used_mib,
             m.gpu_instance_id, m.compute_instance_id) for m in card0.mig_instances] == [
        (0, "3g.40gb", "a100-80gb-mig-3g.40gb", 40192, 21000, 1, 0),
        (1, "2g.20gb", "a100-80gb-mig-2g.20gb", 19968, 13, 5, 0),
        # This driver did not name the instance: its slices and memory did.
        (4, "1g.10gb", "a100-80gb-mig-1g.10gb", 9728, 6, 13, 0),
    ]
    assert [card0.mig_placement_index(m) for m in card0.mig_instances] == [1000, 1001, 1004]
    assert all(m.uuid.startswith("MIG-") for m in card0.mig_instances)
    assert card0.utilization_gpu_pct is None  # not measured in MIG mode
    assert card0.health == OK
    # Card 1 is in MIG mode with nothing carved from it: nothing can run there.
    assert card1.mig_instances == () and card1.health == DEGRADED
    assert "no instances" in card1.health_reasons[0]
    # An NVLink bridge joins the two cards directly.
    links = nvlink_topology(report.gpus, report.nvlinks)
    assert [(n.gpu_index, n.active_links, n.peers, n.switch_links) for n in links] == [(0, 12, (1,), 0), (1, 12, (0,), 0)]


def test_an_old_driver_and_pynvml_with_unsupported_fields(fake_nvml) -> None:
    nvml = fake_nvml("nvml_t4x2_old.json")
    report = read_nvml(nvml)
    t0, t1 = report.gpus
    assert t0.gpu_class == t1.gpu_class == "t4-16gb"
    assert t0.compute_capability == "7.5"
    # Not supported is absent, quietly: no error, no crash.
    assert t0.power_draw_w is None and t1.power_draw_w == 27.02
    assert t0.mig_enabled is None and t0.row_remap_pending is None
    assert report.nvlinks == {} and report.errors == ()
    # The older throttle reasons call stands in for clock event reasons.
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in nvml.calls
    assert t0.retired_pages_pending is False and t0.health == OK
    assert t1.retired_pages_pending is True and t1.health == DEGRADED


def test_without_the_library_nvml_is_quietly_unavailable(no_nvml) -> None:
    with pytest.raises(NvmlUnavailable) as e:
        read_nvml(no_nvml)
    assert e.value.quiet
    with pytest.raises(NvmlUnavailable) as e:
        read_nvml(None)  # pynvml not installed at all
    assert e.value.quiet


def test_a_driver_that_is_not_loaded_is_worth_saying(fake_nvml) -> None:
    with pytest.raises(NvmlUnavailable, match="not loaded") as e:
        read_nvml(fake_nvml({"init_error": "DRIVER_NOT_LOADED"}))
    assert not e.value.quiet


def test_a_lost_card_fails_and_the_others_are_still_read(fake_nvml, recording) -> None:
    rec = recording("nvml_h100x8.json")
    rec["devices"][2]["lost"] = True
    rec["devices"][4]["handle_error"] = "NO_PERMISSION"
    report = read_nvml(fake_nvml(rec))
    assert len(report.gpus) == 8
    assert report.gpus[2].health == FAILED and "lost" in report.gpus[2].health_reasons[0]
    assert report.gpus[4].health == FAILED and "cannot open" in report.gpus[4].health_reasons[0]
    assert report.gpus[3].health == DEGRADED and report.gpus[0].health == OK


def test_an_unexpected_error_on_one_reading_is_kept_and_the_rest_read(fake_nvml, recording) -> None:
    rec = recording("nvml_h100x8.json")
    rec["devices"][1]["nvmlDeviceGetTemperature"] = {"error": "UNKNOWN"}
    report = read_nvml(fake_nvml(rec))
    assert report.gpus[1].temperature_c is None and report.gpus[1].power_draw_w is not None
    assert report.errors == ("GPU 1: temperature: Unknown Error",)


def test_sensors_from_nvml(fake_nvml) -> None:
    nvml = fake_nvml("nvml_h100x8.json")
    sensors, errors = sample_nvml(nvml)
    assert errors == ()
    assert [s.index for s in sensors] == list(range(8))
    assert sensors[3].throttle_reasons == ("hw_thermal",) and sensors[3].health == DEGRADED
    assert sensors[0].power_draw_w == 69.0 and sensors[0].health == OK
    # NVLink errors summed over each card's 18 links, flit and data CRC together; the other cards have none.
    assert sensors[0].nvlink_errors == (("crc", 7), ("replay", 1), ("recovery", 0))
    assert sensors[4].nvlink_errors == (("crc", 40), ("replay", 12), ("recovery", 3))
    assert sensors[1].nvlink_errors == (("crc", 0), ("replay", 0), ("recovery", 0))
    # Only the fast-changing fields: no MIG, no NVLink topology (its links' state and error counters only),
    # no names.
    assert not {c for c in nvml.calls if "Mig" in c or "NvLinkRemote" in c or c == "nvmlDeviceGetName"}
    assert nvml.calls[-1] == "nvmlShutdown"


def test_a_card_without_nvlink_has_no_nvlink_error_counters(fake_nvml) -> None:
    sensors, errors = sample_nvml(fake_nvml("nvml_t4x2_old.json"))
    assert errors == () and len(sensors) == 2
    assert all(s.nvlink_errors == () for s in sensors)


def test_an_nvlink_counter_the_driver_does_not_keep_is_left_out(fake_nvml, recording) -> None:
    rec = recording("nvml_h100x8.json")
    for link in rec["devices"][0]["nvlinks"]:
        link["errors"]["3"] = {"error": "NOT_SUPPORTED"}  # no data CRC counter on this driver
        link["errors"]["1"] = {"error": "NOT_SUPPORTED"}
    sensors, errors = sample_nvml(fake_nvml(rec))
    assert errors == ()
    assert sensors[0].nvlink_errors == (("crc", 5), ("replay", 1))


def test_the_real_pynvml_loads_without_warnings(recwarn) -> None:
    module = load_pynvml()
    assert module is not None and hasattr(module, "nvmlInit")
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]
