"""What the admin API's update, canary, rollback and quality-suite endpoints read and answer."""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs

from llmgw.admin.fields import field

__all__ = ["CanaryInfo", "CanaryList", "CanaryStart", "CanaryWeight", "EvalCase", "EvalRequest", "EvalResult",
           "PromoteRequest", "ServeRequest", "UpdateRequest"]

_SUITE = ("A quality suite (name, threshold, margin, system, max_tokens, judge, cases of a prompt and one of exact, "
          "contains, regex or judge) the new revision must pass before it takes traffic; null: none.")
_SHARE = {"type": ["number", "string"]}


@attrs.frozen(kw_only=True)
class UpdateRequest:
    """The revision a model moves to, and the suite it must pass first."""

    to: str = field("The new source, or a revision of the one it has (org/repo@REV, a mirror path's version).")
    gate: dict[str, Any] | None = field(_SUITE, None, schema={"type": ["object", "null"]})


@attrs.frozen(kw_only=True)
class ServeRequest:
    """A model to serve from a repository or the mirror: fetched, planned, added, started and asked hello."""

    source: str = field("A registry repository (org/name[@revision]), fetched into the mirror through mirror.api; "
                        "or a model already on the mirror: MODEL[/VERSION[/FILE]] or its URL.",
                        schema={"minLength": 1})
    name: str = field("The catalog name to give it; empty: the mirror's name for the model.", "")
    files: list[str] = field("Patterns of the repository's files to fetch, like *Q4_K_M*; empty: the mirror's "
                             "choice.", attrs.Factory(list))
    file: str = field("The file of the version to serve; empty: the plan's best.", "")
    context: int | None = field("Tokens of context each sequence holds (default: the model's, at most 8192).", None,
                                schema={"type": ["integer", "null"], "minimum": 1})
    concurrency: int = field("Sequences held at once, each with the whole context, in the plan.", 1,
                             schema={"minimum": 1})
    engine: str = field("The engine to run it; empty: llamacpp for a GGUF, vllm for original weights.", "")


@attrs.frozen(kw_only=True)
class CanaryStart:
    """A canary: a model's newer revision beside it, for a share of its sessions."""

    to: str = field("The canary's source, or a revision of the model's (as for an update).")
    weight: Any = field("The share of the model's sessions it takes once it serves, like 10% or 10.", schema=_SHARE)
    replicas: int = field("Replicas of the canary.", 1, schema={"minimum": 1, "maximum": 64})
    gate: dict[str, Any] | None = field(_SUITE, None, schema={"type": ["object", "null"]})


@attrs.frozen(kw_only=True)
class CanaryWeight:
    """A new share of the model's sessions for its canary."""

    weight: Any = field("The share, like 25% or 25; 0 sends it only requests that ask for it.", schema=_SHARE)


@attrs.frozen(kw_only=True)
class PromoteRequest:
    """How a canary is promoted."""

    gate: dict[str, Any] | None = field(_SUITE, None, schema={"type": ["object", "null"]})


@attrs.frozen(kw_only=True)
class CanaryInfo:
    """A model's canary."""

    model: str = field("The model it is the canary of.")
    name: str = field("Its own name in the catalog, MODEL-canary.")
    revision: str = field("The source it runs.")
    weight: float = field("The percent of the model's sessions it takes while it serves.")
    replicas: int = field("Replicas it runs.")
    ready: int = field("Of them, how many are ready.")
    serving: bool = field("Ready and past its quality suite: it takes its share.")
    update: bool = field("It belongs to an update under way (llmgw ctl model update), which moves traffic itself.")
    by: str = field("Who started it.")
    started: dt.datetime = field("When it started.")


@attrs.frozen(kw_only=True)
class CanaryList:
    """Every canary the catalog holds."""

    canaries: list[CanaryInfo] = field("By model.")


@attrs.frozen(kw_only=True)
class EvalRequest:
    """A quality suite to ask of a model now."""

    suite: dict[str, Any] = field(_SUITE.replace("; null: none", ""), schema={"type": "object"})


@attrs.frozen(kw_only=True)
class EvalCase:
    """One case of a suite, as the model answered it."""

    id: str = field("The case's id.")
    passed: bool = field("Whether the answer passed its check.")
    weight: float = field("What it counts for in the score.")
    answer: str = field("The model's answer (at most 2,000 characters).")
    why: str = field("Why it failed; empty when it passed.")


@attrs.frozen(kw_only=True)
class EvalResult:
    """A suite asked of a model, scored."""

    suite: str = field("The suite's name.")
    model: str = field("The model asked.")
    score: float = field("The weight of the cases passed over the weight of all, from 0 to 1.")
    threshold: float = field("The score the suite asks for.")
    reached: bool = field("Whether the score reached the threshold.")
    passed: int = field("Cases passed.")
    total: int = field("Cases asked.")
    cases: list[EvalCase] = field("Every case, in the suite's order.")
