"""What the kept-request endpoints read and answer: whose requests are kept, the requests kept, a replay
(llmgw.admin.handlers_kept; `llmgw keys requests`, `llmgw ctl request`)."""

from __future__ import annotations

from typing import Any

import attrs

from llmgw.admin import forms
from llmgw.admin.fields import field

#: project:PATH or key:ID (a key's id or prefix).
KEEP_SCOPE = {
    "x-form": "a scope: project:PATH or key:ID (a key's id or prefix)",
    "pattern": forms.SCOPE["pattern"].replace("(user|key)", "(key)").replace("(org|team|project)", "(project)"),
}
_ANSWER = {"type": ["object", "null"]}


@attrs.frozen(kw_only=True)
class KeepQuery:
    scope: str = field("Whose: project:PATH or key:ID.", schema=KEEP_SCOPE)


@attrs.frozen(kw_only=True)
class KeepSet:
    """How long a key's or a project's requests are kept."""

    scope: str = field("Whose: project:PATH or key:ID.", schema=KEEP_SCOPE)
    keep: str | None = field("How long each request is kept, like 7d or 12h (at most 366d); null stops keeping "
                             "them (those kept age out).", schema=forms.POSITIVE_DURATION)


@attrs.frozen(kw_only=True)
class KeepSetting:
    """Whose requests are kept, and for how long."""

    scope: str = field("The scope, as kind:label.")
    keep_s: int | None = field("The scope's own time in seconds; null when it sets none.")
    in_force_s: int | None = field("For a key: the time its requests are kept (its own, else its project's), "
                                   "in seconds; null when they are not kept.")
    in_force_set_by: str | None = field("Where that time is set: key or project; null when not kept.")


@attrs.frozen(kw_only=True)
class KeptQuery:
    key: str | None = field("Only this key's (its id or prefix).", None, schema=forms.ID)
    project: str | None = field("Only this project's (ORG/PROJECT or ORG/TEAM/PROJECT).", None,
                                schema=forms.ORG_PATH)
    since: str | None = field("From this time: 2026-09-01, an ISO 8601 time, or a span back like 24h or 7d.", None,
                              schema=forms.WHEN)
    limit: int = field("At most this many, newest first (1-1000).", 100, schema={"minimum": 1, "maximum": 1000})


@attrs.frozen(kw_only=True)
class KeptSummary:
    """One kept request, without its text."""

    id: str = field("The request's id (its usage row's).")
    at: str = field("When it came, ISO 8601 UTC.")
    expires_at: str = field("When it is deleted.")
    key_id: str = field("The key that sent it.")
    project_id: str | None = field("The key's project; null for a personal key.")
    endpoint: str = field("The endpoint it was sent to, like /v1/chat/completions.")
    model: str = field("The model asked for.")
    model_served: str = field("The model that answered; empty when none did.")
    status: int = field("The HTTP status the client got.")
    outcome: str = field("ok, error, cancelled, …, as its usage row says.")
    streamed: bool = field("The answer was streamed (it is kept assembled).")
    prompt_tokens: int = field("Tokens of the prompt.")
    completion_tokens: int = field("Tokens of the answer.")
    guard_action: str | None = field("What the guardrails did (redact, …); null when nothing.")


@attrs.frozen(kw_only=True)
class KeptList:
    """Kept requests, newest first."""

    requests: list[KeptSummary] = field("The requests.")


@attrs.frozen(kw_only=True)
class KeptDetail:
    """One kept request with what the model was sent and what the client got."""

    summary: KeptSummary = field("What is known of it.")
    request: dict[str, Any] = field("The chat or completion body the model was sent (after the guardrails).")
    answer: dict[str, Any] | None = field("The answer the client got (a stream assembled into one); null when "
                                          "none came.", schema=_ANSWER)
    text: str = field("The answer's text (its first choice).")


@attrs.frozen(kw_only=True)
class ReplayRequest:
    """The model to send a kept request to."""

    model: str = field("The model to send it to (one the key may use).", schema=forms.ID)


@attrs.frozen(kw_only=True)
class ReplayResult:
    """A kept request sent again to another model, beside the answer it got then."""

    id: str = field("The kept request's id.")
    model: str = field("The model that answered it then.")
    replay_model: str = field("The model it was sent to now.")
    replay_request_id: str = field("The replay's own request id (its usage row, tagged replay_of=ID, is the "
                                   "key's).")
    status: int = field("The HTTP status of the replay.")
    original: dict[str, Any] | None = field("The answer kept.", schema=_ANSWER)
    replayed: dict[str, Any] = field("The replay's answer (or its error).")
    original_text: str = field("The kept answer's text.")
    replayed_text: str = field("The replay's text.")
