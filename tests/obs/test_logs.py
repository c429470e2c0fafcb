"""Log lines: key=value or JSON, and never a prompt, key or password."""

import io
import json
import logging

from llmgw.obs import logs


def _capture(fmt):
    stream = io.StringIO()
    logs.setup(level="debug", fmt=fmt, stream=stream)
    return stream


def test_logfmt_line_has_level_message_and_fields():
    stream = _capture("text")
    logs.event(logging.getLogger("llmgw.test"), "replica ready", model="qwen", port=8001)
    line = stream.getvalue().strip()
    assert "level=info" in line
    assert 'msg="replica ready"' in line
    assert "model=qwen" in line and "port=8001" in line


def test_json_lines_parse():
    stream = _capture("json")
    logs.event(logging.getLogger("llmgw.test"), "request", status=200, latency_ms=12)
    obj = json.loads(stream.getvalue())
    assert obj["msg"] == "request" and obj["status"] == 200 and obj["level"] == "info"


def test_secrets_and_words_are_never_written():
    stream = _capture("json")
    log = logging.getLogger("llmgw.test")
    logs.event(
        log, "request",
        prompt="my secret plan", api_key="sk-abcdefghijklmnopqrstu", password="hunter2",
        messages=[{"role": "user", "content": "hello"}], authorization="Bearer xyz",
        key_id="k_123", prompt_tokens=12,
    )
    text = stream.getvalue()
    for secret in ("my secret plan", "abcdefghijklmnop", "hunter2", "hello", "Bearer xyz"):
        assert secret not in text
    obj = json.loads(text)
    assert obj["key_id"] == "k_123" and obj["prompt_tokens"] == 12


def test_key_shaped_strings_in_messages_are_masked():
    stream = _capture("text")
    logging.getLogger("llmgw.test").warning("bad key llmgw-AbCdEfGhIjKlMnOpQrStUv given")
    assert "AbCdEfGhIjKlMnOp" not in stream.getvalue()
    assert "llmgw-[redacted]" in stream.getvalue()


def test_replica_ids_stay_readable_while_every_kind_of_key_is_masked():
    from llmgw.auth.keys import new_secret
    from llmgw.obs.logs import redact_text

    assert redact_text("shard llmgw-sim-79d009b7: ready") == "shard llmgw-sim-79d009b7: ready"
    for _ in range(50):
        key = new_secret()
        assert redact_text(f"got {key} here") == "got llmgw-[redacted] here"
    engine = "llmgw-engine-" + "0123456789abcdef" * 4
    assert redact_text(f"--api-key {engine}") == "--api-key llmgw-[redacted]"


def teardown_module():
    logs.setup()
