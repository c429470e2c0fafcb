"""Discovery through nvidia-smi, from recorded outputs."""

from __future__ import annotations

import os

import pytest

from llmgw.agent.discovery.gpus import DEGRADED, FAILED, OK
from llmgw.agent.discovery.nvidia_smi import SmiError, SmiMissing, parse_list, read_smi, sample_smi


async def test_an_hgx_h100_node(fake_smi) -> None:
    smi = fake_smi("smi_h100x8.csv")
    report = await read_smi(smi)
    assert [g.index for g in report.gpus] == list(range(8))
    assert {g.gpu_class for g in report.gpus} == {"h100-80gb"}
    g0 = report.gpus[0]
    assert g0.name == "NVIDIA H100 80GB HBM3"
    assert g0.pci_bus_id == "0000:18:00.0"
    assert (g0.memory_total_mib, g0.memory_used_mib) == (81559, 76381)
    assert (g0.compute_capability, g0.driver_version) == ("9.0", "550.90.07")
    assert (g0.power_draw_w, g0.power_limit_w, g0.utilization_gpu_pct) == (699.12, 700.0, 100.0)
    # At its power cap under load: that is the card working, not failing.
    assert g0.throttle_reasons == ("sw_power_cap",) and g0.health == OK
    assert g0.ecc_uncorrected_volatile == 0 and g0.retired_pages_pending is None
    assert g0.mig_enabled is False and g0.mig_instances == ()
    # Card 6 is hot and slowed down by it.
    g6 = report.gpus[6]
    assert g6.throttle_reasons == ("sw_thermal", "hw_thermal")
    assert g6.health == DEGRADED
    assert any("hw_thermal" in r for r in g6.health_reasons) and any("89 °C" in r for r in g6.health_reasons)
    assert [g.health for g in report.gpus].count(OK) == 7
    # MIG is off everywhere, so -L is not asked.
    assert all(not a[0] == "-L" for a in smi.calls)
    assert report.errors == ()


async def test_an_a100_node_with_one_card_in_mig_mode(fake_smi) -> None:
    report = await read_smi(fake_smi("smi_a100x2_mig.csv", "smi_a100x2_mig.L.txt"))
    card0, card1 = report.gpus
    assert card0.gpu_class == card1.gpu_class == "a100-40gb"
    assert card0.mig_enabled is True and card0.mig_pending_enabled is True
    assert [(m.device, m.profile, m.gpu_class) for m in card0.mig_instances] == [
        (0, "3g.20gb", "a100-40gb-mig-3g.20gb"),
        (1, "2g.10gb", "a100-40gb-mig-2g.10gb"),
        (2, "1g.5gb", "a100-40gb-mig-1g.5gb"),
    ]
    assert all(m.uuid.startswith("MIG-") for m in card0.mig_instances)
    # -L does not size instances: the profile's nominal memory stands in.
    assert [m.memory_total_mib for m in card0.mig_instances] == [20480, 10240, 5120]
    assert [card0.mig_placement_index(m) for m in card0.mig_instances] == [1000, 1001, 1002]
    # No driver measures utilisation of a card in MIG mode: absent, not zero.
    assert card0.utilization_gpu_pct is None and card1.utilization_gpu_pct == 0
    assert card0.health == OK and card1.mig_enabled is False and card1.mig_instances == ()


async def test_mig_instances_that_cannot_be_listed_say_so(fake_smi) -> None:
    report = await read_smi(fake_smi("smi_a100x2_mig.csv"))  # -L fails
    card0 = report.gpus[0]
    assert card0.mig_instances == ()
    assert card0.health == DEGRADED
    assert card0.health_reasons == ("MIG is enabled but nvidia-smi -L could not list the instances, "
                                    "so none can be given to an engine",)
    assert report.errors and "nvidia-smi -L" in report.errors[0]


