"""What the store holds, as immutable records.

Money is integer micro-dollars (1 USD = 1_000_000), never floats. Every
datetime is timezone-aware UTC. Ids are short strings the store makes
(``org-…``, ``team-…``, ``prj-…``, ``usr-…``, ``key-…``); a usage row's id is
the request id the gateway gave it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

import attrs

# ---- vocabularies -----------------------------------------------------------

StaffRole = Literal["none", "viewer", "operator", "billing", "admin"]
STAFF_ROLES: tuple[str, ...] = ("none", "viewer", "operator", "billing", "admin")

UserState = Literal["active", "pending", "suspended"]
USER_STATES: tuple[str, ...] = ("active", "pending", "suspended")

MemberScope = Literal["org", "team", "project"]
MEMBER_SCOPES: tuple[str, ...] = ("org", "team", "project")

MemberRole = Literal["owner", "member"]
MEMBER_ROLES: tuple[str, ...] = ("owner", "member")

LimitScope = Literal["org", "team", "project", "user", "key"]
# Also the order of a principal's chain, widest first.
LIMIT_SCOPES: tuple[str, ...] = ("org", "team", "project", "user", "key")

BudgetPeriod = Literal["day", "month"]
BUDGET_PERIODS: tuple[str, ...] = ("day", "month")

UsageGroup = Literal["org", "team", "project", "user", "key", "model"]
USAGE_GROUPS: tuple[str, ...] = ("org", "team", "project", "user", "key", "model")

SumPeriod = Literal["hour", "day"]
SUM_PERIODS: tuple[str, ...] = ("hour", "day")


def _lists_to_tuples(value: Any) -> Any:
    """A list given for a tuple field becomes a tuple, so records compare
    equal whichever was given; anything else is left for the store to judge."""
    return tuple(value) if isinstance(value, list) else value


# ---- tenancy ----------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Organization:
    id: str
    name: str
    created_at: dt.datetime


@attrs.frozen(kw_only=True)
class Team:
    id: str
    org_id: str
    name: str
    created_at: dt.datetime


@attrs.frozen(kw_only=True)
class Project:
    """A project sits in a team, or directly in its organization (team_id None)."""

    id: str
    org_id: str
    team_id: str | None
    name: str
    created_at: dt.datetime


@attrs.frozen(kw_only=True)
class User:
    id: str
    email: str  # always lower case
    name: str
    role: str  # staff role, one of STAFF_ROLES
    state: str  # one of USER_STATES
    password_hash: str | None  # None: signs in only through single sign-on
    created_at: dt.datetime


@attrs.frozen(kw_only=True)
class Membership:
    user_id: str
    scope_kind: str  # one of MEMBER_SCOPES
    scope_id: str
    role: str  # one of MEMBER_ROLES
    created_at: dt.datetime


# ---- keys and limits -------------------------------------------------------


@attrs.frozen(kw_only=True)
class ApiKey:
    """An API key. The secret is never stored, only its SHA-256 (hex).

    A key belongs to a project (a service key), to a person (personal), or
    to a person within a project (a member key).
    """

    id: str
    prefix: str  # the first characters of the secret, shown to people
    key_hash: str  # sha256 hex of the whole secret
    name: str
    project_id: str | None
    user_id: str | None
    created_at: dt.datetime
    expires_at: dt.datetime | None
    revoked_at: dt.datetime | None
    last_used_at: dt.datetime | None
    priority_band: str | None  # None: the gateway's default band
    # None: whatever the limits allow
    allowed_models: tuple[str, ...] | None = attrs.field(converter=_lists_to_tuples)

    @property
    def kind(self) -> str:
        """``service`` (a project's), ``member`` (a person's in a project) or ``personal``."""
        if self.project_id is None:
            return "personal"
        return "service" if self.user_id is None else "member"

    def usable_at(self, now: dt.datetime) -> bool:
        """True when the key is neither revoked nor expired at ``now``."""
        if self.revoked_at is not None and self.revoked_at <= now:
            return False
        return self.expires_at is None or now < self.expires_at


@attrs.frozen(kw_only=True)
class Limits:
    """Limits on one scope. None in a field means "no limit at this level".

    Levels only narrow: the gateway applies every level of a principal's chain.
    """

    scope_kind: str  # one of LIMIT_SCOPES
    scope_id: str
    rpm: int | None = None  # requests a minute
    tpm: int | None = None  # tokens a minute
    budget_micros: int | None = None  # money per period, micro-dollars
    budget_period: str | None = None  # one of BUDGET_PERIODS, set with budget_micros
    allowed_models: tuple[str, ...] | None = attrs.field(default=None, converter=_lists_to_tuples)
    updated_at: dt.datetime | None = None  # set by the store


@attrs.frozen(kw_only=True)
class ResolvedKey:
    """A key with everything the serving path needs to judge a request with it."""

    key: ApiKey
    org_id: str | None  # the project's organization; None for a personal key
    team_id: str | None
    user_state: str | None  # the owning person's state; None for a service key
    # The chain, widest first: org, team, project, user, key.
    limits: tuple[Limits, ...] = attrs.field(converter=_lists_to_tuples)
    #: the widest scope ("org", "project" or "key") whose rule keeps its requests on the cluster's own
    #: engines; "" when none does
    in_cluster: str = ""
    #: routing profiles: the narrowest routing profile set over the key (key, project, org); None: none
    routing: str | None = None


# ---- usage -----------------------------------------------------------------


@attrs.frozen(kw_only=True)
class UsageRow:
    """One request as served (or refused)."""

    request_id: str
    at: dt.datetime
    key_id: str | None = None
    project_id: str | None = None
    team_id: str | None = None
    org_id: str | None = None
    user_id: str | None = None
    model_requested: str = ""
    model_served: str = ""  # empty when nothing served it
    replica: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_micros: int = 0
    status: int = 200  # the HTTP status returned to the client
    outcome: str = "ok"  # ok, error, refused, cache_hit, …
    latency_ms: int = 0
    ttft_ms: int | None = None
    client_user: str | None = None  # the API's `user` field, as the client sent it
    metadata: dict[str, Any] | None = attrs.field(default=None, hash=False)
    tags: tuple[str, ...] = attrs.field(default=(), converter=_lists_to_tuples)
    # What the guardrails did (llmgw.guard): never the text, a matched value or a placeholder.
    guard_action: str | None = None  # flagged, redacted, blocked, or shadow-… (what a shadow policy would have done)
    guard_policy: str | None = None  # the policies that applied, widest first, joined by commas
    guard_category: str | None = None  # what it was about, like "secret: aws_access_key" or "judge: Violent"
    guard_ms: int | None = None  # time the checks took, judges included

    @property
    def model(self) -> str:
        """The model the sums count this row under: the one that served it, else the one asked for."""
        return self.model_served or self.model_requested


@attrs.frozen(kw_only=True)
class UsageSum:
    """Sums over one bucket (an hour or a UTC day) and one group."""

    bucket: dt.datetime
    group: str | None  # the org/team/project/user/key id or model; None: none, or no grouping
    requests: int
    errors: int  # requests answered with a status >= 400
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost_micros: int
    latency_ms_sum: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


# ---- settings, leases, audit -----------------------------------------------


@attrs.frozen(kw_only=True)
class Setting:
    key: str
    value: Any = attrs.field(hash=False)  # any JSON value
    version: int  # 1 for the first value this key ever had, +1 per change
    updated_at: dt.datetime
    actor: str


@attrs.frozen(kw_only=True)
class SettingChange:
    id: int
    key: str
    value: Any = attrs.field(hash=False)  # None when removed
    removed: bool
    version: int
    at: dt.datetime
    actor: str


#: What a run-time catalog row holds: a whole model, or the scaling of one server.yaml declares.
CATALOG_KINDS = ("model", "scaling")


@attrs.frozen(kw_only=True)
class CatalogEntry:
    """A model added at run time (kind ``model``), or a run-time change to the
    scaling of a model server.yaml declares (kind ``scaling``)."""

    name: str
    kind: str  # one of CATALOG_KINDS
    spec: dict[str, Any] = attrs.field(hash=False)  # as the model (or its scaling:) is written in server.yaml
    version: int  # 1 when created, +1 per change
    created_at: dt.datetime
    updated_at: dt.datetime
    actor: str


@attrs.frozen(kw_only=True)
class Lease:
    """A named lease (leadership). ``epoch`` grows every time the lease is
    taken while not held, so it fences out a former holder."""

    name: str
    holder: str
    epoch: int
    acquired_at: dt.datetime  # when this epoch began
    expires_at: dt.datetime

    def held_at(self, now: dt.datetime) -> bool:
        return now < self.expires_at


@attrs.frozen(kw_only=True)
class ReplicaView:
    """The replica set a leading control plane serves, as it last wrote it for the standbys (replica views).
    ``body`` is None when read with ``unless_version`` equal to ``version`` (nothing changed since)."""

    name: str
    holder: str
    epoch: int
    version: int  # grows whenever the body changes
    body: str | None
    changed_at: dt.datetime  # when the body last changed
    confirmed_at: dt.datetime  # when the leader last said it still stands


@attrs.frozen(kw_only=True)
class AuditEvent:
    id: int
    at: dt.datetime
    actor: str
    action: str
    target: str
    detail: dict[str, Any] | None = attrs.field(default=None, hash=False)


# ---- the portal: sign-in sessions and password reset links ----------------


@attrs.frozen(kw_only=True)
class WebSession:
    """A person signed in to the portal in one browser. The cookie's value is
    never stored, only its SHA-256 (hex)."""

    token_hash: str
    user_id: str
    csrf_token: str  # every form posted in this session must carry it
    created_at: dt.datetime
    last_seen_at: dt.datetime
    expires_at: dt.datetime  # created_at + auth.session_ttl; idleness ends it sooner
    client: str  # the address it was opened from
    user_agent: str
    chat_key_id: str | None = None  # the chat page's short-lived key, revoked with the session


@attrs.frozen(kw_only=True)
class PasswordReset:
    """A link to set a new password: works once, until ``expires_at``."""

    token_hash: str  # sha256 hex of the link's token
    user_id: str
    created_at: dt.datetime
    expires_at: dt.datetime
    used_at: dt.datetime | None = None

    def usable_at(self, now: dt.datetime) -> bool:
        return self.used_at is None and now < self.expires_at


@attrs.frozen(kw_only=True)
class StoredResponse:
    """A Responses API answer kept so a later request can continue it (``previous_response_id``)."""

    id: str  # resp_…
    scope: str  # who may continue it: its project, else its key; "" when the gateway takes no keys
    model: str  # the model asked for
    messages: list[dict[str, Any]] = attrs.field(hash=False)  # the conversation as chat messages, the answer last
    response: dict[str, Any] = attrs.field(hash=False)  # the response object as the client got it
    created_at: dt.datetime
    expires_at: dt.datetime
