"""The guardrails on the serving path: a request's input checked, its answer filtered.

`GuardLayer` is built once per gateway from server.yaml's `guard:` section,
the detectors and judge formats plugins give, and the attachments in the
store (`llmgw.guard.attach` keeps them current). For each request the
router calls `begin(principal, model, kind)`; None means no policy applies
and nothing costs anything. Otherwise the `GuardRequest` it returns:

- `check_input(body)`, after the limits and before admission: refuses what a
  policy blocks (400 `content_policy_violation`, naming the category, never
  the text), shapes the request (pinned system prompt, client system
  messages dropped, output cap, tools stripped), redacts values with
  placeholders consistent across the request, asks the judge, and returns
  the body to send on;
- `filter_answer(raw)` checks an answer that is not streamed, whole;
- `wrap(relay)` returns a relay that checks a stream a sentence at a time
  (`llmgw.guard.stream`);
- `record` and `headers()` say what was done, for the usage row and the
  client (`x-llmgw-guard`, `x-llmgw-guard-policy`).

Shadow policies are evaluated with the enforced ones on the same findings
(`Effective.would`); what only they would do is recorded as `shadow-…`
and changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from llmgw.guard.judge import Judge, JudgeAnswer
from llmgw.guard.policy import RANK, Effective, PolicyBook, PolicyError, Rules
from llmgw.guard.redact import Numbering, redact
from llmgw.guard.scan import (
    CompiledStage,
    GuardRecord,
    Hit,
    Scanner,
    evaluate,
    strongest,
)
from llmgw.guard.shapes import (
    answer_slots,
    capability_problem,
    declared_tools,
    denied_tools,
    input_slots,
    last_user_text,
    pin_system_prompt,
    shape_request,
    structured_problem,
    structured_schema,
    tool_call_problem,
    with_value,
)
from llmgw.obs import logs
from llmgw.router.errors import GatewayError, dumps, loads

__all__ = ["GuardLayer", "GuardRequest", "refusal"]

log = logs.get("llmgw.guard")

#: The kinds of request the guardrails read; embeddings are not checked.
CHECKED_KINDS = ("chat", "completion")


def refusal(label: str) -> GatewayError:
    """The 400 a refused request gets: it names the category, never the text."""
    return GatewayError(400, "content_policy_violation",
                        f"this request was refused by the gateway's policy ({label})")


def _broad(label: str) -> str:
    return label.split(":", 1)[0]


@attrs.define
class _Compiled:
    input: CompiledStage
    output: CompiledStage


class GuardLayer:
    """The policies, detectors and judges of one gateway."""

    def __init__(self, book: PolicyBook, scanner: Scanner, *, judge: Judge | None = None, metrics: Any = None,
                 capabilities: Mapping[str, tuple[bool, bool]] | None = None, clock=time.perf_counter) -> None:
        self.book = book
        self.scanner = scanner
        self.judge = judge
        self.metrics = metrics
        #: model -> (takes tools, takes images), from the catalog's `capabilities`
        self.capabilities = dict(capabilities or {})
        self.clock = clock
        self._compiled: dict[tuple[str, ...], _Compiled] = {}
        self.check_book(book)

    def check_book(self, book: PolicyBook) -> None:
        """Refuse policies that act on kinds no detector finds (a misspelt `emial`).

        A built-in policy is checked only when `guard.default` names it, so a
        gateway whose detectors are left out (LLMGW_PLUGINS) starts when it uses none.
        """
        problems = []
        for policy in book.policies.values():
            if policy.builtin and policy.name not in book.default:
                continue
            for stage in ("input", "output"):
                for selector in self.scanner.unknown(getattr(policy.rules, stage)):
                    known = ", ".join(sorted(self.scanner.selectors)) or "none: install llmgw-guard-detectors"
                    problems.append((("guard", "policies", policy.name, stage, selector),
                                     f"no detector finds {selector!r}; there are: {known}"))
        if problems:
            raise PolicyError(problems)

    def set_book(self, book: PolicyBook) -> None:
        """Use new policies or attachments from the next request on."""
        if book.policies is not self.book.policies:
            self.check_book(book)
        self.book = book
        self._compiled.clear()

    def judge_problems(self) -> list[str]:
        """Judges the policies name that cannot be asked now, in words (for logs and status)."""
        wanted = dict.fromkeys(m for p in self.book.policies.values() for m in p.rules.judge.models)
        if self.judge is None:
            return [f"{m!r}: this gateway has no way to ask judges" for m in wanted]
        return [p for m in wanted if (p := self.judge.problem(m))]

    def begin(self, principal: Any, model: str, kind: str) -> GuardRequest | None:
        """The guard of one request, or None when no policy applies to it."""
        if kind not in CHECKED_KINDS:
            return None
        effective = self.book.effective(principal)
        if effective is None:
            return None
        compiled = self._compiled.get(effective.names)
        if compiled is None:
            compiled = self._compiled[effective.names] = _Compiled(
                CompiledStage.build(self.scanner, effective.enforced.input, effective.would.input),
                CompiledStage.build(self.scanner, effective.enforced.output, effective.would.output),
            )
        return GuardRequest(self, effective, compiled, principal, model, kind)


class GuardRequest:
    """The guardrails of one request: its state lives as long as the request, in memory only."""

    def __init__(self, layer: GuardLayer, effective: Effective, compiled: _Compiled, principal: Any,
                 model: str, kind: str) -> None:
        self.layer = layer
        self.effective = effective
        self.compiled = compiled
        self.principal = principal
        self.model = model
        self.kind = kind
        self.record = GuardRecord(policy=effective.label)
        self.stage_records: dict[str, GuardRecord] = {}
        #: placeholders handed out in this request; holds the values, so never logged or kept
        self.numbering = Numbering()
        self.changed = False
        self.user_text = ""
        self.declared: dict[str, Any] = {}
        self.structured: Any = None

    # -- what applies ----------------------------------------------------------

    @property
    def enforced(self) -> Rules:
        return self.effective.enforced

    @property
    def would(self) -> Rules:
        return self.effective.would

    @property
    def no_store(self) -> bool:
        return self.enforced.no_store

    def headers(self) -> dict[str, str]:
        return self.record.headers()

    # -- recording -------------------------------------------------------------

    def note(self, stage: str, action: str, label: str, *, shadow: bool = False) -> None:
        self.record.note(stage, action, label, shadow=shadow)
        self.stage_records.setdefault(stage, GuardRecord(policy=self.record.policy)).note(
            stage, action, label, shadow=shadow)
        if action == "block" and not shadow and self.layer.metrics is not None:
            tenant = getattr(self.principal, "project_id", None) or "none"
            self.layer.metrics.tenant_blocks.labels(tenant).inc()

    def note_hits(self, stage: str, hits: Sequence[Hit]) -> None:
        """Record the strictest enforced hit, and a shadow one stricter than it."""
        done = strongest(hits)
        if done is not None:
            self.note(stage, done.action, done.label)
        if self.effective.has_shadow:
            would = strongest(hits, shadow=True)
            if would is not None and RANK[would.would] > RANK[done.action if done else ""]:
                self.note(stage, would.would, would.label, shadow=True)

    def spent(self, stage: str, seconds: float, *, final: bool = True) -> None:
        """Add check time; `final` counts the stage's check in the metrics."""
        self.record.seconds += seconds
        stage_record = self.stage_records.setdefault(stage, GuardRecord(policy=self.record.policy))
        stage_record.seconds += seconds
        if final and self.layer.metrics is not None:
            self.layer.metrics.checked(stage, self.record.policy, stage_record.action, _broad(stage_record.category),
                                       self.effective.mode, stage_record.seconds)

    def scan(self, stage: str, compiled: CompiledStage, texts: Sequence[str]) -> list[Hit] | None:
        """The hits in `texts`; when a detector fails, [] under `fail: open` (recorded as flagged)
        and None under `fail: closed`, for the caller to refuse or stop."""
        try:
            return evaluate(self.layer.scanner, compiled, texts)
        except Exception:
            log.exception("a guard detector failed", extra={"fields": {"stage": stage}})
            closed = self.enforced.fail == "closed"
            self.note(stage, "block" if closed else "flag", "detector: failed")
            return None if closed else []

    def _refuse(self, stage: str, label: str, *, shadow: bool) -> None:
        """Block the request (raises), or only record it when only a shadow policy would."""
        self.note(stage, "block", label, shadow=shadow)
        if not shadow:
            raise refusal(label)

    # -- input -----------------------------------------------------------------

    async def check_input(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body to send on, checked and changed as the policies say; GatewayError when refused."""
        started = self.layer.clock()
        try:
            return await self._check_input(body)
        finally:
            self.spent("input", self.layer.clock() - started)

    async def _check_input(self, body: dict[str, Any]) -> dict[str, Any]:
        e, w = self.enforced, self.would
        for rules, shadow in self._rule_sets():
            if rules.tools.on_denied == "block":
                denied = denied_tools(body, rules.tools)
                if denied:
                    self._refuse("input", f"tools: {denied[0]}", shadow=shadow)
            if rules.require_capabilities:
                tools, vision = self.layer.capabilities.get(self.model, (False, False))
                problem = capability_problem(body, self.model, tools, vision)
                if problem:
                    self.note("input", "block", "capabilities", shadow=shadow)
                    if not shadow:
                        raise GatewayError(400, "capability_not_supported", problem)
        shaped, stripped = shape_request(body, self.kind, e)
        if stripped:
            self.note("input", "flag", f"tools: {stripped[0]}")
        if shaped is not body:
            self.changed = True
            body = shaped
        slots = input_slots(body, self.kind)
        texts = [s.text for s in slots]
        for text in texts:  # placeholders of earlier turns (a thread) keep their numbers
            if "[" in text:
                self.numbering.reserve(text)
        stage = self.compiled.input
        limit_e, limit_w = stage.max_chars
        total = sum(map(len, texts))
        if limit_w is not None and total > limit_w:
            shadow = limit_e is None or total <= limit_e
            self._refuse("input", "size", shadow=shadow)
            hits: list[Hit] = []  # a text over the limit is not read
        else:
            hits = self.scan("input", stage, texts) if stage else []
            if hits is None:
                raise GatewayError(503, "guard_unavailable",
                                   "this request could not be checked and the policy fails closed; try again later")
        self.note_hits("input", hits)
        if any(h.action == "block" for h in hits):
            raise refusal(strongest(hits).label)
        body = self._redact_input(body, slots, hits)
        self.user_text = last_user_text(input_slots(body, self.kind) if self.changed else slots)
        if w.judge.input and self.user_text:
            action, label, unavailable = await self.ask_judge("input", [{"role": "user", "content": self.user_text}])
            if action == "block":
                if unavailable:
                    raise GatewayError(503, "guard_unavailable",
                                       "no judge could read this request and the policy fails closed; try again later")
                raise refusal(label)
        self.declared = declared_tools(body)
        if w.validate_structured:
            self.structured = structured_schema(body)
        pinned = pin_system_prompt(body, self.kind, e)
        if pinned is not body:
            self.changed = True
        return pinned

    def _rule_sets(self) -> list[tuple[Rules, bool]]:
        if self.effective.has_shadow:
            return [(self.enforced, False), (self.would, True)]
        return [(self.enforced, False)]

    def _redact_input(self, body: dict[str, Any], slots: Sequence[Any], hits: Sequence[Hit]) -> dict[str, Any]:
        by_slot: dict[int, list] = {}
        for h in hits:
            if h.action == "redact":
                by_slot.setdefault(h.slot, []).append(h.finding)
        for i, findings in by_slot.items():
            body = with_value(body, slots[i].path, redact(slots[i].text, findings, self.numbering))
            self._count_redactions(findings)
        if by_slot:
            self.changed = True
        return body

    def _count_redactions(self, findings: Sequence[Any]) -> None:
        if self.layer.metrics is not None:
            for f in findings:
                self.layer.metrics.redactions.labels(f.kind).inc()

    # -- judges ----------------------------------------------------------------

    async def ask_judge(self, stage: str, messages: list[dict[str, str]]) -> tuple[str, str, bool]:
        """Ask the policy's judges; (enforced action, label, whether no judge answered).

        What only a shadow policy would do is recorded here. When no judge
        answers, `fail: closed` blocks and `fail: open` serves it flagged.
        """
        e_action = getattr(self.enforced.judge, stage)
        w_action = getattr(self.would.judge, stage)
        if not w_action:
            return "", "", False
        judge = self.layer.judge
        role = "user" if stage == "input" else "assistant"
        if judge is None:
            answer = JudgeAnswer(None, errors=(("", "no_judge"),))
        else:
            if getattr(self.principal, "in_cluster", "") or self.no_store:
                judge = judge.within_cluster()  # residency: the text goes to no judge outside the cluster
            answer = await judge.ask(self.would.judge, messages, role)
        if answer.verdict is None:
            closed = self.enforced.fail == "closed" if e_action else self.would.fail == "closed"
            if self.layer.metrics is not None and not closed:
                self.layer.metrics.fail_open.inc()
            action = "block" if closed else "flag"
            self.note(stage, action, "judge: unavailable", shadow=not e_action)
            return (action if e_action else ""), "judge: unavailable", True
        if e_action:
            unsafe, category = answer.counts(self.enforced.judge)
            if unsafe:
                self.note(stage, e_action, f"judge: {category}")
                return e_action, f"judge: {category}", False
        unsafe, category = answer.counts(self.would.judge)
        if unsafe:
            self.note(stage, w_action, f"judge: {category}", shadow=True)
        return "", "", False

    # -- output ----------------------------------------------------------------

    def wrap(self, relay: Any) -> Any:
        """A relay that releases a streamed answer only once checked."""
        from llmgw.guard.stream import GuardedRelay

        return GuardedRelay(relay, self)

    async def filter_answer(self, raw: bytes) -> bytes:
        """An answer that is not streamed, checked whole: stopped choices end with `content_filter`."""
        started = self.layer.clock()
        try:
            return await self._filter_answer(raw)
        finally:
            self.spent("output", self.layer.clock() - started)

    async def _filter_answer(self, raw: bytes) -> bytes:
        try:
            answer = loads(raw)
        except ValueError:
            return raw
        if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list):
            return raw
        pairs = answer_slots(answer)
        hits = self.scan("output", self.compiled.output, [s.text for _, s in pairs])
        if hits is None:  # not checked, and the policy fails closed: nothing of it goes out
            return dumps(_stop_choices(answer, {index for index, _ in self._choice_texts(answer)}))
        self.note_hits("output", hits)
        stopped: set[int] = {pairs[h.slot][0] for h in hits if h.action == "block"}
        for index, problem in self._answer_problems(answer):
            stopped.add(index)
        for index, text in self._choice_texts(answer):
            if index in stopped or not text:
                continue
            action, _, _ = await self.ask_judge("output", self._judge_messages(text))
            if action == "block":
                stopped.add(index)
        changed = False
        redactions: dict[int, list] = {}
        for h in hits:
            if h.action == "redact" and pairs[h.slot][0] not in stopped:
                redactions.setdefault(h.slot, []).append(h.finding)
        for slot, findings in redactions.items():
            answer = with_value(answer, pairs[slot][1].path, redact(pairs[slot][1].text, findings, self.numbering))
            self._count_redactions(findings)
            changed = True
        if stopped:
            answer = _stop_choices(answer, stopped)
            changed = True
        return dumps(answer) if changed else raw

    def _judge_messages(self, answer_text: str) -> list[dict[str, str]]:
        messages = [{"role": "user", "content": self.user_text}] if self.user_text else []
        return [*messages, {"role": "assistant", "content": answer_text}]

    @staticmethod
    def _choice_texts(answer: dict[str, Any]) -> list[tuple[int, str]]:
        out = []
        for c, choice in enumerate(answer.get("choices") or []):
            if not isinstance(choice, dict):
                continue
            message = choice.get("message")
            text = message.get("content") if isinstance(message, dict) else choice.get("text")
            out.append((choice.get("index", c), text if isinstance(text, str) else ""))
        return out

    def _answer_problems(self, answer: dict[str, Any]) -> list[tuple[int, str]]:
        """Choices whose tool calls or structure a policy refuses, recording them (and shadow ones)."""
        out = []
        for c, choice in enumerate(answer.get("choices") or []):
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", c)
            message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
            calls = [((call.get("function") or {}).get("name") or "", (call.get("function") or {}).get("arguments") or "")
                     for call in message.get("tool_calls") or [] if isinstance(call, dict)]
            text = message.get("content") if message else choice.get("text")
            problem = self.check_finished(calls, text if isinstance(text, str) else "", buffered=True)
            if problem:
                out.append((index, problem))
        return out

    def check_finished(self, calls: Sequence[tuple[str, str]], text: str, *, buffered: bool) -> str | None:
        """Check a whole turn's tool calls and structure; the label to stop it with, or None.

        Structure is enforced only where the answer was held (`buffered`);
        a streamed answer that has gone out is flagged instead.
        """
        stop = None
        for rules, shadow in self._rule_sets():
            if calls and rules.tools:
                problem = tool_call_problem(rules.tools, calls, self.declared)
                if problem:
                    self.note("output", "block", "tools", shadow=shadow)
                    if not shadow:
                        stop = stop or "tools"
            if rules.validate_structured and self.structured is not None and not calls and text:
                if structured_problem(text, self.structured):
                    action = "block" if buffered else "flag"
                    self.note("output", action, "structured", shadow=shadow)
                    if not shadow and action == "block":
                        stop = stop or "structured"
        return stop


def _stop_choices(answer: dict[str, Any], stopped: set[int]) -> dict[str, Any]:
    choices = []
    for c, choice in enumerate(answer["choices"]):
        if isinstance(choice, dict) and choice.get("index", c) in stopped:
            choice = {**choice, "finish_reason": "content_filter"}
            if isinstance(choice.get("message"), dict):
                message = {**choice["message"], "content": ""}
                message.pop("tool_calls", None)
                message.pop("function_call", None)
                choice["message"] = message
            if "text" in choice:
                choice["text"] = ""
        choices.append(choice)
    return {**answer, "choices": choices}
