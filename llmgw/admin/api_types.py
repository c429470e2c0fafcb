"""What the admin API's own endpoints read and answer: errors, the summary,
settings, the audit log, usage and capacity quotas. (Cluster types are in
cluster_types.py, people's in people_types.py.)"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs

from llmgw.admin import forms
from llmgw.admin.fields import field
from llmgw.admin.settings import SETTING_KEYS

# ---------------------------------------------------------------- common


@attrs.frozen(kw_only=True)
class ErrorBody:
    """Every refusal: a 4xx or 5xx status with this body."""

    error: str = field("What was wrong, where, and what to do, in a sentence or two.")
    problems: list[str] = field("Each problem on its own, when there were several.", factory=list)


@attrs.frozen(kw_only=True)
class Done:
    """A change that has nothing more to say than that it was made."""

    done: str = field("What was done, in a sentence.")


@attrs.frozen(kw_only=True)
class Empty:
    """No fields: a change whose path says everything."""


# ---------------------------------------------------------------- summary


@attrs.frozen(kw_only=True)
class GpuClassCount:
    """GPUs of one class across the cluster."""

    gpu_class: str = field("The class, like h100-80g.", key="class")
    total: int = field("Cards of this class.")
    healthy: int = field("Cards reported healthy.")
    in_use: int = field("Cards held by replicas.")


@attrs.frozen(kw_only=True)
class ModelStatusLine:
    """A model that needs looking at."""

    name: str = field("The model.")
    status: str = field("Its status word.")
    reason: str = field("Its status in a sentence.")


@attrs.frozen(kw_only=True)
class ClusterSummary:
    """The fleet in numbers."""

    leading: bool = field("This control plane leads the cluster.")
    leader: str | None = field("The control plane that leads; null when none does.", None)
    nodes: dict[str, int] = field("Nodes by state (ready, cordoned, draining, disconnected, lost).")
    gpus: list[GpuClassCount] = field("GPUs by class.")
    replicas: dict[str, int] = field("Replicas by state (starting, ready, stopping).")
    models: dict[str, int] = field("Models by status.")
    attention: list[ModelStatusLine] = field(
        "Models parked, unplaced, backing off, short or invalid, with why.", factory=list)


@attrs.frozen(kw_only=True)
class Summary:
    """The answer of GET /summary: the cluster, the store and the day's use, at a glance."""

    version: str = field("The llmgw version this control plane runs.")
    store: str = field("The store's backend: sqlite or postgres.")
    scheduler: str = field("running, or why this control plane has none.")
    cluster: ClusterSummary | None = field("The fleet; null without a scheduler.", None)
    requests_24h: int = field("Requests served in the last 24 hours.", 0)
    tokens_24h: int = field("Prompt and completion tokens in the last 24 hours.", 0)
    cost_micros_24h: int = field("What the last 24 hours cost, in millionths of the currency.", 0)
    currency: str = field("The currency of every cost.", "USD")


# ---------------------------------------------------------------- settings


@attrs.frozen(kw_only=True)
class SettingInfo:
    """A cluster setting: what is in force and where it comes from."""

    key: str = field("The setting's name, as server.yaml names it: router.retries.attempts.")
    value: Any = field("The cluster's value: the store's when set there and usable, else server.yaml's.")
    source: str = field("store (set through the API, wins) or file (server.yaml, or its default).")
    file_value: Any = field("What server.yaml (or its default) says, in force when the setting is unset.")
    type: str = field("integer, duration, boolean, choice or text.")
    choices: list[str] = field("The values allowed, for a choice.", factory=list)
    doc: str = field("What it does.")
    version: int = field("Changes made to it through the API (0: never set).", 0)
    updated_at: dt.datetime | None = field("When it was last set through the API.", None)
    actor: str | None = field("Who set it last.", None)
    applies: str = field("live: a change is taken up by this control plane at once (the others within seconds); "
                         "restart: it takes effect when llmgw server next starts on each control plane. The "
                         "same word GET /server-config gives the key.", "restart")
    restart_pending: bool = field("This control plane still runs another value, until it restarts.", False)
    problem: str | None = field("Why the store's value cannot be used (it was written past the API's checks, or "
                                "names a band server.yaml no longer has), so server.yaml's applies; null when "
                                "none.", None)


