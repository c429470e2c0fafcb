"""Guard policies: what one says, how several combine, and which apply to a request.

A policy is written in server.yaml under `guard.policies` (see
docs/guardrails.md). `parse_policy` reads one into a `Policy`, every problem
named by its path (`guard.policies.finance.input.pii.email: expected flag,
redact or block, got 'blok'`).

Several policies apply to one request: `guard.default`, then those attached
to the key's organization, team, project, person and the key itself, widest
first. They combine by narrowing, as limits do (`Rules.narrow`): the
stricter of two actions, the smaller of two limits, deny lists unioned,
allow lists intersected, a flag any of them sets. A policy in `mode: off`
takes no part; one in `mode: shadow` is evaluated but not enforced
(`Effective.would` against `Effective.enforced`).

`PolicyBook` holds the parsed policies and the attachments and answers
`effective(principal)`, cached per combination of policies, so the serving
path does dictionary look-ups only.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

__all__ = [
    "ACTIONS",
    "ATTACH_SETTING",
    "BUILTIN_POLICIES",
    "ENABLED_SETTING",
    "RANK",
    "SCOPE_KINDS",
    "Attachment",
    "DenyRule",
    "Effective",
    "JudgeRules",
    "Policy",
    "PolicyBook",
    "PolicyError",
    "Rules",
    "StageRules",
    "ToolRules",
    "combine",
    "parse_attachments",
    "parse_policies",
    "parse_policy",
    "policy_problems",
    "stricter",
]

#: What a policy does with a finding, weakest first.
ACTIONS = ("flag", "redact", "block")
RANK = {"": 0, "flag": 1, "redact": 2, "block": 3}
MODES = ("enforce", "shadow", "off")
FAILS = ("open", "closed")
STREAMS = ("sentence", "buffer_all")
ON_DENIED = ("strip", "block")
JUDGE_ACTIONS = ("flag", "block")
CONTROVERSIAL = ("safe", "unsafe")
#: A section of `input:`/`output:` and the category a bare action in it covers.
SECTIONS = {"pii": "pii", "secrets": "secret", "injection": "injection"}
#: Where a policy may be attached, widest first.
SCOPE_KINDS = ("org", "team", "project", "user", "key")
#: The store settings that hold attachments, and the switch of `llmgw ctl guard on|off`.
ATTACH_SETTING = "guard.attach"
ENABLED_SETTING = "guard.enabled"

#: Policies llmgw knows without a definition in `guard.policies` (a definition replaces it).
BUILTIN_POLICIES: dict[str, dict[str, Any]] = {
    "baseline": {
        "input": {"pii": {"secret": "block", "card": "redact"}, "injection": "flag"},
        "output": {"pii": {"secret": "block"}},
    },
}

_TOP_KEYS = (
    "mode", "fail", "no_store", "max_output_tokens", "system_prompt", "drop_client_system", "stream",
    "require_capabilities", "validate_structured", "input", "output", "tools", "judge",
)
_STAGE_KEYS = ("pii", "secrets", "injection", "max_chars", "deny")
_TOOL_KEYS = ("allow", "deny", "on_denied", "max_calls_per_turn", "validate_arguments")
_JUDGE_KEYS = ("models", "model", "input", "output", "categories", "controversial", "latency_budget")
_SELECTOR = re.compile(r"[a-z][a-z0-9_]*")
#: Each judge's wait when a policy gives none.
DEFAULT_LATENCY_BUDGET = 0.25

Path = tuple[Any, ...]


class PolicyError(ValueError):
    """A policy that cannot be used; `problems` are (path, message) pairs."""

    def __init__(self, problems: Sequence[tuple[Path, str]]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(f"{_dotted(p)}: {m}" for p, m in self.problems))


def _dotted(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# ---------------------------------------------------------------- the rules


@attrs.frozen
class DenyRule:
    """An operator's pattern: matched as written and with disguises removed."""

    name: str
    regex: str
    action: str = "block"


