"""`llmgw ctl guard` against a store and a server.yaml, and `llmgw bench guard` on a tiny corpus."""

from __future__ import annotations

import json

import pytest

from llmgw.bench.guard import KINDS, corpus, measure, run
from llmgw.cli.main import main
from llmgw.plugins.manager import load_plugins


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def setup(tmp_path, capsys):
    """A store with acme/payroll in it, and a server.yaml with a finance policy and a judge."""
    store = ["--store", f"sqlite:///{tmp_path}/store.db"]
    assert run_cli(capsys, "org", "create", "acme", *store)[0] == 0
    assert run_cli(capsys, "org", "create", "acme/payroll", "--project", *store)[0] == 0
    config = tmp_path / "server.yaml"
    config.write_text(
        "guard:\n"
        "  default: [baseline]\n"
        "  policies:\n"
        "    finance:\n"
        "      input: {pii: {iban: block}}\n"
        "      judge: {models: [guard-1, absent], input: block}\n"
        "models:\n"
        "  - name: guard-1\n"
        "    role: guard\n"
        "    guard: {format: qwen3guard}\n"
        "    endpoints: [{url: 'http://127.0.0.1:9/v1'}]\n"
    )
    return store, str(config)


def test_attach_list_detach_on_off(capsys, setup):
    store, config = setup
    code, out, _ = run_cli(capsys, "ctl", "guard", "attach", "project:acme/payroll", "finance", *store)
    assert code == 0 and out.strip() == "finance attached to project:acme/payroll"
    code, out, err = run_cli(capsys, "ctl", "guard", "attach", "acme/payroll", "finanse", *store, "--config", config)
    assert code == 2 and "no policy is called 'finanse'" in err
    code, out, _ = run_cli(capsys, "ctl", "guard", "list", *store, "--config", config, "--json")
    listed = json.loads(out)
    assert listed["enabled"] is True
    assert [(a["scope"], a["policy"]) for a in listed["attachments"]] == [
        ("everywhere", "baseline"), ("project:acme/payroll", "finance")]
    assert run_cli(capsys, "ctl", "guard", "off", "--note", "judge is down", *store)[0] == 0
    code, out, _ = run_cli(capsys, "ctl", "guard", "list", *store)
    assert out.splitlines()[0].startswith("guardrails: OFF") and "judge is down" in out
    assert run_cli(capsys, "ctl", "guard", "on", *store)[0] == 0
    code, out, _ = run_cli(capsys, "ctl", "guard", "detach", "project:acme/payroll", "finance", *store)
    assert code == 0
    code, _, err = run_cli(capsys, "ctl", "guard", "detach", "project:acme/payroll", "finance", *store)
    assert code == 1 and "was not attached" in err


def test_judge_status_says_what_is_wrong_with_each_judge(capsys, setup):
    _, config = setup
    code, out, _ = run_cli(capsys, "ctl", "guard", "judge", "status", "--config", config, "--json")
    rows = {r["judge"]: r for r in json.loads(out)}
    assert code == 1
    assert rows["guard-1"]["state"] == "ok" and rows["guard-1"]["format"] == "qwen3guard"
    assert rows["absent"]["state"] == "problem" and "not in the catalog as a judge" in rows["absent"]["detail"]


def test_judge_ask_reports_a_judge_that_does_not_answer(capsys, setup):
    _, config = setup
    code, out, _ = run_cli(capsys, "ctl", "guard", "judge", "ask", "How do I sort a list?", "--model", "guard-1",
                           "--timeout", "2", "--config", config)
    assert code == 1 and out.startswith("guard-1: no verdict")


def test_the_corpus_is_labelled_and_the_detectors_find_most_of_it():
    samples = corpus(per_kind=6, seed=3)
    assert {s.kind for s in samples} == set(KINDS)
    assert sum(s.positive for s in samples) == sum(not s.positive for s in samples) == 6 * len(KINDS)
    assert any(s.disguise for s in samples)
    assert corpus(per_kind=6, seed=3) == samples  # the same seed, the same corpus
    kinds = measure(load_plugins().detectors(), samples)
    for kind, c in kinds.items():
        assert c["positives"] == 6 and c["tp"] + c["fn"] == 6
        assert c["recall"] >= 0.5, kind
        assert c["precision"] is None or c["precision"] >= 0.5, kind


def test_bench_guard_reports_precision_recall_and_added_latency(capsys):
    result = run(per_kind=3, requests=10, seed=1)
    assert result["samples"] == 6 * len(KINDS)
    for stage in ("input", "output", "total"):
        timing = result["added_latency_ms"][stage]
        assert 0 <= timing["p50"] <= timing["p95"] < 1000
    code, out, _ = run_cli(capsys, "bench", "guard", "--per-kind", "2", "--requests", "5", "--json")
    assert code == 0 and set(json.loads(out)["kinds"]) == set(KINDS)
    code, out, _ = run_cli(capsys, "bench", "guard", "--per-kind", "2", "--requests", "5")
    assert code == 0 and "PRECISION" in out and "P95_MS" in out


def test_bench_without_a_benchmark_says_to_name_one(capsys):
    assert run_cli(capsys, "bench")[0] == 2


def test_every_policy_key_and_guard_metric_is_in_the_manual():
    import pathlib

    from llmgw.guard import policy
    from llmgw.guard.metrics import GuardMetrics

    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "guardrails.md").read_text()
    for key in (*policy._TOP_KEYS, *policy._STAGE_KEYS, *policy._TOOL_KEYS, *policy._JUDGE_KEYS):
        assert f"`{key}" in text or f"{key}:" in text, key
    for metric in GuardMetrics().registry.collect():
        name = metric.name + ("_total" if metric.type == "counter" else "")
        assert name in text, name
