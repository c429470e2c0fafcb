"""The hooks a plugin may implement. Each returns the things it contributes.

A hook may return its list directly, or a coroutine producing it; callers
resolve either (`llmgw.plugins.manager.resolve`). pluggy itself stays
synchronous.
"""

from __future__ import annotations

from llmgw.plugins import hookspec
from llmgw.plugins.types import Detector, Engine, JudgeFormat, Sink

# --- Serving ------------------------------------------------------------------


@hookspec
def llmgw_engines() -> list[Engine]:
    """Inference engines this plugin can install, validate, launch and health-check."""


# --- Guardrails ---------------------------------------------------------------


@hookspec
def llmgw_guard_detectors() -> list[Detector]:
    """Detectors that find a kind of thing in text (PII, secrets, injection) and say where."""


@hookspec
def llmgw_judge_formats() -> list[JudgeFormat]:
    """Ways to ask a guard model about a conversation and read its verdict."""


# --- Notifications ------------------------------------------------------------


@hookspec
def llmgw_notify_sinks() -> list[Sink]:
    """Places an event can be delivered to (webhook, Slack, ...)."""