async def test_an_l40s_node_with_missing_readings_and_ecc_errors(fake_smi) -> None:
    report = await read_smi(fake_smi("smi_l40s_mixed.csv"))
    assert {g.gpu_class for g in report.gpus} == {"l40s-48gb"}
    blank, broken = report.gpus[1], report.gpus[2]
    # [N/A] is no reading, never a zero.
    for field in ("memory_used_mib", "temperature_c", "power_draw_w", "power_limit_w", "utilization_gpu_pct",
                  "sm_clock_mhz", "ecc_uncorrected_volatile", "retired_pages_pending", "mig_enabled"):
        assert getattr(blank, field) is None, field
    assert blank.throttle_reasons == () and blank.health == OK
    assert broken.ecc_uncorrected_volatile == 2
    assert broken.health == FAILED and "2 uncorrected ECC errors" in broken.health_reasons[0]
    # [Not Supported] reads the same as [N/A].
    assert report.gpus[3].ecc_uncorrected_volatile is None and report.gpus[3].health == OK


async def test_an_rtx_4090_workstation(fake_smi) -> None:
    report = await read_smi(fake_smi("smi_rtx4090.csv"))
    (g,) = report.gpus
    assert g.gpu_class == "rtx4090-24gb"
    assert g.memory_used_mib == 1123  # the desktop's share
    assert g.ecc_uncorrected_volatile is None and g.mig_enabled is None
    assert g.health == OK


async def test_an_older_driver_without_a_field_is_asked_again_without_it(fake_smi) -> None:
    smi = fake_smi("smi_t4x2_r470.csv")
    report = await read_smi(smi)
    assert len(smi.calls) == 2 and "compute_cap" not in smi.calls[1][0]
    assert [g.gpu_class for g in report.gpus] == ["t4-16gb", "t4-16gb"]
    assert report.gpus[0].compute_capability is None and report.gpus[0].driver_version == "470.82.01"
    assert report.errors == ("nvidia-smi does not know 'compute_cap': left out",)
    # Card 1 has a page waiting to be retired: it needs a reset.
    assert report.gpus[0].retired_pages_pending is False and report.gpus[0].health == OK
    assert report.gpus[1].retired_pages_pending is True and report.gpus[1].health == DEGRADED


async def test_a_renamed_field_is_asked_by_its_other_name(fake_smi, data_dir) -> None:
    # A driver that knows only the new name of the clock event reasons.
    with open(os.path.join(data_dir, "smi_rtx4090.csv")) as f:
        recorded = f.read().replace("clocks_throttle_reasons.active", "clocks_event_reasons.active")
    smi = fake_smi(text=recorded)
    report = await read_smi(smi)
    assert "clocks_event_reasons.active" in smi.calls[-1][0]
    assert report.gpus[0].gpu_class == "rtx4090-24gb" and report.errors == ()


async def test_a_required_field_the_driver_lacks_is_an_error(fake_smi) -> None:
    smi = fake_smi(text="# fields: index,name\n0, Tesla T4\n")
    with pytest.raises(SmiError, match="uuid"):
        await read_smi(smi)


async def test_a_card_the_driver_lost(fake_smi) -> None:
    text = ("# fields: index,uuid,name,memory.total,temperature.gpu\n"
            "0, GPU-aaaa, NVIDIA A10G, 23028, 40\n"
            "1, GPU-bbbb, NVIDIA A10G, 23028, [GPU requires reset]\n")
    report = await read_smi(fake_smi(text=text))
    assert report.gpus[0].health == OK
    assert report.gpus[1].health == FAILED and "reset" in report.gpus[1].health_reasons[0]
    assert report.gpus[1].temperature_c is None


async def test_no_nvidia_smi_and_a_failing_one_are_told_apart(fake_smi, no_smi) -> None:
    with pytest.raises(SmiMissing):
        await read_smi(no_smi)
    with pytest.raises(SmiError, match="couldn't communicate"):
        await read_smi(fake_smi(fail="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."))


async def test_an_async_runner_is_awaited(fake_smi) -> None:
    smi = fake_smi("smi_rtx4090.csv")

    async def runner(args: list[str]) -> str:
        return smi(args)

    assert len((await read_smi(runner)).gpus) == 1


def test_the_mig_listing_of_older_drivers_is_read_as_it_is() -> None:
    listed = parse_list(
        "GPU 0: A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
        "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/7/0)\n"
        "GPU 1: A100-SXM4-40GB (UUID: GPU-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718)\n"
        "  MIG 1g.10gb+me Device 1: (UUID: MIG-b)\n"
        "  MIG 3g.20gb Device 0: (UUID: MIG-a)\n")
    assert listed[0][0].uuid == "MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/7/0"
    assert [(m.device, m.profile) for m in listed[1]] == [(0, "3g.20gb"), (1, "1g.10gb+me")]


