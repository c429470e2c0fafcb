"""Quality suites: prompts with expected answers, asked of a model, scored.

A suite is a mapping (YAML or JSON, as `llmgw ctl` reads it from a file):

    name: arithmetic
    description: Sums a small model gets right.
    threshold: 0.8        # the score (0 to 1) a revision must reach
    margin: 0.05          # the most a new revision may score below the one it replaces
    system: Answer with the number only.
    max_tokens: 64
    judge: grader         # a model of the catalog, asked about `judge:` cases (optional)
    cases:
    - id: add
      prompt: What is 17 + 25?
      contains: "42"      # or exact:, regex:, judge: (a rubric the judge model is given)
      weight: 2           # optional, 1 by default

Each case passes or fails; the score is the weight of the cases passed over
the weight of all. `exact` compares the answer without its surrounding
spaces; `contains` looks for the text, ignoring case; `regex` searches with
Python's `re`; `judge` asks the suite's judge model whether the answer meets
the rubric and reads PASS or FAIL from the first word of its reply.

`run_suite(suite, model, ask)` asks every case through `ask` (which sends
one chat request to the model and returns the answer's text) and returns a
`SuiteResult`; `gate_verdict` says whether a new revision may take traffic.
Prompts and answers stay inside the result (the admin API shows them to the
operator who ran the suite); they are never logged.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs

__all__ = ["CHECKS", "Case", "CaseResult", "EvalError", "Suite", "SuiteResult", "gate_verdict",
           "parse_suite", "replica_asker", "run_suite"]

#: How a case's answer is checked: exactly one per case.
CHECKS = ("exact", "contains", "regex", "judge")
#: Cases asked at once.
PARALLEL = 4
MAX_CASES = 1000

#: ask(model, messages, max_tokens) -> the answer's text
Ask = Callable[[str, list[dict[str, str]], int], Awaitable[str]]


class EvalError(ValueError):
    """A suite that cannot be run as written; `problems` names each field and what to do."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("quality suite: " + "; ".join(self.problems))


@attrs.frozen
class Case:
    id: str
    prompt: str
    check: str  #: one of CHECKS
    expected: str  #: the text, pattern or rubric
    weight: float = 1.0


@attrs.frozen
class Suite:
    name: str
    cases: tuple[Case, ...]
    threshold: float = 1.0
    margin: float = 0.0
    description: str = ""
    system: str = ""
    max_tokens: int = 128
    judge: str = ""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "threshold": self.threshold,
                "margin": self.margin, "cases": len(self.cases), "judge": self.judge}


@attrs.frozen
class CaseResult:
    id: str
    passed: bool
    weight: float
    answer: str = ""
    why: str = ""  #: why it failed, in words


@attrs.frozen
class SuiteResult:
    suite: str
    model: str
    score: float
    threshold: float
    cases: tuple[CaseResult, ...]

    @property
    def passed(self) -> int:
        return sum(1 for c in self.cases if c.passed)

    @property
    def reached(self) -> bool:
        return self.score >= self.threshold

    def summary(self) -> str:
        return (f"{self.model} scored {self.score:.2f} on {self.suite} ({self.passed} of {len(self.cases)} cases "
                f"passed; the threshold is {self.threshold:.2f})")

    def describe(self) -> dict[str, Any]:
        return {"suite": self.suite, "model": self.model, "score": round(self.score, 4),
                "threshold": self.threshold, "reached": self.reached, "passed": self.passed,
                "total": len(self.cases),
                "cases": [{"id": c.id, "passed": c.passed, "weight": c.weight, "answer": c.answer, "why": c.why}
                          for c in self.cases]}


# ---------------------------------------------------------------- reading a suite


def _fraction(value: Any, where: str, problems: list[str]) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        problems.append(f"{where}: give a number from 0 to 1 (like 0.8), got {value!r}")
        return None
    return float(value)


