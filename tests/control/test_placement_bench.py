"""`llmgw bench placement`: the pass through one placement round and the previous way, side by side."""

from __future__ import annotations

import json

from llmgw.bench import placement
from llmgw.cli.main import main


def test_the_bench_makes_the_pass_both_ways_and_they_agree(capsys):
    # run_size raises when a decision made the previous way differs from the round's.
    assert main(["bench", "placement", "--nodes", "12,24", "--repeat", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for run in report["runs"]:
        assert run["pass_ms"] > 0 and run["pass_cpu_ms"] > 0
        assert len(run["pass_cpu_ms_each"]) == 2 and min(run["pass_cpu_ms_each"]) <= run["pass_cpu_ms"]
        assert run["previous_pass_ms"] > 0 and run["previous_pass_cpu_ms"] > 0 and run["faster"] > 0
        assert run["llmgw"]["placed"] == run["replicas"]
    second = report["runs"][1]
    assert second["pass_growth"] > 0
    # The growth over the cluster's: the pass's growth, halved for twice the nodes.
    assert second["growth_vs_linear"] == round(second["pass_cpu_ms"] / report["runs"][0]["pass_cpu_ms"] / 2, 2)
    rows, columns = placement.table(report)
    assert {"pass_ms", "cpu_ms", "previous_ms", "previous_cpu_ms", "faster", "growth", "vs_linear"} <= set(columns)
    assert rows[1]["faster"].endswith("x") and "for 2.0x nodes" in rows[1]["growth"]
    assert rows[1]["vs_linear"] == f"{second['growth_vs_linear']:.2f}" and rows[0]["vs_linear"] == ""


def test_the_table_says_how_the_pass_grew_against_linear(capsys):
    assert main(["bench", "placement", "--nodes", "10,20", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "VS_LINEAR" in out.splitlines()[0]
    assert "vs_linear: that growth over the cluster's (1.00: linear" in out


def test_a_repeat_below_one_is_refused(capsys):
    assert main(["bench", "placement", "--nodes", "10", "--repeat", "0"]) == 2
    assert "--repeat: at least 1 pass per size" in capsys.readouterr().err


def test_the_default_sizes_are_those_the_targets_name():
    assert placement.PlacementBench().sizes == (250, 500, 1000, 2000)