@attrs.frozen(kw_only=True)
class SettingList:
    """Every cluster setting the API can change."""

    settings: list[SettingInfo] = field("The settings, by key.")


@attrs.frozen(kw_only=True)
class SettingValue:
    """A new value for a setting."""

    value: Any = field("The value, as JSON: a number, true/false, or text like 30s for a duration.",
                       schema={"type": ["number", "boolean", "string"]})


@attrs.frozen(kw_only=True)
class SettingChangeInfo:
    """One change to a setting."""

    id: int = field("The change's number; later changes have larger ones.")
    key: str = field("The setting.")
    value: Any = field("The value set; null when it was unset.")
    removed: bool = field("The setting was unset (back to server.yaml's value).")
    version: int = field("The setting's version after the change.")
    at: dt.datetime = field("When.")
    actor: str = field("Who.")


@attrs.frozen(kw_only=True)
class SettingHistory:
    """Changes to settings, newest first."""

    changes: list[SettingChangeInfo] = field("The changes.")


@attrs.frozen(kw_only=True)
class SettingHistoryQuery:
    key: str | None = field("Only this setting's changes.", None, schema={"enum": list(SETTING_KEYS)})
    limit: int = field("At most this many changes (1-1000).", 100, schema={"minimum": 1, "maximum": 1000})


# ---------------------------------------------------------------- audit


@attrs.frozen(kw_only=True)
class AuditEntry:
    """One change, and how it ended."""

    id: int = field("The event's number; later events have larger ones.")
    at: dt.datetime = field("When.")
    actor: str = field("Who, as the request's X-Llmgw-Actor (or the command's user) said.")
    action: str = field("What, like models.scale or users.create.")
    target: str = field("What it was done to, like model:qwen-small or user:usr-….")
    via: str | None = field("Through what: api, ctl, console, portal or cli.", None)
    outcome: str | None = field("ok, or refused.", None)
    reason: str | None = field("Why it was refused.", None)
    detail: dict[str, Any] | None = field("The fields given (secrets taken out) and what else was recorded.", None)


@attrs.frozen(kw_only=True)
class AuditList:
    """Audit events, newest first."""

    events: list[AuditEntry] = field("The events.")
    next_before_id: int | None = field("Pass as before_id for the page before this one; null at the end.", None)


@attrs.frozen(kw_only=True)
class AuditQuery:
    since: str | None = field("From this time: 2026-09-01, an ISO 8601 time, or a span back like 24h or 7d.", None,
                              schema=forms.WHEN)
    until: str | None = field("Up to this time (same forms); default now.", None, schema=forms.WHEN)
    actor: str | None = field("Only this actor's.", None, schema=forms.ID)
    action: str | None = field("Only this action; ending in * matches a prefix (models.*).", None, schema=forms.ID)
    target: str | None = field("Only changes to this target, like model:qwen-small.", None, schema=forms.ID)
    before_id: int | None = field("Only events older than this one (paging back).", None, schema={"minimum": 1})
    limit: int = field("At most this many events (1-1000).", 100, schema={"minimum": 1, "maximum": 1000})


# ---------------------------------------------------------------- usage


@attrs.frozen(kw_only=True)
class UsageQuery:
    by: str = field("Group by org, team, project, user, key, model, or none.", "org", schema=forms.GROUP)
    period: str = field("One row per hour, day, month, or total for the whole span.", "total",
                        schema={"enum": ["hour", "day", "month", "total"]})
    since: str = field("From this time: 2026-09-01, an ISO 8601 time, or a span back like 24h.", "24h",
                       schema=forms.WHEN)
    until: str | None = field("Up to this time (same forms); default now.", None, schema=forms.WHEN)
    scope: str | None = field("Only this part of the tree: org:NAME, team:ORG/TEAM, project:PATH, user:EMAIL, key:ID.",
                              None, schema=forms.SCOPE)


