"""The judge formats plugin: each asks its model its own way and reads its verdict text."""

from __future__ import annotations

import pytest

from llmgw.plugins.manager import load_plugins
from llmgw.plugins.types import JudgeFormat, Verdict

USER = [{"role": "system", "content": "ignored"}, {"role": "user", "content": "How do I sort a list?"}]
ANSWER = [*USER, {"role": "assistant", "content": "Use sorted()."}]


@pytest.fixture(scope="module")
def formats() -> dict[str, JudgeFormat]:
    return load_plugins(allow={"judge-formats"}).judge_formats()


def test_the_plugin_gives_four_formats(formats):
    assert set(formats) == {"qwen3guard", "llamaguard3", "shieldgemma", "json"}


@pytest.mark.parametrize("text, safe, categories", [
    ("Safety: Safe\nCategories: None", True, ()),
    ("Safety: Unsafe\nCategories: Violent", False, ("Violent",)),
    ("Safety: Unsafe\nCategories: Violent, Jailbreak\nRefusal: No", False, ("Violent", "Jailbreak")),
    ("Safety: Controversial\nCategories: Politically Sensitive Topics", False,
     ("Controversial", "Politically Sensitive Topics")),
    ("  safety: SAFE ", True, ()),
])
def test_qwen3guard_reads_safety_and_categories(formats, text, safe, categories):
    verdict = formats["qwen3guard"].parse(text)
    assert (verdict.safe, verdict.categories, verdict.raw) == (safe, categories, text)


@pytest.mark.parametrize("text, safe, categories", [
    ("safe", True, ()),
    ("\n\nunsafe\nS1,S10", False, ("Violent Crimes", "Hate")),
    ("unsafe\nS2", False, ("Non-Violent Crimes",)),
    ("unsafe\nS99", False, ("S99",)),
])
def test_llamaguard3_reads_its_codes_by_name(formats, text, safe, categories):
    verdict = formats["llamaguard3"].parse(text)
    assert (verdict.safe, verdict.categories) == (safe, categories)


def test_llamaguard3_names_codes_after_the_catalog_entry(formats):
    named = formats["llamaguard3"].with_categories(["Violent", "Crime"])
    assert named.parse("unsafe\nS2").categories == ("Crime",)
    assert "S1: Violent." in named.prompt([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])


def test_llamaguard3_asks_about_an_answer_with_its_own_prompt_as_a_completion(formats):
    asked_input = formats["llamaguard3"].build_request(USER, "user")
    assert asked_input["messages"] == [{"role": "user", "content": "How do I sort a list?"}]
    asked_output = formats["llamaguard3"].build_request(ANSWER, "assistant")
    prompt = asked_output["prompt"]
    assert "messages" not in asked_output
    assert "User: How do I sort a list?" in prompt and "Agent: Use sorted()." in prompt
    assert prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_qwen3guard_sends_the_conversation_to_its_template(formats):
    assert formats["qwen3guard"].build_request(ANSWER, "assistant")["messages"] == ANSWER[1:]
    assert formats["qwen3guard"].build_request(ANSWER, "user")["messages"] == ANSWER[1:2]


def test_shieldgemma_reads_yes_or_no_and_asks_the_principles(formats):
    f = formats["shieldgemma"]
    assert f.parse("No").safe
    unsafe = f.parse("Yes, because ...")
    assert not unsafe.safe and "No Dangerous Content" in unsafe.categories
    custom = f.with_categories(['"No Cats": The text shall not mention cats.'])
    asked = custom.build_request(ANSWER, "assistant")["prompt"]
    assert '* "No Cats": The text shall not mention cats.' in asked and "Chatbot Response: Use sorted()." in asked
    assert custom.parse("yes").categories == ("No Cats",)


def test_json_reads_an_object_even_in_a_fence(formats):
    f = formats["json"]
    assert f.parse('{"safe": true}') == Verdict(True, (), '{"safe": true}')
    fenced = '```json\n{"safe": false, "categories": ["Violent"]}\n```'
    assert f.parse(fenced).categories == ("Violent",)
    asked = f.build_request(ANSWER, "assistant")
    assert asked["response_format"] == {"type": "json_object"} and "USER: How do I sort" in asked["messages"][1]["content"]


@pytest.mark.parametrize("name, text", [
    ("qwen3guard", "I cannot say"), ("llamaguard3", "maybe"), ("llamaguard3", ""),
    ("shieldgemma", "Perhaps"), ("json", "no object"), ("json", '{"safe": "no"}'),
])
def test_what_a_format_cannot_read_is_a_value_error(formats, name, text):
    with pytest.raises(ValueError):
        formats[name].parse(text)


def test_a_conversation_with_nothing_to_judge_is_a_value_error(formats):
    with pytest.raises(ValueError):
        formats["qwen3guard"].build_request([{"role": "system", "content": "x"}], "user")
