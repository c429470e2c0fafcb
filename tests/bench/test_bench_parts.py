"""The benchmarks' parts that need no process: statistics, wrk's script and output, workloads, configs,
and the placement benchmark, which runs in process on synthetic clusters."""

from __future__ import annotations

import json
import random

import pytest

from llmgw.bench import gateway, placement, procs, routing, wrk
from llmgw.bench.stats import Outcome, latency_summary, percentile, ratio
from llmgw.bench.workloads import MultiTurn, SharedPrefix, chat_body
from llmgw.cli.main import main
from llmgw.config.server import AffinityConfig
from llmgw.router.choose import Chooser, Want
from llmgw.router.replicas import Replica


def test_weighted_percentiles_are_ordered_and_exact_on_plain_samples():
    points = [(float(v), 1.0) for v in range(1, 101)]
    assert percentile(points, 50) == 50.0
    assert percentile(points, 99) == 99.0
    assert percentile(points, 100) == 100.0
    assert percentile([], 50) is None
    # Weights: one value holding most of the weight is the median.
    assert percentile([(1.0, 1.0), (5.0, 8.0), (9.0, 1.0)], 50) == 5.0
    out = Outcome(latencies=[(0.001 * v, 1.0) for v in (5, 1, 9, 3, 7)], ok=5)
    s = latency_summary(out)
    assert s["p50_ms"] <= s["p95_ms"] <= s["p99_ms"]
    assert ratio(3.0, 2.0) == 1.5 and ratio(1.0, 0.0) is None and ratio(None, 1.0) is None


def test_outcomes_merge_across_rounds():
    a = Outcome(latencies=[(0.01, 1.0)], ok=1, elapsed=1.0)
    b = Outcome(latencies=[(0.02, 1.0)], ok=1, elapsed=1.0, late=0.5)
    b.fail("timeout")
    a.merge(b)
    assert (a.ok, a.errors, a.elapsed, a.late, a.rps) == (2, 1, 2.0, 0.5, 1.0)
    assert a.error_kinds == {"timeout": 1}


def test_wrk_script_posts_the_body_and_stops_after_its_share():
    body = chat_body("bench", [{"role": "user", "content": 'say "hi"'}], max_tokens=4, stream=False)
    lua = wrk.script(body, {"Authorization": "Bearer k"}, per_thread=25)
    assert 'wrk.method = "POST"' in lua
    assert json.dumps(body.decode()) in lua
    assert 'wrk.headers["Authorization"] = "Bearer k"' in lua
    assert "answered == 25" in lua and "wrk.thread:stop()" in lua
    assert "function response" not in wrk.script(body, {}, per_thread=None)  # a timed run needs no hook


def wrk_corrected(raw: dict[int, int], interval: int) -> dict[int, int]:
    """What wrk.c's stats_correct makes of a histogram: the loop as wrk runs it, over a flat array."""
    data = [0] * (max(raw) + 1)
    for us, n in raw.items():
        data[us] += n
    for n in range(interval * 2, len(data)):
        count, m = data[n], n - interval
        while count and m > interval:
            data[m] += count
            m -= interval
    return {us: c for us, c in enumerate(data) if c}


def test_wrk_output_becomes_an_outcome_with_the_latencies_wrk_measured():
    # 497 answers in 2 s over 10 connections: wrk's interval is 2 s / (500 // 10) = 40 ms. Three slow
    # answers (1.2 s, 0.5 s, 81 ms) make wrk add made-up ones: 28 + 11 + 1 of them.
    raw = {20_000 + i: 1 for i in range(494)} | {1_200_000: 1, 500_000: 1, 81_000: 1}
    corrected = wrk_corrected(raw, 40_000)
    assert sum(corrected.values()) == 497 + 28 + 11 + 1
    assert wrk.raw_counts(corrected, 500, 2_000_000, 10) == raw
    line = wrk.MARKER + json.dumps({"requests": 500, "duration_us": 2_000_000, "connect": 0, "read": 0,
                                    "write": 0, "status": 3, "timeout": 1,
                                    "histogram": [[us, n] for us, n in sorted(corrected.items())]})
    out = wrk.parse("Running 2s test\n" + line + "\nRequests/sec: 250\n", connections=10)
    assert (out.ok, out.errors, out.elapsed) == (497, 4, 2.0)
    assert out.error_kinds == {"wrk status": 3, "wrk timeout": 1}
    s = latency_summary(out)
    # Corrected, 40 of 537 answers would be over 40 ms: p95 near 0.5 s. As measured, 3 of 497.
    assert 20.0 <= s["p50_ms"] <= s["p95_ms"] <= s["p99_ms"] <= 20.5
    assert s["max_ms"] == 1200.0
    with pytest.raises(ValueError, match="no result line"):
        wrk.parse("wrk: connection refused\n", connections=10)


