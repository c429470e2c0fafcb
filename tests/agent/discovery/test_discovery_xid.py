"""XID errors from a recorded kernel log, and what they make of each card's health."""

from __future__ import annotations

import os

from llmgw.agent.discovery import discover
from llmgw.agent.discovery.xid import parse_xid_lines, xid_findings


def _dmesg(data_dir: str) -> str:
    with open(os.path.join(data_dir, "dmesg_xid.txt")) as f:
        return f.read()


def test_the_driver_s_xid_lines_are_read_with_card_code_and_time(data_dir):
    events = parse_xid_lines(_dmesg(data_dir))
    assert [(e.pci_bus_id, e.code) for e in events] == [
        ("0000:07:00.0", 13), ("0000:0f:00.0", 79), ("0000:07:00.0", 31), ("0000:07:00.0", 63)]
    assert events[1].uptime_s == 9000.25 and "fallen off the bus" in events[1].text


def test_only_recent_xids_count_and_application_errors_do_not_keep_a_card_out(data_dir):
    events = parse_xid_lines(_dmesg(data_dir))
    found = xid_findings(events, ["0000:07:00.0", "0000:0f:00.0"], now_uptime_s=9200.0)
    # 13 came two hours before: out of the window. 31 is the program's own fault: reported, no finding.
    assert found["0000:07:00.0"].codes == (31, 63)
    assert [s for s, _ in found["0000:07:00.0"].findings] == ["degraded"]
    assert found["0000:0f:00.0"].codes == (79,)
    status, reason = found["0000:0f:00.0"].findings[0]
    assert status == "failed" and "XID 79" in reason and "fallen off the bus" in reason


async def test_discovery_reports_xids_per_card_and_judges_health_by_them(fake_smi, no_nvml, data_dir, tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "uptime").write_text("9200.00 100.00\n")
    inv = await discover(nvml=no_nvml, smi_runner=fake_smi("smi_a100x2_mig.csv", listing="smi_a100x2_mig.L.txt"),
                         proc=str(proc), sys=str(tmp_path / "sys"), kernel_log=_dmesg(data_dir))
    card0, card1 = inv.gpus
    assert card0.xid_errors == (31, 63) and card0.health == "degraded"
    assert any("XID 63" in r for r in card0.health_reasons)
    assert card1.xid_errors == (79,) and card1.health == "failed"