@attrs.frozen
class StageRules:
    """What is done with what is found in one direction (input or output)."""

    #: a kind (`email`) or a category (`pii`, `secret`, `injection`) -> action
    actions: Mapping[str, str] = attrs.field(factory=dict, converter=lambda m: dict(sorted(m.items())), hash=False)
    deny: tuple[DenyRule, ...] = ()
    max_chars: int | None = None

    def action_for(self, kind: str, category: str) -> str:
        """The stricter of what the kind and its category are given; "" when neither is."""
        a, b = self.actions.get(kind, ""), self.actions.get(category, "")
        return a if RANK[a] >= RANK[b] else b

    def __bool__(self) -> bool:
        return bool(self.actions or self.deny or self.max_chars is not None)

    def narrow(self, other: StageRules) -> StageRules:
        actions = dict(self.actions)
        for selector, action in other.actions.items():
            actions[selector] = stricter(actions.get(selector, ""), action)
        deny = tuple(dict.fromkeys((*self.deny, *other.deny)))
        return StageRules(actions, deny, _min(self.max_chars, other.max_chars))


@attrs.frozen
class ToolRules:
    """Which tools a request may offer, and what a model's calls must respect."""

    allow: frozenset[str] | None = None  #: None: any tool not denied
    deny: frozenset[str] = frozenset()
    on_denied: str = "strip"
    max_calls_per_turn: int | None = None
    validate_arguments: bool = False

    def allowed(self, name: str) -> bool:
        return name not in self.deny and (self.allow is None or name in self.allow)

    def __bool__(self) -> bool:
        return self != ToolRules()

    def narrow(self, other: ToolRules) -> ToolRules:
        if self.allow is None or other.allow is None:
            allow = self.allow if other.allow is None else other.allow
        else:
            allow = self.allow & other.allow
        on_denied = "block" if "block" in (self.on_denied, other.on_denied) else "strip"
        return ToolRules(allow, self.deny | other.deny, on_denied,
                         _min(self.max_calls_per_turn, other.max_calls_per_turn),
                         self.validate_arguments or other.validate_arguments)


@attrs.frozen
class JudgeRules:
    """Which judge models read the text, and what their verdict does."""

    models: tuple[str, ...] = ()  #: asked in turn; the first to answer gives the verdict
    input: str = ""  #: flag or block; "": input is not judged
    output: str = ""
    categories: frozenset[str] | None = None  #: only these count; None: any unsafe verdict
    controversial: str = "safe"
    latency_budget: float = DEFAULT_LATENCY_BUDGET  #: seconds each judge is waited for

    def __bool__(self) -> bool:
        return bool(self.models and (self.input or self.output))

    def narrow(self, other: JudgeRules) -> JudgeRules:
        if not other.models:
            return self
        if not self.models:
            return other
        if self.categories is None or other.categories is None:
            categories = None
        else:
            categories = self.categories | other.categories
        return JudgeRules(
            tuple(dict.fromkeys((*self.models, *other.models))),
            stricter(self.input, other.input), stricter(self.output, other.output), categories,
            "unsafe" if "unsafe" in (self.controversial, other.controversial) else "safe",
            min(self.latency_budget, other.latency_budget),
        )


@attrs.frozen
class Rules:
    """Everything a policy, or several combined, asks; the empty Rules ask nothing."""

    fail: str = "open"
    no_store: bool = False
    max_output_tokens: int | None = None
    system_prompts: tuple[str, ...] = ()  #: pinned prompts, widest policy first
    drop_client_system: bool = False
    stream: str = "sentence"
    require_capabilities: bool = False
    validate_structured: bool = False
    input: StageRules = StageRules()
    output: StageRules = StageRules()
    tools: ToolRules = ToolRules()
    judge: JudgeRules = JudgeRules()

    def narrow(self, other: Rules) -> Rules:
        """Both together: the stricter of each (see the module's doc)."""
        return Rules(
            fail="closed" if "closed" in (self.fail, other.fail) else "open",
            no_store=self.no_store or other.no_store,
            max_output_tokens=_min(self.max_output_tokens, other.max_output_tokens),
            system_prompts=tuple(dict.fromkeys((*self.system_prompts, *other.system_prompts))),
            drop_client_system=self.drop_client_system or other.drop_client_system,
            stream="buffer_all" if "buffer_all" in (self.stream, other.stream) else "sentence",
            require_capabilities=self.require_capabilities or other.require_capabilities,
            validate_structured=self.validate_structured or other.validate_structured,
            input=self.input.narrow(other.input),
            output=self.output.narrow(other.output),
            tools=self.tools.narrow(other.tools),
            judge=self.judge.narrow(other.judge),
        )


def stricter(a: str, b: str) -> str:
    """The stricter of two actions ("" is none)."""
    return a if RANK.get(a, 0) >= RANK.get(b, 0) else b


