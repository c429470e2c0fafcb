"""What the data endpoints read and answer: forgetting a person, where a scope's requests may be served
(residency) and how long keys made in a scope may live, as `llmgw users forget` and `llmgw keys residency|
lifetime` change them (through Tenancy)."""

from __future__ import annotations

import attrs

from llmgw.admin import forms
from llmgw.admin.fields import field

#: org:NAME, project:PATH or key:ID (a key's id or prefix).
RESIDENCY_SCOPE = {
    "x-form": "a scope: org:NAME, project:PATH or key:ID (a key's id or prefix)",
    "pattern": forms.SCOPE["pattern"].replace("(user|key)", "(key)").replace("(org|team|project)", "(org|project)"),
}


@attrs.frozen(kw_only=True)
class UserForget:
    """The person to forget, in the body so their email is in no URL."""

    user: str = field("Their email or id.", schema=forms.PERSON)


@attrs.frozen(kw_only=True)
class ForgetRemoved:
    """What a forget removed or renamed, by kind."""

    keys_revoked: int = field("Keys of theirs revoked (and their names cleared).")
    sessions: int = field("Portal sessions ended.")
    reset_links: int = field("Password reset links removed.")
    memberships: int = field("Memberships of organizations, teams and projects removed.")
    limits: int = field("Limits of their own (and of their keys) removed.")
    files: int = field("Files deleted: their own and their batches'.")
    batches: int = field("Batches deleted.")
    responses: int = field("Answers kept for their personal keys (Responses API) deleted.")
    kept_requests: int = field("Requests and answers kept for their keys (llmgw keys requests) deleted.")
    thread_turns: int = field("Turns they wrote in projects' threads (their prompts and the answers) deleted.")
    memory_notes: int = field("Memory notes they wrote last, in projects, deleted.")
    mail: int = field("Mail to them, queued or sent, deleted.")
    usage_rows: int = field("Usage rows now under the pseudonym, the client's user and metadata cleared.")
    usage_sums: int = field("Hourly and daily usage sums now under the pseudonym.")
    audit_events: int = field("Audit events that named them, now naming the pseudonym.")


@attrs.frozen(kw_only=True)
class ForgetResult:
    """What forgetting a person did; forgotten false and nothing_left true when nothing was left of them."""

    forgotten: bool = field("True when this call forgot them.")
    nothing_left: bool = field("True when nothing was kept about them (forgotten already, or never here).")
    pseudonym: str | None = field("What their usage and the audit log call them now; null when unknown.")
    removed: ForgetRemoved | None = field("What was removed; null when nothing was.")
    message: str = field("The same in words.")


@attrs.frozen(kw_only=True)
class ResidencyQuery:
    scope: str = field("Whose: org:NAME, project:PATH or key:ID.", schema=RESIDENCY_SCOPE)


@attrs.frozen(kw_only=True)
class ResidencySet:
    """Where a scope's requests may be served."""

    scope: str = field("Whose: org:NAME, project:PATH or key:ID.", schema=RESIDENCY_SCOPE)
    in_cluster: bool = field("True: only on the cluster's own engines (external providers and federation peers "
                             "are refused); false lifts the scope's own rule.")


@attrs.frozen(kw_only=True)
class Residency:
    """Where a scope's requests may be served."""

    scope: str = field("The scope, as kind:label.")
    in_cluster: bool = field("The scope's own rule keeps its requests on the cluster's own engines.")
    held_in_cluster: bool = field("Its requests are kept in the cluster, by its own rule or one above it.")


@attrs.frozen(kw_only=True)
class RoutingQuery:  # routing profiles
    scope: str = field("Whose: org:NAME, project:PATH or key:ID.", schema=RESIDENCY_SCOPE)


@attrs.frozen(kw_only=True)
class RoutingSet:
    """The routing profile a scope's keys are routed by."""

    scope: str = field("Whose: org:NAME, project:PATH or key:ID.", schema=RESIDENCY_SCOPE)
    routing: str | None = field("latency-first, cost-first, pinned:POOL, default or one of server.yaml's "
                                "router.profiles; null removes the scope's own (one set above it then holds).")


@attrs.frozen(kw_only=True)
class Routing:
    """The routing profile a scope sets, and the one in force (for a key: the narrowest set over it)."""

    scope: str = field("The scope, as kind:label.")
    routing: str | None = field("The scope's own routing profile; null when it sets none.")
    in_force: str = field("The profile its requests are routed by; default when none is set.")
    in_force_set_by: str | None = field("Where that profile is set: key, project or org; null for default.")


@attrs.frozen(kw_only=True)
class KeyLifetimeQuery:
    path: str = field("The organization, team or project: ORG, ORG/TEAM, ORG/PROJECT or ORG/TEAM/PROJECT.",
                      schema=forms.ORG_PATH)


@attrs.frozen(kw_only=True)
class KeyLifetimeSet:
    """The longest a key made in an organization, team or project may live."""

    path: str = field("The organization, team or project: ORG, ORG/TEAM, ORG/PROJECT or ORG/TEAM/PROJECT.",
                      schema=forms.ORG_PATH)
    max_key_ttl: str | None = field("Like 90d or 720h; null removes the scope's own cap. It may not be longer "
                                    "than the cap above it.", schema=forms.POSITIVE_DURATION)


@attrs.frozen(kw_only=True)
class KeyLifetime:
    """The lifetime cap of an organization, team or project, and the one in force there."""

    scope: str = field("The scope, as kind:path.")
    max_key_ttl_s: int | None = field("The scope's own cap in seconds; null when it sets none.")
    in_force_s: int | None = field("The narrowest cap over a key made here (its own, those above it, "
                                   "auth.max_key_ttl), in seconds; null when keys may live until revoked.")
    in_force_set_by: str | None = field("Where that cap is set, like 'team acme/ml' or "
                                        "'auth.max_key_ttl in server.yaml'.")


__all__ = ["ForgetRemoved", "ForgetResult", "KeyLifetime", "KeyLifetimeQuery", "KeyLifetimeSet", "Residency",
           "ResidencyQuery", "ResidencySet", "UserForget"]
