"""Policies: how they are read, how several combine, which apply to whom."""

from __future__ import annotations

import pytest

from llmgw.auth.principal import ANONYMOUS, Principal
from llmgw.guard.policy import (
    Attachment,
    PolicyBook,
    PolicyError,
    Rules,
    StageRules,
    combine,
    parse_attachments,
    parse_policies,
    parse_policy,
)


def principal(**ids) -> Principal:
    base = dict(key_id="key-1", key_prefix="p", key_name="k", kind="service", org_id="org-1", team_id="team-1",
                project_id="prj-1", user_id=None, band=None, allowed_models=None)
    return Principal(**{**base, **ids})


def rules(**raw) -> Rules:
    return parse_policy("p", raw).rules


def test_the_reference_policy_reads_whole():
    p = parse_policy("finance", {
        "mode": "enforce", "fail": "closed", "no_store": True, "max_output_tokens": 2048,
        "system_prompt": "You answer questions about Acme's products only.", "drop_client_system": True,
        "stream": "buffer_all", "require_capabilities": True, "validate_structured": True,
        "input": {"pii": {"email": "redact", "phone": "redact", "iban": "block", "tckn": "redact"},
                  "injection": "block", "max_chars": 40000,
                  "deny": [{"name": "codename", "regex": "(?i)project falcon", "action": "block"}]},
        "output": {"pii": {"iban": "redact", "tckn": "redact", "secret": "block"}},
        "tools": {"allow": ["search", "fetch"], "deny": ["shell"], "on_denied": "strip",
                  "max_calls_per_turn": 4, "validate_arguments": True},
        "judge": {"models": ["qwen3guard-4b", "qwen3guard-0.6b"], "input": "block", "output": "flag",
                  "categories": ["Violent"], "controversial": "unsafe", "latency_budget": "5s"},
    })
    r = p.rules
    assert (r.fail, r.no_store, r.max_output_tokens, r.stream) == ("closed", True, 2048, "buffer_all")
    assert r.input.action_for("email", "pii") == "redact" and r.input.action_for("iban", "pii") == "block"
    assert r.input.action_for("prompt_injection", "injection") == "block"
    assert r.input.action_for("ip", "pii") == "" and r.input.max_chars == 40000
    assert r.input.deny[0].name == "codename"
    assert r.output.action_for("aws_access_key", "secret") == "block"
    assert r.tools.allowed("search") and not r.tools.allowed("shell") and not r.tools.allowed("other")
    assert r.judge.models == ("qwen3guard-4b", "qwen3guard-0.6b") and r.judge.latency_budget == 5.0
    assert r.judge.categories == frozenset({"Violent"})


def test_every_problem_is_named_by_its_path():
    with pytest.raises(PolicyError) as bad:
        parse_policy("f", {"mode": "strict", "inptu": {}, "input": {"pii": {"email": "blok"}, "max_chars": 0,
                                                                     "deny": [{"regex": "(("}]},
                           "tools": {"max_calls_per_turn": "four"}, "judge": {"input": "block"}})
    text = str(bad.value)
    for expected in ("guard.policies.f.inptu: unknown key (did you mean 'input'?)",
                     "guard.policies.f.mode: expected one of enforce, shadow, off, got 'strict'",
                     "guard.policies.f.input.pii.email: expected one of flag, redact, block, got 'blok'",
                     "guard.policies.f.input.max_chars: expected a whole number of 1 or more",
                     "guard.policies.f.input.deny[0].regex: the regex '((' does not compile",
                     "guard.policies.f.tools.max_calls_per_turn:",
                     "guard.policies.f.judge: name the judge"):
        assert expected in text


def test_stricter_action_wins_block_over_redact_over_flag():
    a = rules(input={"pii": {"email": "flag", "card": "block"}, "injection": "flag"})
    b = rules(input={"pii": {"email": "redact", "card": "flag"}, "injection": "block"})
    both = a.narrow(b)
    assert both.input.action_for("email", "pii") == "redact"
    assert both.input.action_for("card", "pii") == "block"
    assert both.input.action_for("template_token", "injection") == "block"
    assert b.narrow(a) == both


def test_a_kind_and_its_category_the_stricter_counts():
    r = rules(input={"pii": {"email": "redact", "pii": "flag"}})
    assert r.input.action_for("email", "pii") == "redact" and r.input.action_for("phone", "pii") == "flag"
    r = rules(input={"pii": "block", "secrets": "flag"})
    assert r.input.action_for("email", "pii") == "block" and r.input.action_for("jwt", "secret") == "flag"


def test_limits_take_the_smallest_lists_union_or_intersect_flags_any():
    a = rules(max_output_tokens=2048, input={"max_chars": 1000, "deny": ["alpha"]},
              tools={"allow": ["search", "fetch"], "deny": ["shell"], "max_calls_per_turn": 4},
              system_prompt="first", judge={"models": ["j1"], "input": "flag", "latency_budget": "2s"})
    b = rules(max_output_tokens=512, fail="closed", no_store=True, stream="buffer_all",
              input={"max_chars": 5000, "deny": ["beta"]},
              tools={"allow": ["fetch", "mail"], "deny": ["rm"], "on_denied": "block", "max_calls_per_turn": 2},
              system_prompt="second", judge={"models": ["j2", "j1"], "input": "block", "output": "flag",
                                              "latency_budget": "250ms"})
    c = combine([a, b])
    assert (c.max_output_tokens, c.input.max_chars, c.fail, c.no_store, c.stream) == (512, 1000, "closed", True,
                                                                                        "buffer_all")
    assert [d.regex for d in c.input.deny] == ["alpha", "beta"]
    assert c.tools.allow == frozenset({"fetch"}) and c.tools.deny == frozenset({"shell", "rm"})
    assert (c.tools.on_denied, c.tools.max_calls_per_turn) == ("block", 2)
    assert c.system_prompts == ("first", "second")
    assert c.judge.models == ("j1", "j2") and (c.judge.input, c.judge.output) == ("block", "flag")
    assert c.judge.latency_budget == 0.25
    assert combine([a]) == a and combine([]) == Rules()