async def test_sensors_from_nvidia_smi(fake_smi) -> None:
    smi = fake_smi("smi_l40s_mixed.csv")
    gpus, notes = await sample_smi(smi)
    assert notes == ()
    assert "name" not in smi.calls[0][0]  # only the fast-changing fields are asked
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert (gpus[0].temperature_c, gpus[0].power_draw_w, gpus[0].utilization_gpu_pct) == (58.0, 291.77, 87.0)
    assert gpus[2].health == FAILED and gpus[1].temperature_c is None
    assert all(g.nvlink_errors == () for g in gpus)  # L40S cards: no NVLink, nothing listed, no series


async def test_nvlink_errors_from_nvidia_smi_summed_over_links_in_either_wording(fake_smi) -> None:
    smi = fake_smi("smi_h100x8.csv", nvlink="smi_h100x8.nvlink.txt")
    gpus, notes = await sample_smi(smi)
    assert notes == ()
    assert ["nvlink", "-e"] in smi.calls
    assert gpus[0].nvlink_errors == (("crc", 7), ("replay", 1), ("recovery", 0))
    assert gpus[5].nvlink_errors == (("crc", 40), ("replay", 12), ("recovery", 3))  # flit and data CRC added
    assert gpus[1].nvlink_errors == (("crc", 0), ("replay", 0), ("recovery", 0))


async def test_an_nvidia_smi_that_cannot_list_nvlink_errors_leaves_them_out_and_says_so(fake_smi) -> None:
    smi = fake_smi("smi_h100x8.csv")
    real = smi.__call__

    def refusing(args):
        if args[:1] == ["nvlink"]:
            raise SmiError("nvidia-smi nvlink exited with 3: Not Supported")
        return real(args)

    gpus, notes = await sample_smi(refusing)
    assert len(gpus) == 8 and all(g.nvlink_errors == () for g in gpus)
    assert notes == ("nvidia-smi nvlink -e: nvidia-smi nvlink exited with 3: Not Supported (NVLink errors are "
                     "not read)",)


# --- MIG through nvidia-smi mig -lgi / -lci, and processes through --query-compute-apps ---------------------


def a100_mig(fake_smi, **kw):
    return fake_smi("smi_a100x2_mig.csv", "smi_a100x2_mig.L.txt", lgi="smi_a100x2_mig.lgi.txt",
                    lci="smi_a100x2_mig.lci.txt", **kw)


def h100_mig(fake_smi, **kw):
    return fake_smi("smi_h100_mig.csv", "smi_h100_mig.L.txt", lgi="smi_h100_mig.lgi.txt",
                    lci="smi_h100_mig.lci.txt", **kw)


async def test_each_mig_device_of_an_a100_is_paired_with_its_gpu_instance(fake_smi) -> None:
    smi = a100_mig(fake_smi)
    report = await read_smi(smi)
    card0 = report.gpus[0]
    assert [(m.uuid, m.profile, m.gpu_class, m.gpu_instance_id, m.compute_instance_id, m.placement)
            for m in card0.mig_instances] == [
        ("MIG-8e81973e-0bec-47b0-b898-d190f9ebdacc", "3g.20gb", "a100-40gb-mig-3g.20gb", 2, 0, "4:4"),
        ("MIG-6b4cb242-4a23-4596-a217-beaddbc496cb", "2g.10gb", "a100-40gb-mig-2g.10gb", 4, 0, "2:2"),
        ("MIG-92276658-1e27-41c0-8a6a-63ec24ede6a4", "1g.5gb", "a100-40gb-mig-1g.5gb", 7, 0, "0:1"),
    ]
    assert ["mig", "-lgi"] in smi.calls and ["mig", "-lci"] in smi.calls
    assert report.errors == () and card0.health == OK


