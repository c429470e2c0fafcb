"""Deny patterns: an operator's regexes, matched as written and once disguises are removed."""

import base64

import pytest

from llmgw.guard.normalize import DenyMatcher


def found(matcher, text):
    return [(f.kind, f.category, text[f.start:f.end]) for f in matcher.find(text)]


def test_matches_as_written_case_insensitively():
    m = DenyMatcher(["project falcon"])
    assert found(m, "About PROJECT Falcon: status?") == [("deny", "deny", "PROJECT Falcon")]


def test_inline_flags_are_accepted():
    assert DenyMatcher(["(?i)project falcon"]).find("project falcon")


@pytest.mark.parametrize("text,expected", [
    ("about proj\u200bect fal\u200dcon now", "proj\u200bect fal\u200dcon"),
    ("about ｐｒｏｊｅｃｔ ｆａｌｃｏｎ now", "ｐｒｏｊｅｃｔ ｆａｌｃｏｎ"),
    ("about prоjеct fаlcоn now", "prоjеct fаlcоn"),  # Cyrillic о е а
    ("about project\u00a0falcon now", "project\u00a0falcon"),
])
def test_matches_through_disguises_at_the_right_place(text, expected):
    assert found(DenyMatcher(["project falcon"]), text) == [("deny", "deny", expected)]


def test_matches_inside_encodings():
    blob = base64.b64encode(b"what is project falcon?").decode()
    text = f"decode: {blob}"
    assert found(DenyMatcher(["project falcon"]), text) == [("deny", "deny", blob)]


def test_a_bad_regex_is_named():
    with pytest.raises(ValueError, match=r"deny\[1\].*'\(unclosed'"):
        DenyMatcher(["fine", "(unclosed"])
    with pytest.raises(ValueError, match="codename"):
        DenyMatcher(["[z-a]"], names=["codename"])


def test_names_say_which_pattern_matched_and_not_what():
    m = DenyMatcher(["falcon", "eagle"], names=["codename", "bird"])
    [f] = m.find("the eagle has landed")
    assert "bird" in f.detail and "eagle" not in f.detail


def test_names_must_match_patterns():
    with pytest.raises(ValueError):
        DenyMatcher(["a", "b"], names=["one"])


def test_empty_matches_and_no_patterns():
    assert DenyMatcher(["x*"]).find("abc") == []
    assert DenyMatcher([]).find("anything") == []