def parse_suite(spec: Any) -> Suite:
    """A suite from its mapping; EvalError naming every field that is wrong."""
    if not isinstance(spec, Mapping):
        raise EvalError([f"expected a mapping with name, threshold and cases, got {type(spec).__name__}"])
    problems: list[str] = []
    known = {"name", "description", "threshold", "margin", "system", "max_tokens", "judge", "cases"}
    for key in sorted(set(spec) - known):
        problems.append(f"{key}: not a field of a suite (there are: {', '.join(sorted(known))})")
    name = spec.get("name")
    if not isinstance(name, str) or not name.strip():
        problems.append("name: give the suite a name, like arithmetic")
        name = ""
    threshold = _fraction(spec.get("threshold", 1.0), "threshold", problems)
    margin = _fraction(spec.get("margin", 0.0), "margin", problems)
    max_tokens = spec.get("max_tokens", 128)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= 32768:
        problems.append(f"max_tokens: give a whole number from 1 to 32768, got {max_tokens!r}")
    texts = {}
    for key in ("description", "system", "judge"):
        value = spec.get(key, "")
        if not isinstance(value, str):
            problems.append(f"{key}: expected text, got {type(value).__name__}")
            value = ""
        texts[key] = value.strip()
    cases_spec = spec.get("cases")
    cases: list[Case] = []
    if not isinstance(cases_spec, list) or not cases_spec:
        problems.append("cases: give a list of cases, each a prompt and how its answer is checked")
        cases_spec = []
    elif len(cases_spec) > MAX_CASES:
        problems.append(f"cases: at most {MAX_CASES} in one suite, got {len(cases_spec)}")
        cases_spec = []
    seen: set[str] = set()
    for index, case in enumerate(cases_spec):
        parsed = _parse_case(case, f"cases[{index}]", problems)
        if parsed is None:
            continue
        if parsed.id in seen:
            problems.append(f"cases[{index}].id: {parsed.id!r} is already the id of another case")
        seen.add(parsed.id)
        if parsed.check == "judge" and not texts["judge"]:
            problems.append(f"cases[{index}].judge: name the judge model in the suite's `judge:`")
        cases.append(parsed)
    if problems:
        raise EvalError(problems)
    return Suite(name=name.strip(), cases=tuple(cases), threshold=threshold or 0.0, margin=margin or 0.0,
                 description=texts["description"], system=texts["system"], max_tokens=max_tokens,
                 judge=texts["judge"])


def _parse_case(case: Any, where: str, problems: list[str]) -> Case | None:
    if not isinstance(case, Mapping):
        problems.append(f"{where}: expected a mapping with a prompt and one of {', '.join(CHECKS)}")
        return None
    for key in sorted(set(case) - {"id", "prompt", "weight", *CHECKS}):
        problems.append(f"{where}.{key}: not a field of a case (there are: id, prompt, weight, {', '.join(CHECKS)})")
    prompt = case.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        problems.append(f"{where}.prompt: give the text the model is asked")
        return None
    checks = [c for c in CHECKS if c in case]
    if len(checks) != 1:
        problems.append(f"{where}: give exactly one of {', '.join(CHECKS)}"
                        + (f" (it has {', '.join(checks)})" if checks else ""))
        return None
    check = checks[0]
    expected = case[check]
    if isinstance(expected, (int, float)) and not isinstance(expected, bool) and check in ("exact", "contains"):
        expected = str(expected)
    if not isinstance(expected, str) or not expected.strip():
        problems.append(f"{where}.{check}: give the text to check the answer against")
        return None
    if check == "regex":
        try:
            re.compile(expected)
        except re.error as exc:
            problems.append(f"{where}.regex: not a regular expression: {exc}")
            return None
    weight = case.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
        problems.append(f"{where}.weight: give a number above 0, got {weight!r}")
        return None
    case_id = case.get("id", f"case-{int(where[6:-1]) + 1}")
    if not isinstance(case_id, (str, int)) or not str(case_id).strip():
        problems.append(f"{where}.id: give a short name for the case")
        return None
    return Case(id=str(case_id).strip(), prompt=prompt, check=check, expected=expected, weight=float(weight))


# ---------------------------------------------------------------- running it


JUDGE_SYSTEM = ("You grade an answer against a rubric. Reply with PASS if the answer meets the rubric and FAIL "
                "if it does not, then one sentence saying why.")


async def _judge(suite: Suite, case: Case, answer: str, ask: Ask) -> tuple[bool, str]:
    text = (f"Rubric: {case.expected}\n\nQuestion: {case.prompt}\n\nAnswer: {answer}\n\n"
            "Does the answer meet the rubric? Reply PASS or FAIL.")
    reply = await ask(suite.judge, [{"role": "system", "content": JUDGE_SYSTEM},
                                    {"role": "user", "content": text}], 64)
    words = reply.strip().split(None, 1)
    first = words[0].strip(".:,!*").upper() if words else ""
    if first == "PASS":
        return True, ""
    if first == "FAIL":
        return False, f"the judge {suite.judge} said it fails the rubric"
    return False, f"the judge {suite.judge} answered neither PASS nor FAIL"


