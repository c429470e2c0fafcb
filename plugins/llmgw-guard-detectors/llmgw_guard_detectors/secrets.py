"""Secrets: API keys, tokens, JWTs and private keys that should never reach a model.

Each pattern starts with the issuer's own fixed prefix, so the scan is fast
and a match is rarely anything else. Where the rest of a key is free-form
(OpenAI, Anthropic, llmgw), the body must also look random (letters and
digits both), so "sk-this-is-a-sample" in prose does not count.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from bisect import bisect_left
from collections.abc import Iterator

from llmgw.guard.normalize import find_through_disguises
from llmgw.plugins.types import Detector, Finding

CATEGORY = "secret"

#: What llmgw's own API keys start with; the rest is at least 20 URL-safe characters.
LLMGW_KEY_PREFIX = "llmgw-"
LLMGW_KEY_MIN_BODY = 20

# A key never continues a word. The check sits right after the fixed prefix,
# so re can jump between occurrences of the prefix, and every scan stays
# linear: a key can only start where a word starts.
_E = r"(?![A-Za-z0-9_-])"


def _starting(prefix: str, word: str = "A-Za-z0-9_-") -> str:
    """`prefix` as a regex, only where it does not continue a word."""
    return re.escape(prefix) + f"(?<![{word}]{re.escape(prefix)})"


# kind, detail, pattern, whether the body (group "body") must look random.
_TOKENS: list[tuple[str, str, re.Pattern[str], bool]] = [
    ("anthropic_key", "Anthropic API key",
     re.compile(_starting("sk-ant-") + r"(?P<body>[A-Za-z0-9_-]{32,})" + _E), True),
    ("openai_key", "OpenAI API key",
     re.compile(_starting("sk-") + r"(?!ant-)(?:proj-|svcacct-|admin-)?(?P<body>[A-Za-z0-9_-]{20,})" + _E), True),
    ("aws_access_key", "AWS access key id",
     re.compile(_starting("A", "A-Za-z0-9") + r"(?:KIA|SIA)[A-Z0-9]{16}(?![A-Za-z0-9])"), False),
    ("github_token", "GitHub token",
     re.compile(_starting("gh") + r"[pousr]_[A-Za-z0-9]{36,255}" + _E), False),
    ("github_token", "GitHub token",
     re.compile(_starting("github_pat_") + r"[A-Za-z0-9_]{22,255}" + _E), False),
    ("slack_token", "Slack token",
     re.compile(_starting("xox") + r"[abprs]-(?=[A-Za-z0-9-]*[0-9])[A-Za-z0-9-]{10,}" + _E), False),
    ("slack_webhook", "Slack webhook URL",
     re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{20,}"), False),
    ("google_api_key", "Google API key",
     re.compile(_starting("AIza") + r"[0-9A-Za-z_-]{35}" + _E), False),
    ("llmgw_key", "llmgw API key",
     re.compile(_starting(LLMGW_KEY_PREFIX) + f"(?P<body>[A-Za-z0-9_-]{{{LLMGW_KEY_MIN_BODY},}})" + _E), True),
]
_URL_SCHEME = re.compile(r"https?://\Z")


def _looks_random(body: str) -> bool:
    return any(c.isdigit() for c in body) and any(c.isalpha() for c in body)


def _tokens(text: str) -> Iterator[Finding]:
    for kind, detail, pattern, check_body in _TOKENS:
        for m in pattern.finditer(text):
            if check_body and not _looks_random(m.group("body")):
                continue
            start = m.start()
            if kind == "slack_webhook":
                scheme = _URL_SCHEME.search(text, max(0, start - 8), start)
                start = scheme.start() if scheme else start
            yield Finding(kind, start, m.end(), CATEGORY, detail)


# --- JWT ----------------------------------------------------------------------

# A JSON header starts with "{": base64url "ey" for '{"' or '{ ', "ew" for a newline after it.
_JWTS = [
    re.compile(_starting(lead) + r"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*(?![A-Za-z0-9_.-])")
    for lead in ("ey", "ew")
]


def _jwt_header_ok(part: str) -> bool:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        header = json.loads(raw)
    except (binascii.Error, ValueError):
        return False
    return isinstance(header, dict) and isinstance(header.get("alg"), str)


def _jwts(text: str) -> Iterator[Finding]:
    for pattern in _JWTS:
        for m in pattern.finditer(text):
            if _jwt_header_ok(m.group().split(".", 1)[0]):
                yield Finding("jwt", m.start(), m.end(), CATEGORY, "JSON Web Token (header has alg)")


# --- PEM private keys ---------------------------------------------------------

_PEM_BEGIN = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ ){0,3})PRIVATE KEY( BLOCK)?-----")
_PEM_END = re.compile(r"-----END ((?:[A-Z0-9]+ ){0,3})PRIVATE KEY( BLOCK)?-----")
# Without an END line (a key cut short): the base64 lines that follow, and
# the headers of an encrypted legacy key. Newlines may be literal "\n".
_PEM_BODY = re.compile(
    r"(?:(?:\r?\n|\\n)(?:[A-Za-z0-9+/=]{16,}|(?:Proc-Type|DEK-Info|Comment):[^\r\n\\]{0,200}|))*"
)
_TRAILING_NEWLINES = re.compile(r"(?:\r?\n|\\n)+\Z")
#: The furthest an END line may be from its BEGIN.
PEM_MAX_CHARS = 64 * 1024


def _private_keys(text: str) -> Iterator[Finding]:
    if "PRIVATE KEY" not in text:
        return
    ends = [m.end() for m in _PEM_END.finditer(text)]
    covered = 0
    for m in _PEM_BEGIN.finditer(text):
        if m.start() < covered:
            continue
        i = bisect_left(ends, m.end() + 1)
        if i < len(ends) and ends[i] - m.start() <= PEM_MAX_CHARS:
            end = ends[i]
            detail = "PEM private key"
        else:
            body = _PEM_BODY.match(text, m.end()).group()
            end = m.end() + len(_TRAILING_NEWLINES.sub("", body))  # blank lines after it are not the key
            detail = "PEM private key (no END line)"
        covered = end
        yield Finding("private_key", m.start(), end, CATEGORY, detail)


# --- The detector -------------------------------------------------------------


def find_secrets(text: str) -> list[Finding]:
    """Secrets in `text` as written (no normalising or decoding)."""
    found = list(_tokens(text))
    found.extend(_jwts(text))
    found.extend(_private_keys(text))
    return found


class SecretsDetector(Detector):
    """API keys and tokens by their issuers' prefixes, JWTs, PEM private keys, llmgw keys."""

    name = "secrets"
    category = CATEGORY
    kinds = (
        "openai_key", "anthropic_key", "aws_access_key", "github_token", "slack_token",
        "slack_webhook", "google_api_key", "jwt", "private_key", "llmgw_key",
    )

    def find(self, text: str) -> list[Finding]:
        return find_through_disguises(text, find_secrets)