def _min(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


@attrs.frozen
class Policy:
    name: str
    mode: str = "enforce"
    rules: Rules = Rules()
    builtin: bool = False  #: one llmgw knows without a definition (baseline)


def combine(rules: Iterable[Rules]) -> Rules:
    out = Rules()
    for r in rules:
        out = out.narrow(r)
    return out


@attrs.frozen
class Effective:
    """The policies in force for one request, combined."""

    names: tuple[str, ...]  #: every policy taking part, widest first
    mode: str  #: "enforce", or "shadow" when every policy taking part is in shadow
    enforced: Rules  #: what is done
    would: Rules  #: what would be done were the shadow policies enforced too

    @property
    def label(self) -> str:
        """The policies as one string, for headers, records and metrics."""
        return ",".join(self.names)

    @property
    def has_shadow(self) -> bool:
        return self.would is not self.enforced


# ---------------------------------------------------------------- reading a policy


class _Reader:
    """Collects problems while reading one policy."""

    def __init__(self) -> None:
        self.problems: list[tuple[Path, str]] = []

    def bad(self, path: Path, message: str) -> None:
        self.problems.append((path, message))

    def mapping(self, path: Path, value: Any, keys: Sequence[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.bad(path, "expected a mapping")
            return {}
        out = {}
        for key, item in value.items():
            if key not in keys:
                close = difflib.get_close_matches(str(key), list(keys), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                self.bad((*path, str(key)), f"unknown key{hint}")
            else:
                out[key] = item
        return out

    def choice(self, path: Path, value: Any, choices: Sequence[str], default: str) -> str:
        if value is None:
            return default
        if value not in choices:
            self.bad(path, f"expected one of {', '.join(choices)}, got {value!r}")
            return default
        return value

    def flag(self, path: Path, value: Any) -> bool:
        if value is None:
            return False
        if not isinstance(value, bool):
            self.bad(path, f"expected true or false, got {value!r}")
            return False
        return value

    def count(self, path: Path, value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.bad(path, f"expected a whole number of 1 or more, got {value!r}")
            return None
        return value

    def names(self, path: Path, value: Any) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.bad(path, f"expected a list of names, got {value!r}")
            return []
        return list(value)


def parse_policy(name: str, raw: Any, *, path: Path | None = None) -> Policy:
    """Read one policy as server.yaml writes it; PolicyError lists every problem."""
    path = path if path is not None else ("guard", "policies", name)
    r = _Reader()
    if not isinstance(raw, dict):
        r.bad(path, "expected a mapping of the policy's keys (input, output, tools, judge, ...)")
        raise PolicyError(r.problems)
    top = r.mapping(path, raw, _TOP_KEYS)
    mode = r.choice((*path, "mode"), top.get("mode"), MODES, "enforce")
    prompt = top.get("system_prompt")
    if prompt is not None and not isinstance(prompt, str):
        r.bad((*path, "system_prompt"), f"expected text, got {prompt!r}")
        prompt = None
    rules = Rules(
        fail=r.choice((*path, "fail"), top.get("fail"), FAILS, "open"),
        no_store=r.flag((*path, "no_store"), top.get("no_store")),
        max_output_tokens=r.count((*path, "max_output_tokens"), top.get("max_output_tokens")),
        system_prompts=(prompt,) if prompt else (),
        drop_client_system=r.flag((*path, "drop_client_system"), top.get("drop_client_system")),
        stream=r.choice((*path, "stream"), top.get("stream"), STREAMS, "sentence"),
        require_capabilities=r.flag((*path, "require_capabilities"), top.get("require_capabilities")),
        validate_structured=r.flag((*path, "validate_structured"), top.get("validate_structured")),
        input=_stage(r, (*path, "input"), top.get("input")),
        output=_stage(r, (*path, "output"), top.get("output")),
        tools=_tools(r, (*path, "tools"), top.get("tools")),
        judge=_judge(r, (*path, "judge"), top.get("judge")),
    )
    if r.problems:
        raise PolicyError(r.problems)
    return Policy(name, mode, rules)


def _stage(r: _Reader, path: Path, raw: Any) -> StageRules:
    if raw is None:
        return StageRules()
    stage = r.mapping(path, raw, _STAGE_KEYS)
    actions: dict[str, str] = {}
    for section, category in SECTIONS.items():
        value = stage.get(section)
        where = (*path, section)
        if value is None:
            continue
        if isinstance(value, str):
            actions[category] = stricter(actions.get(category, ""), r.choice(where, value, ACTIONS, ""))
        elif isinstance(value, dict):
            for selector, action in value.items():
                if not isinstance(selector, str) or not _SELECTOR.fullmatch(selector):
                    r.bad((*where, str(selector)), "expected a kind like email or a category like secret")
                    continue
                got = r.choice((*where, selector), action, ACTIONS, "")
                actions[selector] = stricter(actions.get(selector, ""), got)
        else:
            r.bad(where, f"expected flag, redact or block, or a mapping of kinds to them, got {value!r}")
    deny = []
    raw_deny = stage.get("deny")
    if raw_deny is not None and not isinstance(raw_deny, list):
        r.bad((*path, "deny"), "expected a list of {name, regex, action}")
        raw_deny = []
    for i, item in enumerate(raw_deny or []):
        where = (*path, "deny", i)
        if isinstance(item, str):
            item = {"regex": item}
        rule = r.mapping(where, item, ("name", "regex", "action"))
        regex = rule.get("regex")
        if not isinstance(regex, str) or not regex:
            r.bad((*where, "regex"), "expected a regular expression")
            continue
        try:
            re.compile(regex)
        except re.error as exc:
            r.bad((*where, "regex"), f"the regex {regex!r} does not compile: {exc}; fix or remove it")
            continue
        name = rule.get("name") or f"deny[{i}]"
        deny.append(DenyRule(str(name), regex, r.choice((*where, "action"), rule.get("action"), ACTIONS, "block")))
    return StageRules(actions, tuple(deny), r.count((*path, "max_chars"), stage.get("max_chars")))


def _tools(r: _Reader, path: Path, raw: Any) -> ToolRules:
    if raw is None:
        return ToolRules()
    tools = r.mapping(path, raw, _TOOL_KEYS)
    allow = tools.get("allow")
    return ToolRules(
        allow=frozenset(r.names((*path, "allow"), allow)) if allow is not None else None,
        deny=frozenset(r.names((*path, "deny"), tools.get("deny"))),
        on_denied=r.choice((*path, "on_denied"), tools.get("on_denied"), ON_DENIED, "strip"),
        max_calls_per_turn=r.count((*path, "max_calls_per_turn"), tools.get("max_calls_per_turn")),
        validate_arguments=r.flag((*path, "validate_arguments"), tools.get("validate_arguments")),
    )


def _judge(r: _Reader, path: Path, raw: Any) -> JudgeRules:
    if raw is None:
        return JudgeRules()
    judge = r.mapping(path, raw, _JUDGE_KEYS)
    models = r.names((*path, "models"), judge.get("models"))
    if "model" in judge:
        models = [*r.names((*path, "model"), judge.get("model")), *models]
    if not models:
        r.bad(path, "name the judge in models: [NAME, ...] (or model: NAME)")
    cats = judge.get("categories")
    budget = DEFAULT_LATENCY_BUDGET
    if judge.get("latency_budget") is not None:
        from llmgw.config.units import Duration

        try:
            budget = Duration.parse(judge["latency_budget"]).total_seconds()
            if budget <= 0:
                raise ValueError("expected a duration above 0")
        except ValueError as exc:
            r.bad((*path, "latency_budget"), str(exc))
            budget = DEFAULT_LATENCY_BUDGET
    return JudgeRules(
        models=tuple(dict.fromkeys(models)),
        input=r.choice((*path, "input"), judge.get("input") or None, JUDGE_ACTIONS, ""),
        output=r.choice((*path, "output"), judge.get("output") or None, JUDGE_ACTIONS, ""),
        categories=frozenset(r.names((*path, "categories"), cats)) if cats else None,
        controversial=r.choice((*path, "controversial"), judge.get("controversial"), CONTROVERSIAL, "safe"),
        latency_budget=budget,
    )


def parse_policies(defined: Mapping[str, Any]) -> dict[str, Policy]:
    """Every policy server.yaml defines, and the built-in ones it does not replace."""
    problems: list[tuple[Path, str]] = []
    out: dict[str, Policy] = {}
    for name, raw in BUILTIN_POLICIES.items():
        if name not in defined:
            out[name] = attrs.evolve(parse_policy(name, raw), builtin=True)
    for name, raw in defined.items():
        try:
            out[name] = parse_policy(name, raw)
        except PolicyError as exc:
            problems += exc.problems
    if problems:
        raise PolicyError(problems)
    return out


def policy_problems(name: str, raw: Any) -> list[tuple[Path, str]]:
    """What is wrong with one policy, for `llmgw config check`; empty when nothing is."""
    try:
        parse_policy(name, raw)
    except PolicyError as exc:
        return exc.problems
    return []


# ---------------------------------------------------------------- attachments and the book


@attrs.frozen
class Attachment:
    """A policy attached to a scope of the tenancy tree (org, team, project, user) or a key."""

    scope: str  #: one of SCOPE_KINDS
    scope_id: str
    policy: str

    def as_setting(self) -> dict[str, str]:
        return {"scope": self.scope, "id": self.scope_id, "policy": self.policy}


def parse_attachments(value: Any) -> list[Attachment]:
    """The attachments kept in the `guard.attach` setting; malformed items are skipped."""
    out = []
    for item in value if isinstance(value, list) else []:
        if not isinstance(item, dict):
            continue
        scope, scope_id, policy = item.get("scope"), item.get("id"), item.get("policy")
        if scope in SCOPE_KINDS and isinstance(scope_id, str) and isinstance(policy, str):
            out.append(Attachment(scope, scope_id, policy))
    return out


class PolicyBook:
    """The policies, where they are attached, and what applies to whom.

    `effective(principal)` is cached per combination of policy names; a new
    book is built (`with_attachments`) when the attachments change.
    """

    def __init__(self, policies: Mapping[str, Policy], default: Sequence[str] = (),
                 attachments: Iterable[Attachment] = (), *, mode: str = "enforce", enabled: bool = True) -> None:
        self.policies = dict(policies)
        self.default = tuple(n for n in default if n in self.policies)
        self.attachments = list(attachments)
        self.mode = mode  #: guard.mode in server.yaml: enforce, shadow (everything recorded only) or off
        self.enabled = enabled  #: guard.enabled in the store (`llmgw ctl guard on|off`)
        self._by_scope: dict[tuple[str, str], list[str]] = {}
        for a in self.attachments:
            if a.policy in self.policies:
                names = self._by_scope.setdefault((a.scope, a.scope_id), [])
                if a.policy not in names:
                    names.append(a.policy)
        self._cache: dict[tuple[str, ...], Effective | None] = {}

    @classmethod
    def from_config(cls, guard: Any, attachments: Iterable[Attachment] = (), *, enabled: bool = True) -> PolicyBook:
        """From server.yaml's `guard:` section (GuardConfig); PolicyError when a policy is wrong."""
        return cls(parse_policies(guard.policies), guard.default, attachments, mode=guard.mode, enabled=enabled)

    def with_attachments(self, attachments: Iterable[Attachment], *, enabled: bool = True) -> PolicyBook:
        return PolicyBook(self.policies, self.default, attachments, mode=self.mode, enabled=enabled)

    def with_mode(self, mode: str) -> PolicyBook:
        """The same book in another guard.mode (a cluster setting changed while the server runs)."""
        return PolicyBook(self.policies, self.default, self.attachments, mode=mode, enabled=self.enabled)

    @property
    def active(self) -> bool:
        """False when nothing can be checked: guard off, or no policy applies anywhere."""
        return self.enabled and self.mode != "off" and bool(self.default or self._by_scope)

    def names_for(self, principal: Any) -> tuple[str, ...]:
        """The policies applying to a principal, widest first, each once."""
        names = list(self.default)
        if self._by_scope:
            for scope, attr in (("org", "org_id"), ("team", "team_id"), ("project", "project_id"),
                                ("user", "user_id"), ("key", "key_id")):
                scope_id = getattr(principal, attr, None)
                if scope_id:
                    names.extend(self._by_scope.get((scope, scope_id), ()))
        return tuple(dict.fromkeys(names))

    def effective(self, principal: Any) -> Effective | None:
        """What applies to a request of `principal`; None when nothing is to be checked."""
        if not self.active:
            return None
        names = self.names_for(principal)
        try:
            return self._cache[names]
        except KeyError:
            pass
        found = self._cache[names] = self.resolve(names)
        return found

    def resolve(self, names: Sequence[str]) -> Effective | None:
        taking_part = [self.policies[n] for n in names if n in self.policies and self.policies[n].mode != "off"]
        if not taking_part or self.mode == "off":
            return None
        enforcing = [p for p in taking_part if p.mode == "enforce"] if self.mode == "enforce" else []
        enforced = combine(p.rules for p in enforcing)
        would = enforced if len(enforcing) == len(taking_part) else combine(p.rules for p in taking_part)
        return Effective(tuple(p.name for p in taking_part), "enforce" if enforcing else "shadow", enforced, would)

    def attached_to(self, scope: str, scope_id: str) -> list[str]:
        return list(self._by_scope.get((scope, scope_id), ()))
