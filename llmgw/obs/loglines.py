"""Reading log lines written by someone else: how severe each is, and what must not be shown.

A node's log comes back as plain lines: the agent's own (key=value or JSON,
as `llmgw.obs.logs` writes them) and its engines' (vLLM, SGLang, llama.cpp,
TensorRT-LLM, Python tracebacks), each in its own style. `line_levels(lines)`
says for each one error, warning, info, debug, or "" when the line does not
say; an indented line under an error or a warning (a traceback's frames, a
message continued) counts as part of it. `plain(line)` takes out terminal
colours and control characters (a progress bar's carriage returns keep what
was drawn last), and `scrub(line)` masks what looks like a key, a token or a
password; both are done before a line leaves the control plane.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from llmgw.obs.logs import redact_text

__all__ = ["LEVELS", "line_level", "line_levels", "plain", "scrub"]

#: What `line_level` answers, most severe first; "" is a line that does not say.
LEVELS = ("error", "warning", "info", "debug")

_WORDS = {
    "critical": "error", "crit": "error", "fatal": "error", "panic": "error", "emerg": "error", "alert": "error",
    "error": "error", "err": "error", "eror": "error", "e": "error", "f": "error",
    "warning": "warning", "warn": "warning", "wrn": "warning", "w": "warning",
    "info": "info", "inf": "info", "notice": "info", "i": "info",
    "debug": "debug", "dbg": "debug", "dbug": "debug", "trace": "debug", "d": "debug", "v": "debug",
}
_JSON_KEYS = ("level", "levelname", "severity", "lvl", "log.level")
# key=value: level=error, lvl="warn", severity=INFO
_LOGFMT = re.compile(r'(?:^|\s)(?:level|lvl|severity|levelname)=("?)([A-Za-z]+)\1(?=\s|$)')
# [ERROR], [W], [TensorRT-LLM][WARNING], <error>
_BRACKETED = re.compile(r"[\[<](CRITICAL|FATAL|ERROR|ERR|WARNING|WARN|INFO|DEBUG|TRACE|E|W|I|D|F)[\]>]",
                        re.IGNORECASE)
# a level in capitals among a line's first words: "2025-03-10 12:00:01,002 WARNING llmgw.agent: …",
# vLLM's "INFO 03-10 12:00:01 [api_server.py:1] …" and "(EngineCore pid=7) ERROR 03-10 …"
_CAPITALS = re.compile(r"(?:^|[\s|:(\[])(CRITICAL|FATAL|ERROR|ERR|WARNING|WARN|INFO|DEBUG|TRACE)(?=[\s:|\[\]]|$)")
#: How far into a line a level is looked for: a level later on is the message's word, not the line's.
_HEAD_CHARS = 80
_HEAD_WORDS = 5
# glog (E0310 12:00:01.000000 …) and llama.cpp's prefixed lines (0.00.123.456 W …)
_LETTER = re.compile(r"^(?:([IWEF])\d{4} \d\d:\d\d:\d\d|\d+\.\d+\.\d+\.\d+ ([IWED]) )")
# error: …, warning: …, panic: …, at a line's start in any case
_PREFIX = re.compile(r"^(error|fatal|panic|critical|warning|warn)\b\s*[:!]", re.IGNORECASE)
# Python: the traceback's first line, and the exception it ends with
_PYTHON = re.compile(r"^(?:Traceback \(most recent call last\):|(?:[A-Za-z_][\w.]*)?(?:Error|Exception): )")


def line_level(line: str) -> str:
    """error, warning, info or debug as the line says it; "" when it does not."""
    text = line.strip()
    if not text:
        return ""
    if text.startswith("{"):
        found = _json_level(text)
        if found is not None:
            return found
    m = _LOGFMT.search(text)
    if m is not None and m.group(2).lower() in _WORDS:
        return _WORDS[m.group(2).lower()]
    m = _LETTER.match(text)
    if m is not None:
        return _WORDS[(m.group(1) or m.group(2)).lower()]
    head = " ".join(text[:_HEAD_CHARS].split()[:_HEAD_WORDS])
    m = _BRACKETED.search(head)
    if m is not None:
        return _WORDS[m.group(1).lower()]
    m = _CAPITALS.search(head)
    if m is not None:
        return _WORDS[m.group(1).lower()]
    m = _PREFIX.match(text)
    if m is not None:
        return _WORDS[m.group(1).lower()]
    if _PYTHON.match(text):
        return "error"
    return ""


def _json_level(text: str) -> str | None:
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    for key in _JSON_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and value.strip().lower() in _WORDS:
            return _WORDS[value.strip().lower()]
    return ""


def line_levels(lines: Iterable[str]) -> list[str]:
    """The level of each line, an indented line under an error or warning counted as part of it."""
    out: list[str] = []
    before = ""
    for line in lines:
        level = line_level(line)
        if not level and before in ("error", "warning") and line[:1] in (" ", "\t") and line.strip():
            level = before
        out.append(level)
        before = level
    return out


_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def plain(line: str) -> str:
    """The line as a terminal would leave it: no colours or other escapes, tabs as spaces, the last redraw."""
    line = _ESCAPE.sub("", line)
    if "\r" in line:
        line = next((part for part in reversed(line.split("\r")) if part.strip()), "")
    return _CONTROL.sub("", line.replace("\t", "    "))


# api_key=X, "token": "X", password: X — the value goes, the name stays.
_NAMED_SECRET = re.compile(
    r"""(?P<name>["']?(?:[A-Za-z0-9]+[_-])*(?:api[_-]?key|apikey|password|passwd|secret|token|authorization)"""
    r"""["']?)(?P<sep>\s*[:=]\s*)(?P<quote>\[?["']?)(?P<value>[^\s"',}\]]+)""",
    re.IGNORECASE,
)
# --api-key X, --hf-token X: a command line echoed into the log
_FLAG_SECRET = re.compile(
    r"(?P<name>--?(?:[A-Za-z0-9]+[_-])*(?:api[_-]?key|apikey|password|passwd|secret|token))(?P<sep>\s+)"
    r"(?P<quote>[\[\"']*)(?P<value>[^\s\"',\]]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9+/_.=\-]{8,}", re.IGNORECASE)
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}")
#: Values that are no secret: masked already, or words standing for nothing.
_NOT_SECRET = ("[redacted]", "none", "null", "true", "false", "bearer", "basic", "<redacted>", "***")


def scrub(line: str) -> str:
    """The line with keys, tokens and passwords masked as the log redactor masks them."""
    line = redact_text(line)
    line = _HF_TOKEN.sub("hf_[redacted]", line)
    line = _BEARER.sub(lambda m: f"{m.group(1)} [redacted]", line)

    def named(m: re.Match[str]) -> str:
        value = m.group("value")
        if value.lower() in _NOT_SECRET or "redacted" in value.lower() or value.startswith("-"):
            return m.group(0)
        if "token" in m.group("name").lower() and value.isdigit():
            return m.group(0)  # a count of tokens, not a token
        return f"{m.group('name')}{m.group('sep')}{m.group('quote')}[redacted]"

    return _FLAG_SECRET.sub(named, _NAMED_SECRET.sub(named, line))