def test_a_run_too_short_for_wrk_to_correct_is_taken_as_it_is():
    assert wrk.raw_counts({5_000: 3, 900_000: 1}, requests=4, duration_us=1_000_000, connections=10) == {
        5_000: 3, 900_000: 1}


def test_without_wrk_the_python_client_drives_the_closed_loop_and_says_so(monkeypatch):
    monkeypatch.setattr(wrk, "wrk_path", lambda: None)
    generator, notes = gateway.choose_generator(gateway.GatewayBench())
    assert generator == "python" and "wrk is not installed" in notes[0]
    with pytest.raises(gateway.BenchError, match="not installed"):
        gateway.choose_generator(gateway.GatewayBench(client="wrk"))
    monkeypatch.setattr(wrk, "wrk_path", lambda: "/usr/bin/wrk")
    assert gateway.choose_generator(gateway.GatewayBench()) == ("wrk", [])
    assert gateway.choose_generator(gateway.GatewayBench(stream=True))[0] == "python"
    assert gateway.choose_generator(gateway.GatewayBench(rate=100))[0] == "python"


def test_gateway_settings_are_checked_and_shared_between_rounds():
    with pytest.raises(gateway.BenchError):
        gateway.GatewayBench(requests=10, duration=5)
    with pytest.raises(gateway.BenchError):
        gateway.GatewayBench(client="wrk", stream=True)
    bench = gateway.GatewayBench(requests=10, rounds=3)
    assert [bench.share(r)[0] for r in range(3)] == [4, 3, 3]
    assert gateway.GatewayBench(duration=9, rounds=3).share(0) == (None, 3.0)
    assert gateway.GatewayBench().total_requests == 2000


def test_generated_configs_serve_one_model_from_the_same_engine():
    server = procs.server_yaml(listen="127.0.0.1:1", db=procs.Path("/tmp/x/llmgw.db"),
                               engine_url="http://127.0.0.1:2", model="bench", keys=True, concurrency=50)
    assert server["models"][0]["endpoints"] == [{"url": "http://127.0.0.1:2/v1"}]
    assert server["auth"] == {"keys_required": True} and server["control"] == {"enabled": False}
    from llmgw.config import parse_server_config

    parse_server_config(server)  # a server.yaml llmgw accepts
    lite = procs.litellm_yaml(engine_url="http://127.0.0.1:2", model="bench", master_key="sk-x")
    assert lite["model_list"][0]["litellm_params"]["api_base"] == "http://127.0.0.1:2/v1"
    assert lite["general_settings"]["master_key"] == "sk-x"
    assert "general_settings" not in procs.litellm_yaml(engine_url="http://e", model="bench", master_key=None)