async def _score_case(suite: Suite, case: Case, model: str, ask: Ask) -> CaseResult:
    messages = ([{"role": "system", "content": suite.system}] if suite.system else []) + \
        [{"role": "user", "content": case.prompt}]
    try:
        answer = await ask(model, messages, suite.max_tokens)
    except Exception as exc:  # noqa: BLE001 - a case the model could not answer fails, with why
        return CaseResult(case.id, False, case.weight, "", f"not answered: {exc}")
    stripped = answer.strip()
    if case.check == "exact":
        passed = stripped == case.expected.strip()
        why = "" if passed else f"expected exactly {case.expected.strip()!r}"
    elif case.check == "contains":
        passed = case.expected.casefold() in answer.casefold()
        why = "" if passed else f"the answer does not contain {case.expected!r}"
    elif case.check == "regex":
        passed = re.search(case.expected, answer) is not None
        why = "" if passed else f"the answer does not match /{case.expected}/"
    else:
        try:
            passed, why = await _judge(suite, case, answer, ask)
        except Exception as exc:  # noqa: BLE001 - a judge that cannot answer fails the case, saying so
            passed, why = False, f"the judge {suite.judge} could not be asked: {exc}"
    return CaseResult(case.id, passed, case.weight, answer[:2000], why)


async def run_suite(suite: Suite, model: str, ask: Ask, *, parallel: int = PARALLEL) -> SuiteResult:
    """Ask every case of `suite` of `model` (a few at once) and score the answers."""
    gate = asyncio.Semaphore(parallel)

    async def one(case: Case) -> CaseResult:
        async with gate:
            return await _score_case(suite, case, model, ask)

    results = await asyncio.gather(*(one(c) for c in suite.cases))
    total = sum(c.weight for c in suite.cases)
    score = sum(r.weight for r in results if r.passed) / total if total else 0.0
    return SuiteResult(suite.name, model, score, suite.threshold, tuple(results))


def gate_verdict(suite: Suite, new: SuiteResult, old: SuiteResult | None) -> str:
    """Why the new revision may not take traffic, in a sentence; "" when it may."""
    if new.score < suite.threshold:
        return (f"{new.model} scored {new.score:.2f} on {suite.name}, below its threshold of "
                f"{suite.threshold:.2f} ({new.passed} of {len(new.cases)} cases passed)")
    if old is not None and new.score < old.score - suite.margin - 1e-9:
        return (f"{new.model} scored {new.score:.2f} on {suite.name}, worse than {old.model}'s {old.score:.2f} "
                f"by more than the margin of {suite.margin:.2f}")
    return ""


# ---------------------------------------------------------------- asking the replicas


def replica_asker(replicas, http_session_factory: Callable[[], Any] | None = None,
                  timeout: float = 120.0) -> Ask:
    """An `ask` that sends each request straight to a ready replica of the model (the router's set), with
    the engine's key, at temperature 0: the suite sees the new revision before any client does."""
    import aiohttp

    async def ask(model: str, messages: list[dict[str, str]], max_tokens: int) -> str:
        candidates = [r for r in replicas.replicas_for(model) if r.usable()]
        if not candidates:
            raise RuntimeError(f"no replica of {model} is ready")
        replica = min(candidates, key=lambda r: r.in_flight)
        headers = {}
        if replica.api_key is not None:
            headers["Authorization"] = f"Bearer {replica.api_key.reveal()}"
        body = {"model": replica.name_at_engine, "messages": messages, "max_tokens": max_tokens,
                "temperature": 0}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http:
            async with http.post(replica.base_url.rstrip("/") + "/chat/completions", json=body,
                                 headers=headers) as resp:
                if resp.status >= 400:
                    raise RuntimeError(f"{model}'s replica {replica.id} answered {resp.status}")
                data = await resp.json()
        try:
            return str(data["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError):
            raise RuntimeError(f"{model}'s replica {replica.id} gave no answer in OpenAI's shape") from None

    return ask
