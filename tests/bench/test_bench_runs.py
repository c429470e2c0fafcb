"""Each benchmark run for real on a tiny load: every request answered and the numbers sane.

No timing is asserted (a slow or busy machine must not fail these); the
shapes, the counts and the order of percentiles are. They start processes
(`llmgw sim-engine`, `llmgw server`), so they are marked slow.
"""

from __future__ import annotations

import json

import pytest

from llmgw.bench import gateway, routing, wrk
from llmgw.bench.workloads import MultiTurn, SharedPrefix
from llmgw.cli.main import main

pytestmark = pytest.mark.slow

TINY = {"requests": 40, "rounds": 2, "concurrency": 4, "warmup": 5}


def ordered(values: dict, prefix: str = "") -> bool:
    return values[f"{prefix}p50_ms"] <= values[f"{prefix}p95_ms"] <= values[f"{prefix}p99_ms"]


def check_gateway_report(report: dict, requests: int, targets=("direct", "llmgw")) -> None:
    assert set(report["targets"]) == set(targets)
    for name, values in report["targets"].items():
        assert values["ok"] >= requests and values["errors"] == 0, (name, values)
        assert values["rps"] > 0 and ordered(values)
    gw = report["targets"]["llmgw"]
    assert gw["rss_mb_before"] > 0 and gw["rss_mb_after"] > 0
    assert gw["added_p50_ms"] is not None and gw["cpu_ms_per_req"] > 0
    assert gw["rps_vs_direct"] > 0


async def test_closed_loop_with_keys_through_the_python_client():
    report = await gateway.run(gateway.GatewayBench(client="python", keys=True, **TINY))
    check_gateway_report(report, 40)
    assert report["load_generator"] == "python"


@pytest.mark.skipif(wrk.wrk_path() is None, reason="wrk is not installed (apt-get install wrk)")
async def test_closed_loop_through_wrk_without_keys():
    report = await gateway.run(gateway.GatewayBench(keys=False, **TINY))
    assert report["load_generator"] == "wrk"
    check_gateway_report(report, 40)


async def test_streams_report_time_to_first_token_and_gaps():
    report = await gateway.run(gateway.GatewayBench(stream=True, tpot=0.001, answer_tokens=4, **TINY))
    check_gateway_report(report, 40)
    for values in report["targets"].values():
        assert ordered({k.removeprefix("ttft_"): v for k, v in values.items() if k.startswith("ttft_")})
        assert values["ttft_p50_ms"] <= values["p50_ms"] and values["gap_p50_ms"] is not None


async def test_open_loop_at_a_fixed_rate():
    report = await gateway.run(gateway.GatewayBench(rate=50, requests=30, rounds=1, warmup=5))
    check_gateway_report(report, 30)
    assert report["settings"]["loop"] == "open" and "client_late_ms" in report["targets"]["direct"]


def test_the_command_prints_one_json_object(capsys):
    assert main(["bench", "gateway", "--requests", "20", "--rounds", "1", "--concurrency", "2", "--warmup", "2",
                 "--no-keys", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    check_gateway_report(report, 20)


def test_a_litellm_that_does_not_start_is_reported_and_nothing_is_left_running(capsys, tmp_path):
    missing = str(tmp_path / "no-such-litellm")
    assert main(["bench", "gateway", "--requests", "10", "--rounds", "1", "--warmup", "1",
                 "--litellm", missing]) == 1
    assert "no-such-litellm" in capsys.readouterr().err


def check_routing_report(report: dict, requests: int) -> None:
    for name, values in report["policies"].items():
        assert values["ok"] == requests and values["errors"] == 0, (name, values)
        assert 0.0 <= values["hit_rate"] <= 1.0
        assert values["ttft_p50_ms"] <= values["ttft_p90_ms"] <= values["ttft_p95_ms"] <= values["ttft_p99_ms"]
        assert values["tokens_per_s"] > 0 and sum(values["per_replica"]) == requests


async def test_on_a_shared_prefix_llmgw_hits_the_cache_at_least_as_often_as_round_robin():
    bench = routing.RoutingBench(
        workload="shared-prefix", policies=("llmgw", "round_robin", "random"), replicas=2, concurrency=1,
        ttft=0.001, prefill_per_token=0.00001, tpot=0.0,
        shared=SharedPrefix(groups=2, system_tokens=200, question_tokens=10, answer_tokens=4, requests=12))
    report = await routing.run(bench)
    check_routing_report(report, 12)
    policies = report["policies"]
    assert policies["llmgw"]["hit_rate"] >= policies["round_robin"]["hit_rate"]
    assert policies["round_robin"]["vs_round_robin"]["hit_rate"] == 1.0
    assert policies["round_robin"]["per_replica"] == [6, 6]


async def test_multi_turn_conversations_replay_under_each_policy():
    bench = routing.RoutingBench(
        workload="multi-turn", policies=("llmgw", "round_robin"), replicas=2, concurrency=2,
        ttft=0.001, prefill_per_token=0.00001, tpot=0.0,
        chat=MultiTurn(conversations=3, turns=3, system_tokens=40, user_tokens=20, answer_tokens=8))
    report = await routing.run(bench)
    check_routing_report(report, 9)
    assert report["policies"]["llmgw"]["hit_rate"] > 0  # a conversation's later turns find its history


def test_the_routing_command_prints_a_table(capsys):
    assert main(["bench", "routing", "--replicas", "2", "--requests", "6", "--groups", "2", "--system-tokens",
                 "100", "--policies", "llmgw,round_robin", "--ttft", "0.001", "--prefill-per-token", "0",
                 "--tpot", "0"]) == 0
    out = capsys.readouterr().out
    assert "HIT_RATE" in out and "HIT_X" in out and "round_robin" in out
