"""docs/reference.md is generated from the classes, and every key is documented."""

import typing
from pathlib import Path

import attrs
import pytest

from llmgw.config import AgentConfig, ServerConfig
from llmgw.config.fields import doc_of, yaml_key
from llmgw.config.reference import reference_markdown, type_name

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"


def every_field(cl, path=""):
    """(dotted key, field) for every key, sections and list items included."""
    for field in attrs.fields(cl):
        key = f"{path}.{yaml_key(field)}" if path else yaml_key(field)
        yield key, field
        suffix = "[]" if typing.get_origin(field.type) is list else ""
        for t in typing.get_args(field.type) or (field.type,):
            if attrs.has(t):
                yield from every_field(t, key + suffix)


def test_docs_reference_md_is_up_to_date():
    generated = reference_markdown()
    committed = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
    assert committed == generated, (
        "docs/reference.md differs from the configuration classes; "
        "run `llmgw config reference > docs/reference.md`"
    )


def test_the_reference_is_the_same_every_time():
    assert reference_markdown() == reference_markdown()


@pytest.mark.parametrize("cl", [ServerConfig, AgentConfig])
def test_every_key_has_a_sentence_for_the_operator(cl):
    undocumented = [key for key, field in every_field(cl) if not doc_of(field).strip().endswith(".")]
    assert undocumented == []


@pytest.mark.parametrize("cl", [ServerConfig, AgentConfig])
def test_every_key_is_in_the_reference(cl):
    text = reference_markdown()
    for key, _ in every_field(cl):
        assert f"`{key}`" in text, key


def test_the_reference_names_types_defaults_and_docs():
    text = reference_markdown()
    assert "| `router.timeouts.dial` | duration | `5s` | Longest wait to connect to an engine" in text
    assert "| `router.max_body_bytes` | size | `32MiB` |" in text
    assert "| `models[].endpoints[].api_key` | secret | `(none)` |" in text
    assert "| `models[].class` | one of critical, standard, opportunistic | `standard` |" in text
    assert "| `models[].name` | string | required |" in text
    assert "| `tls.cert` | string | `/etc/llmgw/tls/node.pem` |" in text


def test_type_names():
    from llmgw.config.units import Duration

    assert type_name(list[str]) == "list of strings"
    assert type_name(dict[str, str]) == "mapping of strings to strings"
    assert type_name(Duration | None) == "duration"
