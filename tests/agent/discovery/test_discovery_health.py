"""The health rules both sources share."""

from __future__ import annotations

from llmgw.agent.discovery.gpus import (
    DEGRADED, FAILED, OK, Gpu, assess_health, normalise_bus_id, throttle_names, with_health,
)


def test_a_quiet_card_is_ok() -> None:
    assert assess_health(temperature_c=45, throttle_reasons=("sw_power_cap",), ecc_uncorrected_volatile=0,
                         retired_pages_pending=False) == (OK, ())


def test_uncorrected_ecc_errors_fail_the_card() -> None:
    status, reasons = assess_health(ecc_uncorrected_volatile=3)
    assert status == FAILED
    assert "3 uncorrected ECC errors" in reasons[0]


def test_memory_waiting_for_a_reset_degrades_it() -> None:
    assert assess_health(retired_pages_pending=True)[0] == DEGRADED
    assert assess_health(row_remap_pending=True)[0] == DEGRADED
    assert assess_health(row_remap_failure=True)[0] == FAILED


def test_heat_degrades_and_says_why() -> None:
    status, reasons = assess_health(temperature_c=88)
    assert status == DEGRADED and "88 °C" in reasons[0]
    status, reasons = assess_health(temperature_c=60, throttle_reasons=("hw_thermal", "sw_power_cap"))
    assert status == DEGRADED and "hw_thermal" in reasons[0] and "sw_power_cap" not in reasons[0]


def test_the_worst_finding_wins_and_all_are_kept() -> None:
    status, reasons = assess_health(temperature_c=95, ecc_uncorrected_volatile=1, retired_pages_pending=True)
    assert status == FAILED
    assert len(reasons) == 3


def test_a_card_in_mig_mode_without_instances_is_degraded() -> None:
    gpu = Gpu(index=0, uuid="GPU-x", name="NVIDIA A100-SXM4-40GB", pci_bus_id="0000:07:00.0",
              memory_total_mib=40960, gpu_class="a100-40gb", mig_enabled=True)
    judged = with_health(gpu)
    assert judged.health == DEGRADED and "no instances" in judged.health_reasons[0]
    # Unless the instances could not be asked for: then that is the reason given, not this.
    assert with_health(gpu, mig_listed=False).health == OK


def test_throttle_bits_are_named() -> None:
    assert throttle_names(0x1) == ()  # idle is not being held back
    assert throttle_names(0x64) == ("sw_power_cap", "sw_thermal", "hw_thermal")
    assert throttle_names(None) == ()


def test_bus_ids_from_every_source_compare_equal() -> None:
    assert normalise_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert normalise_bus_id("0000:3b:00.0") == "0000:3b:00.0"
    assert normalise_bus_id("") == ""
