"""Memory others hold on a card, through nvidia-smi (no NVML), as the agent reports it in a heartbeat."""

from __future__ import annotations

from llmgw.agent.discovery import sample_sensors
from llmgw.agent.report import wire_gpu_sensors

GiB = 1 << 30


async def test_someone_elses_job_found_by_query_compute_apps_keeps_the_card_out(fake_smi, no_nvml) -> None:
    smi = fake_smi("smi_h100x8.csv", apps="smi_h100x8.apps.csv")
    sensors = await sample_sensors(nvml=no_nvml, smi_runner=smi)
    assert sensors.gpu_source == "nvidia-smi"
    # pid 4100 is our engine, 4107 its tensor-parallel worker (one process group).
    cards = wire_gpu_sensors(sensors, {4100, 4107}, {0}, foreign_limit=2 * GiB)
    # Card 0 holds our engine's 74.6 GiB, 0.5 GiB besides (the driver's own): not someone else's.
    assert cards[0].foreign_memory_bytes == (76381 - 70112 - 5800) << 20 and cards[0].health == "ok"
    # Card 6: someone's 72 GiB training job.
    assert cards[6].foreign_memory_bytes == 74250 << 20
    assert cards[6].health == "degraded"
    assert ("72.5 GiB of its memory is held by processes that are not llmgw's engines (more than "
            "gpu_foreign_memory_limit, 2GiB): find them with nvidia-smi") in cards[6].problem
    # Card 6 was already degraded by heat: both reasons are said.
    assert "hw_thermal" in cards[6].problem
    assert [c.health for c in cards].count("ok") == 7


async def test_the_limit_changes_the_verdict(fake_smi, no_nvml) -> None:
    smi = fake_smi("smi_h100x8.csv", apps="smi_h100x8.apps.csv")
    sensors = await sample_sensors(nvml=no_nvml, smi_runner=smi, hot_c=95)
    assert "°C" not in "; ".join(sensors.gpus[6].health_reasons)  # 89 °C is under 95
    strict = wire_gpu_sensors(sensors, {4100, 4107}, {0}, foreign_limit=2 * GiB)[6]
    assert strict.health == "degraded" and "held by processes" in strict.problem
    lenient = wire_gpu_sensors(sensors, {4100, 4107}, {0}, foreign_limit=80 * GiB)[6]
    assert "held by processes" not in lenient.problem


async def test_our_engine_holding_an_amount_not_known_is_not_counted_as_someone_elses(fake_smi, no_nvml) -> None:
    # Card 3's only process reads [N/A]: when it is ours, the card's memory is nobody's to blame.
    sensors = await sample_sensors(nvml=no_nvml, smi_runner=fake_smi("smi_h100x8.csv", apps="smi_h100x8.apps.csv"))
    assert wire_gpu_sensors(sensors, {7311}, {3}, foreign_limit=0)[3].foreign_memory_bytes is None
    assert wire_gpu_sensors(sensors, set(), (), foreign_limit=0)[3].health == "degraded"  # 1 MiB > 0