async def test_seven_like_instances_of_an_h100_are_each_a_device_by_uuid(fake_smi) -> None:
    (card,) = (await read_smi(h100_mig(fake_smi))).gpus
    assert card.gpu_class == "h100-80gb" and card.mig_enabled is True
    instances = card.mig_instances
    assert {m.gpu_class for m in instances} == {"h100-80gb-mig-1g.10gb"}
    assert [card.mig_placement_index(m) for m in instances] == list(range(1000, 1007))
    assert len({m.uuid for m in instances}) == 7 and all(m.uuid.startswith("MIG-") for m in instances)
    # Devices in GPU instance id order, each in its own slice.
    assert [(m.gpu_instance_id, m.placement) for m in instances] == [(7 + i, f"{i}:1") for i in range(7)]
    assert [m.memory_total_mib for m in instances] == [10240] * 7


async def test_without_the_mig_listings_the_instances_are_still_known_by_uuid(fake_smi) -> None:
    # nvidia-smi mig -lgi refused (a node that does not let the agent read MIG's configuration).
    report = await read_smi(fake_smi("smi_a100x2_mig.csv", "smi_a100x2_mig.L.txt"))
    card0 = report.gpus[0]
    assert [m.uuid[:12] for m in card0.mig_instances] == ["MIG-8e81973e", "MIG-6b4cb242", "MIG-92276658"]
    assert {m.gpu_instance_id for m in card0.mig_instances} == {None} and card0.health == OK
    assert len(report.errors) == 1 and report.errors[0].startswith("nvidia-smi mig -lgi: ")
    assert "Insufficient Permissions" in report.errors[0]


def test_a_listed_device_no_compute_instance_accounts_for_is_said() -> None:
    from llmgw.agent.discovery.smi_mig import pair_instances, parse_compute_instances, parse_gpu_instances

    gis = parse_gpu_instances("|   0  MIG 3g.20gb       9        2          4:4     |\n")
    cis = parse_compute_instances("No compute instances found: Not Found\n")
    paired, notes = pair_instances(0, [(0, "3g.20gb")], gis, cis)
    assert paired[0].gpu_instance_id is None
    assert notes == ["GPU 0: MIG device 0 (3g.20gb) is in no compute instance nvidia-smi mig -lci lists: "
                     "its GPU instance is not known"]


async def test_processes_on_each_card_come_from_query_compute_apps(fake_smi) -> None:
    smi = fake_smi("smi_h100x8.csv", apps="smi_h100x8.apps.csv")
    gpus, notes = await sample_smi(smi)
    assert notes == ()
    MiB = 1 << 20
    assert gpus[0].processes == ((4100, 70112 * MiB), (4107, 5800 * MiB))
    assert gpus[6].processes == ((51234, 74120 * MiB),)
    assert gpus[3].processes == ((7311, None),)  # [N/A] is not known, never 0
    assert gpus[1].processes == ()  # listed, and nothing runs there


async def test_a_process_listed_under_a_mig_uuid_is_its_cards(fake_smi) -> None:
    gpus, notes = await sample_smi(h100_mig(fake_smi, apps="smi_h100_mig.apps.csv"))
    assert notes == () and gpus[0].processes == ((8800, 9216 << 20),)


async def test_processes_that_cannot_be_listed_are_none_and_said(fake_smi) -> None:
    smi = fake_smi("smi_h100x8.csv")
    real = smi.__call__

    def refusing(args):
        if args[0].startswith("--query-compute-apps"):
            raise SmiError("nvidia-smi --query-compute-apps exited with 4: Insufficient Permissions")
        return real(args)

    gpus, notes = await sample_smi(refusing)
    assert all(g.processes is None for g in gpus)
    assert len(notes) == 1 and "memory other processes hold is not told apart" in notes[0]


async def test_the_degraded_temperature_is_a_setting(fake_smi) -> None:
    # Card 6 of the H100 node runs at 89 °C (and is thermally throttled); card 0 at 67 °C.
    report = await read_smi(fake_smi("smi_h100x8.csv"), hot_c=60)
    assert "running at 67 °C (warning from 60 °C)" in report.gpus[0].health_reasons
    assert report.gpus[0].health == DEGRADED
    gpus, _ = await sample_smi(fake_smi("smi_h100x8.csv"), hot_c=95)
    assert not any("°C" in r for r in gpus[6].health_reasons)
