"""Records of the rules scopes keep on their keys, and of a person forgotten.

A :class:`ScopeRule` is what an organization, team, project or key says
about the keys under it: the longest lifetime one may be made with, and
whether its requests must stay on the cluster's own engines. A
:class:`ForgetReport` says what forgetting a person removed, table by table.
"""

from __future__ import annotations

import datetime as dt

import attrs

#: Scopes a rule may be set on, widest first. A lifetime is capped on the
#: first three; residency on any of them but a team.
RULE_SCOPES = ("org", "team", "project", "key")

#: Where a forgotten person's row keeps its pseudonym: ``<pseudonym>@forgotten.invalid``
#: (``.invalid`` is reserved: no mail can ever reach it).
FORGOTTEN_DOMAIN = "forgotten.invalid"


@attrs.frozen(kw_only=True)
class ScopeRule:
    scope_kind: str  # one of RULE_SCOPES
    scope_id: str
    max_key_ttl_s: int | None = None  # None: no cap of its own
    in_cluster: bool = False
    #: routing profiles: the profile its keys are routed by (llmgw.router.routing_profiles); None: none set
    routing: str | None = None
    updated_at: dt.datetime | None = None
    actor: str = ""


#: What a forget counts, in the order a report lists it.
FORGET_PARTS = (
    ("keys_revoked", "keys revoked"),
    ("sessions", "portal sessions ended"),
    ("reset_links", "password reset links"),
    ("memberships", "memberships"),
    ("limits", "limits of their own"),
    ("files", "files"),
    ("batches", "batches"),
    ("responses", "stored responses"),
    ("kept_requests", "kept requests (llmgw keys requests)"),
    ("thread_turns", "turns of threads they wrote"),
    ("memory_notes", "memory notes they wrote last"),
    ("mail", "mail to them, queued or sent"),
    ("usage_rows", "usage rows now under the pseudonym"),
    ("usage_sums", "usage sums now under the pseudonym"),
    ("audit_events", "audit events with their name taken out"),
)


@attrs.frozen(kw_only=True)
class ForgetReport:
    """What forgetting one person did; every count 0 when nothing was left."""

    user_id: str
    pseudonym: str
    already_forgotten: bool = False
    keys_revoked: int = 0
    sessions: int = 0
    reset_links: int = 0
    memberships: int = 0
    limits: int = 0
    files: int = 0
    batches: int = 0
    responses: int = 0
    kept_requests: int = 0
    thread_turns: int = 0
    memory_notes: int = 0
    mail: int = 0
    usage_rows: int = 0
    usage_sums: int = 0
    audit_events: int = 0

    @property
    def removed_anything(self) -> bool:
        return any(getattr(self, name) for name, _ in FORGET_PARTS)


def is_forgotten_email(email: str) -> bool:
    return email.endswith("@" + FORGOTTEN_DOMAIN)
