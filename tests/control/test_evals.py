"""Quality suites (llmgw.control.evals): read with every problem named, asked of real sim engines, gated."""

from __future__ import annotations

import pytest

from llmgw.config.secrets import Secret
from llmgw.control.evals import EvalError, gate_verdict, parse_suite, replica_asker, run_suite
from llmgw.router.replicas import Replica, ReplicaSet
from llmgw.simengine import SimOptions, start
from llmgw.simengine.tokens import split_text

SUITE = {
    "name": "sums", "threshold": 0.75, "margin": 0.1, "system": "Answer with the number only.", "max_tokens": 8,
    "cases": [
        {"id": "add", "prompt": "What is 17 + 25?", "contains": "42", "weight": 2},
        {"id": "exact", "prompt": "What is 40 + 2?", "regex": r"^\s*42\b"},
        {"id": "word", "prompt": "Say the answer.", "exact": 42},
    ],
}


def test_a_suite_with_mistakes_names_each_field():
    with pytest.raises(EvalError) as caught:
        parse_suite({"name": "", "threshold": 2, "cases": [
            {"prompt": "hi"}, {"prompt": "x", "contains": "a", "regex": "b"}, {"prompt": "y", "regex": "("},
            {"prompt": "z", "judge": "says hello"}, {"id": "d", "prompt": "q", "exact": "a", "colour": 1},
        ], "extra": True})
    text = str(caught.value)
    for expected in ("name: give the suite a name", "threshold: give a number from 0 to 1",
                     "cases[0]: give exactly one of exact, contains, regex, judge",
                     "cases[1]: give exactly one of exact, contains, regex, judge (it has contains, regex)",
                     "cases[2].regex: not a regular expression", "cases[3].judge: name the judge model",
                     "cases[4].colour: not a field of a case", "extra: not a field of a suite"):
        assert expected in text


async def _replica_set(**variants: str):
    engines, replicas = [], ReplicaSet()
    for model, prefix in variants.items():
        # a revision that knows the answer says it and stops (--answer-tokens: the prefix's own tokens)
        engine = await start(SimOptions(models=(model,), port=0, ttft=0.0, tpot=0.0, api_key="engine-key",
                                        answer_prefix=prefix, answer_tokens=len(split_text(prefix))),
                             shutdown_timeout=0.5)
        engines.append(engine)
        replicas.add(Replica(id=f"r-{model}", model=model, base_url=engine.url + "/v1",
                             api_key=Secret("engine-key"), source="control"))
    return engines, replicas


async def test_a_suite_scores_one_revision_above_its_threshold_and_another_below():
    suite = parse_suite(SUITE)
    engines, replicas = await _replica_set(good="42", bad="")
    try:
        ask = replica_asker(replicas)
        good = await run_suite(suite, "good", ask)
        bad = await run_suite(suite, "bad", ask)
    finally:
        for engine in engines:
            await engine.close()
    assert (good.score, good.passed, good.reached) == (1.0, 3, True)
    assert bad.score == 0.0 and not bad.reached
    assert [c.why for c in bad.cases][0] == "the answer does not contain '42'"
    assert gate_verdict(suite, good, None) == ""
    assert gate_verdict(suite, bad, good).startswith("bad scored 0.00 on sums, below its threshold of 0.75")
    # above its threshold, but worse than the old revision by more than the margin
    lenient = parse_suite({**SUITE, "threshold": 0.0})
    assert "worse than good's 1.00 by more than the margin of 0.10" in gate_verdict(lenient, bad, good)


async def test_a_judge_model_grades_the_answers():
    suite = parse_suite({"name": "judged", "threshold": 1.0, "judge": "grader",
                         "cases": [{"prompt": "Greet me.", "judge": "a greeting"}]})
    engines, replicas = await _replica_set(chat="", grader="PASS.", strict="FAIL: no")
    try:
        ask = replica_asker(replicas)
        passed = await run_suite(suite, "chat", ask)
        failed = await run_suite(attrs_evolve(suite, judge="strict"), "chat", ask)
    finally:
        for engine in engines:
            await engine.close()
    assert passed.score == 1.0
    assert failed.score == 0.0 and failed.cases[0].why == "the judge strict said it fails the rubric"


def attrs_evolve(suite, **changes):
    import attrs

    return attrs.evolve(suite, **changes)


async def test_a_model_with_no_ready_replica_fails_every_case_saying_so():
    suite = parse_suite(SUITE)
    result = await run_suite(suite, "absent", replica_asker(ReplicaSet()))
    assert result.score == 0.0
    assert result.cases[0].why == "not answered: no replica of absent is ready"