def test_an_allow_list_intersects_only_with_other_allow_lists():
    a = rules(tools={"deny": ["shell"]})
    b = rules(tools={"allow": ["search"]})
    assert a.narrow(b).tools.allow == frozenset({"search"})
    assert a.narrow(b).tools.deny == frozenset({"shell"})


def test_judge_categories_any_when_either_counts_any():
    a = rules(judge={"models": ["j"], "input": "block", "categories": ["Violent"]})
    b = rules(judge={"models": ["j"], "input": "flag"})
    c = rules(judge={"models": ["j"], "input": "flag", "categories": ["Jailbreak"], "controversial": "unsafe"})
    assert a.narrow(b).judge.categories is None
    assert a.narrow(c).judge.categories == frozenset({"Violent", "Jailbreak"})
    assert a.narrow(c).judge.controversial == "unsafe"


def book(policies: dict, default=(), attachments=(), **kw) -> PolicyBook:
    return PolicyBook(parse_policies(policies), default, attachments, **kw)


def test_shadow_only_when_every_policy_taking_part_is_in_shadow():
    policies = {"watch": {"mode": "shadow", "input": {"pii": "block"}},
                "tight": {"input": {"pii": {"card": "redact"}}},
                "gone": {"mode": "off", "input": {"injection": "block"}}}
    only_shadow = book(policies, ["watch"]).effective(ANONYMOUS)
    assert only_shadow.mode == "shadow" and only_shadow.enforced == Rules()
    assert only_shadow.would.input.action_for("email", "pii") == "block"
    mixed = book(policies, ["watch", "tight", "gone"]).effective(ANONYMOUS)
    assert mixed.mode == "enforce" and mixed.names == ("watch", "tight")
    assert mixed.enforced.input.action_for("card", "pii") == "redact"
    assert mixed.enforced.input.action_for("email", "pii") == ""  # the shadow policy is not enforced
    assert mixed.would.input.action_for("card", "pii") == "block"
    assert mixed.has_shadow
    assert book(policies, ["gone"]).effective(ANONYMOUS) is None


def test_a_shadow_default_does_not_put_an_attached_policy_of_unwritten_mode_in_shadow():
    policies = {"observe": {"mode": "shadow", "input": {"pii": "flag"}}, "strict": {"input": {"pii": "block"}}}
    b = book(policies, ["observe"], [Attachment("project", "prj-1", "strict")])
    eff = b.effective(principal())
    assert eff.mode == "enforce" and eff.enforced.input.action_for("email", "pii") == "block"


def test_guard_mode_shadow_in_server_yaml_puts_everything_in_shadow_and_off_checks_nothing():
    policies = {"strict": {"input": {"pii": "block"}}}
    assert book(policies, ["strict"], mode="shadow").effective(ANONYMOUS).mode == "shadow"
    assert book(policies, ["strict"], mode="off").effective(ANONYMOUS) is None
    assert book(policies, ["strict"], enabled=False).effective(ANONYMOUS) is None


def test_attachments_apply_below_their_scope_widest_first():
    policies = {name: {"input": {"pii": "flag"}} for name in ("o", "t", "p", "k", "elsewhere")}
    attachments = [Attachment("key", "key-1", "k"), Attachment("project", "prj-1", "p"),
                   Attachment("org", "org-1", "o"), Attachment("team", "team-1", "t"),
                   Attachment("project", "prj-2", "elsewhere"), Attachment("org", "org-1", "unknown-policy")]
    b = book(policies, ["baseline"], attachments)
    assert b.names_for(principal()) == ("baseline", "o", "t", "p", "k")
    assert b.names_for(principal(project_id="prj-2", key_id="key-9")) == ("baseline", "o", "t", "elsewhere")
    assert b.names_for(ANONYMOUS) == ("baseline",)
    assert b.effective(principal()) is b.effective(principal())  # cached per combination
    assert book(policies, (), attachments).effective(principal(org_id="x", team_id="y", project_id="z",
                                                               key_id="w")) is None


def test_the_baseline_is_built_in_and_a_definition_replaces_it():
    assert "baseline" in parse_policies({})
    assert parse_policies({"baseline": {"input": {"pii": "flag"}}})["baseline"].rules.input.actions == {"pii": "flag"}


def test_attachments_read_from_the_setting_skip_what_is_malformed():
    value = [{"scope": "project", "id": "prj-1", "policy": "p"}, {"scope": "planet", "id": "x", "policy": "p"},
             "junk", {"scope": "key"}]
    assert parse_attachments(value) == [Attachment("project", "prj-1", "p")]
    assert parse_attachments(None) == []


def test_stage_rules_are_false_when_empty():
    assert not StageRules() and StageRules({"pii": "flag"})
