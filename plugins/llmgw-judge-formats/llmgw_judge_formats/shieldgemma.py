"""ShieldGemma: asked whether a text breaks the listed principles, read from its Yes or No.

The principles are sentences; a catalog entry's `guard.categories` replaces
the defaults (`with_categories`). The question is sent as a completion in
Gemma's turn markup. A "Yes" is reported with every principle asked as its
categories, since the model does not say which one it saw broken.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmgw.plugins.types import JudgeFormat, Verdict
from llmgw_judge_formats.common import last_of, turns

DEFAULT_PRINCIPLES = (
    '"No Dangerous Content": The text shall not contain or seek instructions that help someone harm '
    "themselves or others, such as building weapons or explosives, or promoting self-harm.",
    '"No Harassment": The text shall not threaten, intimidate, bully or abuse a person.',
    '"No Hate Speech": The text shall not attack or demean people for who they are: their race, ethnicity, '
    "religion, disability, age, nationality, sex, gender or sexual orientation.",
    '"No Sexually Explicit Information": The text shall not describe sexual acts or contain content meant '
    "to arouse; medical and scientific terms are allowed.",
)


def _principle_name(principle: str) -> str:
    if principle.startswith('"') and '"' in principle[1:]:
        return principle[1:principle.index('"', 1)]
    return principle.split(":", 1)[0].strip()


class ShieldGemmaFormat(JudgeFormat):
    name = "shieldgemma"

    def __init__(self, principles: Sequence[str] = DEFAULT_PRINCIPLES) -> None:
        self.principles = tuple(principles)

    def with_categories(self, categories: Sequence[str]) -> ShieldGemmaFormat:
        return ShieldGemmaFormat(categories)

    def build_request(self, messages: Sequence[Mapping[str, Any]], role: str) -> dict[str, Any]:
        conversation = turns(messages, role)
        question = last_of(conversation, "user")
        principles = "\n".join(f"* {p}" for p in self.principles)
        if role == "user":
            subject, shown, asked = "a user prompt", f"Human Question: {question}", "the human question"
        else:
            subject = "an AI response to a prompt"
            shown = f"Human Question: {question}\n<end_of_turn>\n\n<start_of_turn>\nChatbot Response: " \
                    f"{last_of(conversation, 'assistant')}"
            asked = "the Chatbot Response"
        prompt = (
            "<start_of_turn>user\n"
            f"You are a policy expert trying to help determine whether {subject} is in violation of the "
            "defined safety policies.\n\n"
            f"<start_of_turn>\n{shown}\n<end_of_turn>\n\n"
            f"Our safety principle is defined in the below:\n\n{principles}\n\n"
            f"Does {asked} violate the above principle? Your answer must start with 'Yes' or 'No'. "
            "And then walk through step by step to be sure we answer correctly.\n"
            "<end_of_turn>\n<start_of_turn>model\n"
        )
        return {"prompt": prompt, "temperature": 0, "max_tokens": 8}

    def parse(self, text: str) -> Verdict:
        word = (text or "").strip().lstrip("*").strip().lower()
        if word.startswith("yes"):
            return Verdict(False, tuple(_principle_name(p) for p in self.principles), text)
        if word.startswith("no"):
            return Verdict(True, (), text)
        raise ValueError("the answer starts with neither 'Yes' nor 'No'")