@attrs.frozen(kw_only=True)
class UsageExportQuery:
    by: str = field("Comma-separated groups among org, team, project, user, key, model; empty for none.", "project",
                    schema=forms.GROUPS)
    period: str = field("One row per hour, day, month, or total.", "day",
                        schema={"enum": ["hour", "day", "month", "total"]})
    since: str = field("From this time: 2026-09-01, an ISO 8601 time, or a span back like 30d.", "30d", key="from",
                       schema=forms.WHEN)
    until: str | None = field("Up to this time (same forms); default now.", None, key="to", schema=forms.WHEN)
    scope: str | None = field("Only this part of the tree, as for /usage.", None, schema=forms.SCOPE)


@attrs.frozen(kw_only=True)
class UsageRowOut:
    """Use in one period by one group."""

    period_start: dt.datetime | None = field("The period's start (UTC); null for total.")
    group: str | None = field("The group's id (or model name); null without grouping or when none applied.")
    label: str | None = field("The group as people know it: a path, an email, a key id or a model.")
    requests: int = field("Requests.")
    errors: int = field("Requests answered with an error status.")
    prompt_tokens: int = field("Prompt tokens.")
    completion_tokens: int = field("Tokens generated.")
    cached_tokens: int = field("Prompt tokens served from an engine's cache.")
    cost_micros: int = field("Cost in millionths of the currency.")
    latency_ms_avg: float = field("Average time to the whole answer, in milliseconds.")


@attrs.frozen(kw_only=True)
class UsageReport:
    """Use summed by group and period."""

    by: str = field("The grouping.")
    period: str = field("The period of each row.")
    since: dt.datetime = field("The span's start.")
    until: dt.datetime = field("The span's end.")
    currency: str = field("The currency of every cost.")
    rows: list[UsageRowOut] = field("The sums, by period then group.")


# ---------------------------------------------------------------- capacity quotas


@attrs.frozen(kw_only=True)
class Capacity:
    """GPUs, cores and memory."""

    gpus: int | None = field("GPUs; null is no limit.", None)
    cores: int | None = field("CPU cores; null is no limit.", None)
    memory: str | None = field("Host memory like 256GiB; null is no limit.", None)


@attrs.frozen(kw_only=True)
class QuotaSet:
    """A capacity quota for an organization, team or project."""

    scope: str = field("Whose: org:NAME, team:ORG/TEAM or project:PATH.", schema=forms.TREE_SCOPE)
    limit: Capacity = field("The most its models may hold at once.", factory=Capacity)
    guaranteed: Capacity = field("What its models keep even when others want it.", factory=Capacity)


@attrs.frozen(kw_only=True)
class Held:
    """What a scope's models hold now."""

    gpus: int = field("GPUs held by its replicas.")
    cores: int = field("CPU cores reserved by its replicas.")
    memory_bytes: int = field("Host memory reserved by its replicas, in bytes.")


@attrs.frozen(kw_only=True)
class Quota:
    """A capacity quota, and what its scope holds now."""

    scope: str = field("Whose, as kind:path.")
    id: str = field("The organization's, team's or project's id.")
    limit: Capacity = field("The most its models may hold at once.")
    guaranteed: Capacity = field("What its models keep even when others want it.")
    held: Held | None = field("What its models' replicas hold now; null without a scheduler.", None)
    updated_at: dt.datetime | None = field("When the quota was last changed.", None)
    actor: str | None = field("Who changed it last.", None)


@attrs.frozen(kw_only=True)
class QuotaList:
    """Every capacity quota."""

    quotas: list[Quota] = field("The quotas, by scope.")


@attrs.frozen(kw_only=True)
class ScopeQuery:
    scope: str = field("Whose: org:NAME, team:ORG/TEAM, project:PATH (and for limits user:EMAIL, key:ID).",
                       schema=forms.SCOPE)

