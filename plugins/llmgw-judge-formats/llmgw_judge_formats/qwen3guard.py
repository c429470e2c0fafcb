"""Qwen3Guard-Gen: asked through its own chat template, read from its two or three lines.

The model's chat template turns the conversation into its moderation
question, so the request is the conversation itself. It answers:

    Safety: Unsafe
    Categories: Violent
    Refusal: No          (only when judging an answer)

Its verdicts are Safe, Unsafe and Controversial. A controversial one is
read as not safe, with the category "Controversial" first; the gateway
counts it as safe unless the policy says `controversial: unsafe`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from llmgw.plugins.types import JudgeFormat, Verdict
from llmgw_judge_formats.common import turns

#: The categories Qwen3Guard names.
QWEN3GUARD_CATEGORIES = (
    "Violent", "Non-violent Illegal Acts", "Sexual Content or Sexual Acts", "PII", "Suicide & Self-Harm",
    "Unethical Acts", "Politically Sensitive Topics", "Copyright Violation", "Jailbreak",
)
_SAFETY = re.compile(r"safety\s*:\s*(safe|unsafe|controversial)\b", re.IGNORECASE)
_CATEGORIES = re.compile(r"categories\s*:\s*([^\n]*)", re.IGNORECASE)


class Qwen3GuardFormat(JudgeFormat):
    name = "qwen3guard"

    def build_request(self, messages: Sequence[Mapping[str, Any]], role: str) -> dict[str, Any]:
        return {"messages": turns(messages, role), "temperature": 0, "max_tokens": 64}

    def parse(self, text: str) -> Verdict:
        found = _SAFETY.search(text or "")
        if found is None:
            raise ValueError("no 'Safety:' line")
        safety = found.group(1).lower()
        categories: list[str] = []
        listed = _CATEGORIES.search(text)
        if listed is not None:
            categories = [c.strip() for c in listed.group(1).split(",")
                          if c.strip() and c.strip().lower() != "none"]
        if safety == "safe":
            return Verdict(True, (), text)
        if safety == "controversial":
            return Verdict(False, ("Controversial", *categories), text)
        return Verdict(False, tuple(categories), text)