def test_shared_prefix_requests_share_their_groups_system_prompt_and_repeat_with_the_seed():
    wl = SharedPrefix(groups=3, system_tokens=40, question_tokens=5, requests=30)
    requests = wl.requests_in_order()
    assert requests == wl.requests_in_order()
    systems = {g: m[0]["content"] for g, m in requests}
    assert len(systems) == 3 and len(set(systems.values())) == 3
    assert all(m[0]["content"] == systems[g] for g, m in requests)
    assert len({m[1]["content"] for _, m in requests}) == 30  # every question its own
    assert len(systems[0].split()) == 40 + 2  # "group 0:" and the words
    assert wl.working_set_blocks(16) == 3 * (40 // 16)


def test_multi_turn_messages_are_fixed_by_the_seed():
    wl = MultiTurn(conversations=2, turns=3)
    assert wl.opening(0) == wl.opening(0) and wl.opening(0) != wl.opening(1)
    assert wl.user_message(1, 2) == wl.user_message(1, 2) != wl.user_message(1, 1)
    assert wl.requests == 6


def test_the_chooser_baselines_ignore_affinity_and_load():
    replicas = [Replica(id=f"r{i}", model="m", base_url=f"http://r{i}/v1") for i in range(3)]
    chooser = Chooser(AffinityConfig())
    chooser.set_policy("round_robin")
    replicas[0].in_flight = 50  # busy, yet its turn comes
    picks = [chooser.choose("m", replicas, Want(session="s")).id for _ in range(6)]
    assert picks == ["r0", "r1", "r2", "r0", "r1", "r2"]
    chooser.set_policy("random", seed=1)
    assert {chooser.choose("m", replicas, Want()).id for _ in range(60)} == {"r0", "r1", "r2"}
    with pytest.raises(ValueError, match="policy"):
        chooser.set_policy("fastest")


def test_routing_settings_are_checked():
    with pytest.raises(routing.RoutingBenchError, match="--policies"):
        routing.RoutingBench(policies=("llmgw", "psychic"))
    with pytest.raises(routing.RoutingBenchError, match="--rate"):
        routing.RoutingBench(workload="multi-turn", rate=5)
    with pytest.raises(routing.RoutingBenchError, match="--replicas"):
        routing.RoutingBench(replicas=1)


def test_engine_counters_are_read_from_vllm_metric_names():
    text = (
        '# HELP vllm:prefix_cache_hits_total Prompt tokens found in the prefix cache.\n'
        'vllm:prefix_cache_hits_total{model_name="bench"} 300.0\n'
        'vllm:prefix_cache_queries_total{model_name="bench"} 400.0\n'
        'vllm:request_success_total{finished_reason="length",model_name="bench"} 7.0\n'
        'vllm:request_success_total{finished_reason="stop",model_name="bench"} 1.0\n'
        'vllm:prefix_cache_hits_created{model_name="bench"} 1.7e9\n'
    )
    assert routing.parse_counters(text) == {"hits": 300.0, "queries": 400.0, "requests": 8.0}


def test_bad_options_are_usage_errors(capsys):
    assert main(["bench", "gateway", "--client", "wrk", "--stream"]) == 2
    assert "wrk measures neither" in capsys.readouterr().err
    assert main(["bench", "routing", "--policies", "nope"]) == 2
    assert "--policies" in capsys.readouterr().err
    assert main(["bench", "placement", "--nodes", "ten"]) == 2
    assert "--nodes" in capsys.readouterr().err


def test_placement_on_small_clusters_places_what_fits_and_reports_growth(capsys):
    assert main(["bench", "placement", "--nodes", "8,24", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    small, large = report["runs"]
    assert (small["nodes"], large["nodes"], large["replicas"]) == (8, 24, 48)
    for run in report["runs"]:
        assert run["pass_ms"] > 0 and run["decision_ms"] > 0
        for result in (run["llmgw"], run["first_fit"]):
            assert 0 < result["placed"] <= run["replicas"]
            assert 0.0 < result["gpu_use"] <= 1.0 and result["worst_stack"] >= 1
        # llmgw spreads a model's replicas; first fit stacks them on the first node with room.
        assert run["llmgw"]["worst_stack"] <= run["first_fit"]["worst_stack"]
    assert large["nodes_growth"] == 3.0 and large["pass_growth"] > 0


def test_first_fit_takes_the_first_node_with_room():
    from llmgw.control.catalog import parse_model

    nodes = placement.cluster(6, random.Random(3))
    one_card = parse_model({"name": "small", "profiles": [{"name": "any", "engine": "vllm", "gpus": 1}]})
    held = placement.first_fit([one_card] * 3, nodes)
    first_gpu_node = min(n.id for n in nodes if n.gpus)
    assert [h.node for h in held] == [first_gpu_node] * 3 and [h.gpus for h in held] == [(0,), (1,), (2,)]
    assert placement.quality(held, nodes)["worst_stack"] == 3
