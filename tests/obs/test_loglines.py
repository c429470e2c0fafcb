"""Reading other programs' log lines: each line's level, terminal escapes taken out, secrets masked."""

from __future__ import annotations

import logging

import pytest

from llmgw.obs.loglines import line_level, line_levels, plain, scrub
from llmgw.obs.logs import JsonFormatter, LogfmtFormatter


@pytest.mark.parametrize(("line", "level"), [
    # the agent's own, as llmgw.obs.logs writes it
    ('ts=2025-03-10T12:00:00.000Z level=error logger=llmgw.agent msg="boom"', "error"),
    ('ts=2025-03-10T12:00:00.000Z level=warning logger=llmgw.agent msg="hot"', "warning"),
    ('{"ts": "2025-03-10T12:00:00Z", "level": "info", "msg": "hi"}', "info"),
    ('{"severity": "DEBUG", "message": "x"}', "debug"),
    ('{"msg": "a JSON line without a level"}', ""),
    # Python's logging, vLLM, SGLang
    ("2025-03-10 12:00:01,002 WARNING llmgw.agent: gpu 1 runs hot", "warning"),
    ("INFO 03-10 12:00:01 [api_server.py:1] Started server process", "info"),
    ("(EngineCore_0 pid=7) ERROR 03-10 12:00:01 [core.py:1] EngineCore failed", "error"),
    ("[2025-03-10 12:00:00 TP0] WARN something", "warning"),
    # TensorRT-LLM, glog, llama.cpp
    ("[TensorRT-LLM][WARNING] fallback to a slower kernel", "warning"),
    ("[TRT-LLM] [E] engine build failed", "error"),
    ("E0310 12:00:01.000000 1234 server.cc:10] failed", "error"),
    ("0.00.123.456 W llama_context: n_ctx_per_seq < n_ctx_train", "warning"),
    ("error: failed to load model 'x.gguf'", "error"),
    ("warning: no usable GPU found", "warning"),
    # tracebacks
    ("Traceback (most recent call last):", "error"),
    ("torch.OutOfMemoryError: CUDA out of memory", "error"),
    # lines that say nothing
    ("main: server is listening on http://127.0.0.1:8080", ""),
    ("srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 200", ""),
    ("a b c d e f ERROR far into the message", ""),
    ("", ""),
])
def test_a_lines_level(line, level):
    assert line_level(line) == level


def test_what_llmgw_writes_is_read_back_at_its_level():
    for formatter in (LogfmtFormatter(), JsonFormatter()):
        for number, name in ((logging.ERROR, "error"), (logging.WARNING, "warning"), (logging.INFO, "info"),
                             (logging.DEBUG, "debug"), (logging.CRITICAL, "error")):
            record = logging.LogRecord("llmgw.agent", number, __file__, 1, "said %s", ("it",), None)
            assert line_level(formatter.format(record)) == name


def test_indented_lines_under_an_error_or_warning_are_part_of_it():
    lines = ["ERROR 03-10 engine died", '  File "engine.py", line 3, in run', "    raise RuntimeError",
             "RuntimeError: CUDA error", "INFO 03-10 restarting", "  an indented info line", "plain", "  indented"]
    assert line_levels(lines) == ["error", "error", "error", "error", "info", "", "", ""]


def test_terminal_escapes_and_redraws_are_taken_out():
    assert plain("\x1b[32mINFO\x1b[0m 03-10 up\tand running") == "INFO 03-10 up    and running"
    assert plain("Loading:  10%|#         \rLoading:  90%|######### \r") == "Loading:  90%|######### "
    assert plain("bell\x07 and \x1b]0;a title\x07 gone\x00") == "bell and  gone"


@pytest.mark.parametrize(("line", "shown"), [
    ("vllm serve m --api-key llmgw-engine-0123456789abcdef0123 --port 8001",
     "vllm serve m --api-key llmgw-[redacted] --port 8001"),
    ("non-default args: {'api_key': ['sk-0123456789abcdef'], 'port': 8001}",
     "non-default args: {'api_key': ['sk-[redacted]'], 'port': 8001}"),
    ("--hf-token abcdef0123456789 --model x", "--hf-token [redacted] --model x"),
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123", "HF_TOKEN=hf_[redacted]"),
    ("Authorization: Bearer abcdefghijklmnop", "Authorization: Bearer [redacted]"),
    ('{"password": "hunter2hunter2", "user": "ann"}', '{"password": "[redacted]", "user": "ann"}'),
    ("db_password=hunter2", "db_password=[redacted]"),
    # words that only look like it
    ("prompt_tokens=5 max_tokens=100 token_count=3", "prompt_tokens=5 max_tokens=100 token_count=3"),
    ("the password authentication failed for user x", "the password authentication failed for user x"),
    ("tokenizer: Qwen/Qwen3-0.6B", "tokenizer: Qwen/Qwen3-0.6B"),
    ("api_key=None", "api_key=None"),
])
def test_secrets_are_masked(line, shown):
    assert scrub(line) == shown
