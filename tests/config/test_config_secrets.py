"""Secrets: written as a value, env:NAME or file:/path, and never shown."""

import pytest

from llmgw.config.secrets import Secret


def test_a_literal_is_kept_and_hidden():
    secret = Secret.parse("sk-live-123")
    assert secret.reveal() == "sk-live-123"
    assert secret.origin == "literal"
    assert repr(secret) == "Secret('***')"
    assert str(secret) == "***"
    assert f"{secret}" == "***"
    assert "sk-live" not in repr({"key": secret})
    assert secret.written == "***"


def test_env_reads_the_variable():
    secret = Secret.parse("env:OPENAI_API_KEY", environ={"OPENAI_API_KEY": "sk-env"})
    assert secret.reveal() == "sk-env"
    assert secret.origin == "env:OPENAI_API_KEY"
    assert secret.written == "env:OPENAI_API_KEY"
    assert "sk-env" not in repr(secret)


def test_a_missing_variable_is_named():
    with pytest.raises(ValueError, match="environment variable OPENAI_API_KEY is not set"):
        Secret.parse("env:OPENAI_API_KEY", environ={})


def test_an_empty_variable_is_named():
    with pytest.raises(ValueError, match="OPENAI_API_KEY is set but empty"):
        Secret.parse("env:OPENAI_API_KEY", environ={"OPENAI_API_KEY": ""})


def test_env_without_a_name_says_how_to_write_one():
    with pytest.raises(ValueError, match="like env:OPENAI_API_KEY"):
        Secret.parse("env:", environ={})


def test_file_reads_the_file_without_its_trailing_newline(tmp_path):
    (tmp_path / "key").write_text("s3cret\n")
    secret = Secret.parse(f"file:{tmp_path / 'key'}")
    assert secret.reveal() == "s3cret"
    assert secret.origin == f"file:{tmp_path / 'key'}"


def test_a_relative_file_is_read_beside_the_configuration(tmp_path):
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "dsn").write_text("postgres://u:p@db/llmgw")
    secret = Secret.parse("file:secrets/dsn", base_dir=tmp_path)
    assert secret.reveal() == "postgres://u:p@db/llmgw"


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ValueError, match=f"secret file {tmp_path / 'nope'} does not exist"):
        Secret.parse("file:nope", base_dir=tmp_path)


def test_an_empty_file_is_refused(tmp_path):
    (tmp_path / "key").write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        Secret.parse(f"file:{tmp_path / 'key'}")


def test_an_empty_value_says_to_leave_the_key_out():
    with pytest.raises(ValueError, match="leave the key out"):
        Secret.parse("")


def test_secrets_compare_by_value_and_origin():
    assert Secret.parse("a") == Secret("a")
    assert Secret.parse("a") != Secret("b")
    assert Secret("a", "env:X") != Secret("a")
    assert hash(Secret("a")) == hash(Secret("a"))
