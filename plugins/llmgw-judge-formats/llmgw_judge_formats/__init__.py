"""llmgw's own judge formats: how to ask a guard model and read its verdict.

- `qwen3guard`: Qwen3Guard-Gen, asked through its chat template, read from
  "Safety: Safe | Unsafe | Controversial" and "Categories: ...";
- `llamaguard3`: Llama Guard 3, read from "safe" / "unsafe" and its S-codes;
- `shieldgemma`: ShieldGemma, asked whether the text breaks the listed
  principles, read from its Yes or No;
- `json`: any instruction-following model asked for `{"safe": ..., "categories": [...]}`.

A format whose model takes a list of categories (Llama Guard's names for
S1, S2, ...; ShieldGemma's principles) has `with_categories(names)`, which
the gateway calls with the catalog entry's `guard.categories`. See
docs/guardrails.md.
"""

from __future__ import annotations

from llmgw.plugins import hookimpl
from llmgw.plugins.types import JudgeFormat
from llmgw_judge_formats.jsonverdict import JsonFormat
from llmgw_judge_formats.llamaguard import LLAMA_GUARD_3_CATEGORIES, LlamaGuard3Format
from llmgw_judge_formats.qwen3guard import Qwen3GuardFormat
from llmgw_judge_formats.shieldgemma import DEFAULT_PRINCIPLES, ShieldGemmaFormat

__all__ = [
    "DEFAULT_PRINCIPLES",
    "LLAMA_GUARD_3_CATEGORIES",
    "JsonFormat",
    "LlamaGuard3Format",
    "Qwen3GuardFormat",
    "ShieldGemmaFormat",
    "llmgw_judge_formats",
]


@hookimpl
def llmgw_judge_formats() -> list[JudgeFormat]:
    """One format per family of guard models: qwen3guard, llamaguard3, shieldgemma, json."""
    return [Qwen3GuardFormat(), LlamaGuard3Format(), ShieldGemmaFormat(), JsonFormat()]
