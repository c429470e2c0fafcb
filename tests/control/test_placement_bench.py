"""`llmgw bench placement`: the pass through one placement round and the previous way, side by side."""

from __future__ import annotations

import json

from llmgw.bench import placement
from llmgw.cli.main import main


def test_the_bench_makes_the_pass_both_ways_and_they_agree(capsys):
    # run_size raises when a decision made the previous way differs from the round's.
    assert main(["bench", "placement", "--nodes", "12,24", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for run in report["runs"]:
        assert run["pass_ms"] > 0 and run["pass_cpu_ms"] > 0
        assert run["previous_pass_ms"] > 0 and run["previous_pass_cpu_ms"] > 0 and run["faster"] > 0
        assert run["llmgw"]["placed"] == run["replicas"]
    assert report["runs"][1]["pass_growth"] > 0
    rows, columns = placement.table(report)
    assert {"pass_ms", "cpu_ms", "previous_ms", "previous_cpu_ms", "faster", "growth"} <= set(columns)
    assert rows[1]["faster"].endswith("x") and "for 2.0x nodes" in rows[1]["growth"]


def test_the_default_sizes_are_those_the_targets_name():
    assert placement.PlacementBench().sizes == (250, 500, 1000, 2000)
