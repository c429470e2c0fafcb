"""One logging setup for every role.

Lines are `key=value` (logfmt) by default or one JSON object each with
`--log-format json`. Structured fields go in `extra={"fields": {...}}`.
Fields whose names say they hold a secret or a person's words (a prompt, an
answer, a key, a password, a token) are never written: the value is replaced
by `[redacted]`, wherever the call came from.
"""

from __future__ import annotations

import argparse
import contextvars
import functools
import json
import logging
import os
import re
import sys
import time
from typing import Any

LEVELS = ("debug", "info", "warning", "error")

# Field names whose values are never logged. Matched as whole words inside the
# name, so `api_key`, `prompt_text` and `x-api-key` are caught, `key_id` too
# would be, which is why ids use `*_id` names that are listed as safe.
_SECRET_WORDS = re.compile(
    r"(^|[_\-.])(prompt|prompts|messages|content|answer|completion_text|input|output|text|"
    r"key|api_key|apikey|password|passwd|secret|token|authorization|cookie|bearer)($|[_\-.])",
    re.IGNORECASE,
)
_SAFE_FIELDS = {"key_id", "key_prefix", "token_count", "prompt_tokens", "completion_tokens",
                "total_tokens", "cached_tokens", "input_tokens", "output_tokens"}
# Anything shaped like a key inside a message is masked too: a provider's `sk-…`; an engine key
# (`llmgw-engine-` and hex); a client key (`llmgw-` and 40 URL-safe random characters, or any run of
# 12 or more that has a capital letter, as random ones do). Not names: a replica id like
# `llmgw-sim-79d009b7` is lower case, and stays readable.
_KEY_LIKE = re.compile(
    r"\b(sk)[-_][A-Za-z0-9_\-]{12,}"
    r"|\b(llmgw)-(?:engine-[0-9a-f]{16,}"
    r"|[A-Za-z0-9_\-]{40}(?![A-Za-z0-9_\-])"
    r"|(?=[A-Za-z0-9_\-]*[A-Z])[A-Za-z0-9_\-]{12,})"
)


def redact_field(name: str, value: Any) -> Any:
    return "[redacted]" if _secret_name(name) else value


@functools.lru_cache(maxsize=4096)
def _secret_name(name: str) -> bool:
    """Whether a field of this name is redacted; worked out once a name (a request line names a dozen)."""
    if name in _SAFE_FIELDS or name.endswith("_id") or name.endswith("_tokens"):
        return False
    return _SECRET_WORDS.search(name) is not None


def redact_text(text: str) -> str:
    return _KEY_LIKE.sub(lambda m: (m.group(1) or m.group(2)) + "-[redacted]", text)


#: The client request a line is written for (the client API sets it for each request's time), and its
#: trace when tracing is on: every line of that request carries them, whoever writes it.
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("llmgw_request_id", default=None)
TRACE_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("llmgw_trace_id", default=None)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None) or {}
    out = {k: "[redacted]" if _secret_name(k) else v for k, v in fields.items()}
    request_id = REQUEST_ID.get()
    if request_id is not None:
        out.setdefault("request_id", request_id)
        trace_id = TRACE_ID.get()
        if trace_id is not None:
            out.setdefault("trace_id", trace_id)
    return out


def _timestamp(record: logging.LogRecord) -> str:
    return _second(int(record.created)) + f".{int(record.msecs):03d}Z"


@functools.lru_cache(maxsize=4)
def _second(at: int) -> str:
    """The timestamp's whole second, formatted once for all the lines written in it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact_text(record.getMessage()),
        }
        parts.update(_fields(record))
        if record.exc_info:
            parts["error"] = redact_text(self.formatException(record.exc_info))
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in parts.items())


#: What makes a logfmt value need quotes: one regular expression search, not a loop over the characters.
_NEEDS_QUOTES = re.compile(r'[ ="\n\t]').search


def _logfmt_value(value: Any) -> str:
    kind = type(value)
    if kind is str:
        text = value
    elif value is None or kind is bool or kind is int:  # as JSON writes them, without it
        return "null" if value is None else "true" if value is True else "false" if value is False else str(value)
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, default=str)
    if not text or _NEEDS_QUOTES(text):
        return json.dumps(text)
    return text


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact_text(record.getMessage()),
        }
        obj.update(_fields(record))
        if record.exc_info:
            obj["error"] = redact_text(self.formatException(record.exc_info))
        return json.dumps(obj, default=str)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        choices=LEVELS,
        default=os.environ.get("LLMGW_LOG_LEVEL", "info"),
        help="least severe messages written (default info, or $LLMGW_LOG_LEVEL)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=os.environ.get("LLMGW_LOG_FORMAT", "text"),
        help="key=value lines (text) or one JSON object a line",
    )


def setup(level: str = "info", fmt: str = "text", stream=None) -> None:
    """Configure the root logger once for this process (later calls replace it)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # No line says where in the source it was written, or from which thread or process (the formatters
    # write none of it): the logging module's documented switches for not working it out on every call.
    logging._srcfile = None  # noqa: SLF001 - the Logging HOWTO's "Optimization" names it
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    # Libraries' chatter stays at warning unless debugging.
    for noisy in ("aiohttp.access", "asyncio", "urllib3", "httpx"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)


def get(name: str) -> logging.Logger:
    return logging.getLogger(name)


def event(logger: logging.Logger, msg: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one line with structured fields: `event(log, "replica ready", model=m)`."""
    logger.log(level, msg, extra={"fields": fields})
