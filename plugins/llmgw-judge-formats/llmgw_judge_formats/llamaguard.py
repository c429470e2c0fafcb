"""Llama Guard 3: "safe", or "unsafe" and a line of category codes (S1,S10).

A user turn is asked through the model's chat template. An answer is asked
with Llama Guard's own prompt, sent as a completion: a chat ending on the
assistant's turn is continued by some servers (llama.cpp) rather than
judged.

The codes are reported by name: Meta's names for S1-S14, or the catalog
entry's `guard.categories` in order (S1 is the first) via `with_categories`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from llmgw.plugins.types import JudgeFormat, Verdict
from llmgw_judge_formats.common import turns

#: Llama Guard 3's hazard categories, S1 first.
LLAMA_GUARD_3_CATEGORIES = (
    "Violent Crimes", "Non-Violent Crimes", "Sex-Related Crimes", "Child Sexual Exploitation", "Defamation",
    "Specialized Advice", "Privacy", "Intellectual Property", "Indiscriminate Weapons", "Hate",
    "Suicide & Self-Harm", "Sexual Content", "Elections", "Code Interpreter Abuse",
)
_CODE = re.compile(r"\bS(\d{1,2})\b")


class LlamaGuard3Format(JudgeFormat):
    name = "llamaguard3"

    def __init__(self, categories: Sequence[str] = LLAMA_GUARD_3_CATEGORIES) -> None:
        self.categories = tuple(categories)

    def with_categories(self, categories: Sequence[str]) -> LlamaGuard3Format:
        return LlamaGuard3Format(categories)

    def build_request(self, messages: Sequence[Mapping[str, Any]], role: str) -> dict[str, Any]:
        conversation = turns(messages, role)
        if role == "user":
            return {"messages": conversation, "temperature": 0, "max_tokens": 24}
        return {"prompt": self.prompt(conversation), "temperature": 0, "max_tokens": 24}

    def prompt(self, conversation: Sequence[Mapping[str, str]]) -> str:
        """Llama Guard 3's question about the last answer of `conversation`, in its chat markup."""
        listed = "\n".join(f"S{i}: {name}." for i, name in enumerate(self.categories, 1))
        shown = "\n\n".join(f"{'User' if m['role'] == 'user' else 'Agent'}: {m['content']}" for m in conversation)
        return (
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
            "Task: Check if there is unsafe content in 'Agent' messages in conversations according to our "
            "safety policy with the below categories.\n\n"
            f"<BEGIN UNSAFE CONTENT CATEGORIES>\n{listed}\n<END UNSAFE CONTENT CATEGORIES>\n\n"
            f"<BEGIN CONVERSATION>\n\n{shown}\n\n<END CONVERSATION>\n\n"
            "Provide your safety assessment for ONLY THE LAST Agent message in the above conversation:\n"
            " - First line must read 'safe' or 'unsafe'.\n"
            " - If unsafe, a second line must include a comma-separated list of violated categories."
            "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        )

    def parse(self, text: str) -> Verdict:
        lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
        if not lines:
            raise ValueError("an empty answer")
        first = lines[0].lower()
        if first == "safe":
            return Verdict(True, (), text)
        if not first.startswith("unsafe"):
            raise ValueError("the first line is neither 'safe' nor 'unsafe'")
        rest = " ".join([lines[0][6:], *lines[1:]])
        names = []
        for code in _CODE.findall(rest):
            i = int(code)
            names.append(self.categories[i - 1] if 0 < i <= len(self.categories) else f"S{i}")
        return Verdict(False, tuple(dict.fromkeys(names)), text)
