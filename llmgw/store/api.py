"""The Store API: everything llmgw keeps, behind one async interface.

Two backends implement it with the same behaviour: SQLite
(:mod:`llmgw.store.sqlite`) and PostgreSQL (:mod:`llmgw.store.postgres`).
Open one with :func:`llmgw.store.open_store`.

Conventions, the same for every method:

- ``get_*`` returns ``None`` when the thing does not exist; methods that
  change something raise :class:`~llmgw.store.errors.NotFound` instead.
- Every input is checked before anything is written; a malformed one raises
  :class:`~llmgw.store.errors.Invalid`, a name already taken in its parent or
  the removal of something not empty :class:`~llmgw.store.errors.Conflict`.
- Datetimes given must be timezone-aware; they are kept and returned in UTC.
- Money is integer micro-dollars.
"""

from __future__ import annotations

import abc
import datetime as dt
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any, BinaryIO

from .client_data import (
    DEFAULT_THREAD_RETENTION,
    MAX_NOTES_PER_AGENT,
    MAX_THREAD_TURNS,
    Batch,
    BatchResult,
    MemoryNote,
    ProjectFeatures,
    StoredFile,
    ThreadTurn,
)
from .people import ForgetReport, ScopeRule
from .mail import QueuedMail
from .records import (
    ApiKey,
    AuditEvent,
    CatalogEntry,
    Lease,
    Limits,
    Membership,
    Organization,
    PasswordReset,
    Project,
    ReplicaView,
    ResolvedKey,
    Setting,
    SettingChange,
    StoredResponse,
    Team,
    UsageRow,
    UsageSum,
    User,
    WebSession,
)


class Store(abc.ABC):
    """One llmgw store. Safe to share between tasks of one event loop."""

    # ---- lifecycle ---------------------------------------------------------

    @property
    @abc.abstractmethod
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgres"``."""

    @property
    @abc.abstractmethod
    def schema_version(self) -> int:
        """The highest migration applied (read when the store was opened)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close every connection. The store cannot be used afterwards."""

    @abc.abstractmethod
    async def ping(self) -> None:
        """Round-trip to the database; raises StoreUnavailable when it does not answer."""

    # ---- tenancy: organizations, teams, projects ---------------------------

    @abc.abstractmethod
    async def create_org(self, name: str) -> Organization:
        """A new organization; its name is unique among organizations."""

    @abc.abstractmethod
    async def get_org(self, org_id: str) -> Organization | None: ...

    @abc.abstractmethod
    async def get_org_by_name(self, name: str) -> Organization | None: ...

    @abc.abstractmethod
    async def list_orgs(self) -> list[Organization]:
        """Every organization, by name."""

    @abc.abstractmethod
    async def rename_org(self, org_id: str, name: str) -> Organization: ...

    @abc.abstractmethod
    async def delete_org(self, org_id: str) -> None:
        """Remove an organization with no teams and no projects left (else Conflict).
        Its memberships and limits go with it."""

    @abc.abstractmethod
    async def create_team(self, org_id: str, name: str) -> Team:
        """A new team; its name is unique within its organization."""

    @abc.abstractmethod
    async def get_team(self, team_id: str) -> Team | None: ...

    @abc.abstractmethod
    async def get_team_by_name(self, org_id: str, name: str) -> Team | None: ...

    @abc.abstractmethod
    async def list_teams(self, org_id: str | None = None) -> list[Team]:
        """The teams of one organization (or of all), by name."""

    @abc.abstractmethod
    async def rename_team(self, team_id: str, name: str) -> Team: ...

    @abc.abstractmethod
    async def delete_team(self, team_id: str) -> None:
        """Remove a team with no projects left (else Conflict)."""

    @abc.abstractmethod
    async def create_project(self, org_id: str, name: str, team_id: str | None = None) -> Project:
        """A new project in a team of ``org_id``, or directly in the organization.
        Its name is unique within its parent (the team, else the organization)."""

    @abc.abstractmethod
    async def get_project(self, project_id: str) -> Project | None: ...

    @abc.abstractmethod
    async def get_project_by_name(
        self, org_id: str, name: str, team_id: str | None = None
    ) -> Project | None: ...

    @abc.abstractmethod
    async def list_projects(
        self, org_id: str | None = None, team_id: str | None = None
    ) -> list[Project]:
        """Projects of an organization (every one, in teams or not), of a team, or all."""

    @abc.abstractmethod
    async def rename_project(self, project_id: str, name: str) -> Project: ...

    @abc.abstractmethod
    async def delete_project(self, project_id: str) -> None:
        """Remove a project with no usable keys left (else Conflict); its
        revoked and expired keys, memberships and limits go with it."""

    # ---- tenancy: people and memberships -----------------------------------

    @abc.abstractmethod
    async def create_user(
        self,
        email: str,
        name: str,
        *,
        role: str = "none",
        state: str = "active",
        password_hash: str | None = None,
    ) -> User:
        """A new person; the email (kept in lower case) is unique."""

    @abc.abstractmethod
    async def get_user(self, user_id: str) -> User | None: ...

    @abc.abstractmethod
    async def get_user_by_email(self, email: str) -> User | None:
        """Case-insensitive."""

    @abc.abstractmethod
    async def list_users(self, *, state: str | None = None, role: str | None = None) -> list[User]:
        """People, by email, optionally only those in a state or with a staff role."""

    @abc.abstractmethod
    async def set_user_state(self, user_id: str, state: str) -> User: ...

    @abc.abstractmethod
    async def set_user_role(self, user_id: str, role: str) -> User: ...

    @abc.abstractmethod
    async def set_password_hash(self, user_id: str, password_hash: str | None) -> User:
        """None removes the password (single sign-on only)."""

    @abc.abstractmethod
    async def set_user_name(self, user_id: str, name: str) -> User:
        """The name shown for a person."""

    @abc.abstractmethod
    async def set_user_email(self, user_id: str, email: str) -> User:
        """A person's new address (Conflict when another person has it)."""

    @abc.abstractmethod
    async def scim_external_ids(self, org_id: str, resource_kind: str) -> dict[str, str]:
        """The externalIds an organization's SCIM client gave its people (``user``) or teams (``team``), by id."""

    @abc.abstractmethod
    async def set_scim_external_id(self, org_id: str, resource_kind: str, resource_id: str,
                                   external_id: str | None) -> None:
        """Keep (or, with None, drop) the externalId of a person or team for an organization's SCIM client."""

    @abc.abstractmethod
    async def add_membership(
        self, user_id: str, scope_kind: str, scope_id: str, role: str = "member"
    ) -> Membership:
        """Make a person a member (or owner) of an org, team or project; when
        already a member, the role is changed."""

    @abc.abstractmethod
    async def remove_membership(self, user_id: str, scope_kind: str, scope_id: str) -> bool:
        """False when there was no such membership."""

    @abc.abstractmethod
    async def list_memberships(
        self,
        *,
        user_id: str | None = None,
        scope_kind: str | None = None,
        scope_id: str | None = None,
    ) -> list[Membership]: ...

    # ---- keys --------------------------------------------------------------

    @abc.abstractmethod
    async def create_key(
        self,
        *,
        key_hash: str,
        prefix: str,
        name: str,
        project_id: str | None = None,
        user_id: str | None = None,
        expires_at: dt.datetime | None = None,
        priority_band: str | None = None,
        allowed_models: Sequence[str] | None = None,
    ) -> ApiKey:
        """Record a key the caller generated: its SHA-256 (hex) and the prefix
        shown to people. It needs a project, a person, or both (a member key)."""

    @abc.abstractmethod
    async def get_key(self, key_id: str) -> ApiKey | None: ...

    @abc.abstractmethod
    async def get_key_by_hash(self, key_hash: str) -> ApiKey | None:
        """The key with this hash, revoked or expired ones included."""

    @abc.abstractmethod
    async def resolve_key(self, key_hash: str) -> ResolvedKey | None:
        """The key with this hash, its organization and team, its owner's
        state and every limit on its chain, read in one transaction."""

    @abc.abstractmethod
    async def list_keys(
        self,
        *,
        project_id: str | None = None,
        user_id: str | None = None,
        include_revoked: bool = True,
    ) -> list[ApiKey]:
        """Keys of a project and/or a person (or every key), newest first;
        ``include_revoked=False`` leaves out those revoked by now."""

    @abc.abstractmethod
    async def revoke_key(self, key_id: str, at: dt.datetime | None = None) -> ApiKey:
        """Revoke now, or at ``at`` (a rotation's overlap). The earliest
        revocation stands: revoking a revoked key again changes nothing,
        unless it brings a scheduled revocation forward."""

    @abc.abstractmethod
    async def set_key_expiry(self, key_id: str, expires_at: dt.datetime | None) -> ApiKey: ...

    @abc.abstractmethod
    async def touch_keys(self, last_used: Mapping[str, dt.datetime]) -> int:
        """Record when keys were last used (key id -> time), in one
        transaction; a time older than the one kept is ignored. Unknown ids are
        skipped. Returns how many keys changed."""

    @abc.abstractmethod
    async def rehash_key(self, key_id: str, old_hash: str, new_hash: str) -> bool:
        """Replace a key's stored hash, only while it is still ``old_hash``
        (hashes move to a keyed hash when a key is used). Returns whether it changed."""

    # ---- limits ------------------------------------------------------------

    @abc.abstractmethod
    async def set_limits(
        self,
        scope_kind: str,
        scope_id: str,
        *,
        rpm: int | None = None,
        tpm: int | None = None,
        budget_micros: int | None = None,
        budget_period: str | None = None,
        allowed_models: Sequence[str] | None = None,
    ) -> Limits:
        """Replace every limit on one scope (org, team, project, user, key)."""

    @abc.abstractmethod
    async def get_limits(self, scope_kind: str, scope_id: str) -> Limits | None: ...

    @abc.abstractmethod
    async def list_budgets(self) -> list[Limits]:
        """Every scope's limits that set a budget (for llmgw_budget_spent_ratio)."""

    @abc.abstractmethod
    async def clear_limits(self, scope_kind: str, scope_id: str) -> bool:
        """False when the scope had no limits."""

    @abc.abstractmethod
    async def get_limits_chain(
        self,
        *,
        org_id: str | None = None,
        team_id: str | None = None,
        project_id: str | None = None,
        user_id: str | None = None,
        key_id: str | None = None,
    ) -> list[Limits]:
        """The limits set on each scope named, widest first (org, team,
        project, user, key), in one query; scopes without limits are absent."""

    # ---- usage -------------------------------------------------------------

    @abc.abstractmethod
    async def insert_usage_rows(self, rows: Sequence[UsageRow]) -> int:
        """Insert rows and add them to the hourly and daily sums, all in one
        transaction. Rows whose request id is already stored are skipped, so
        a batch may be retried. Returns how many were inserted."""

    @abc.abstractmethod
    async def get_usage(self, request_id: str) -> UsageRow | None: ...

    @abc.abstractmethod
    async def list_usage(
        self,
        *,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        org_id: str | None = None,
        team_id: str | None = None,
        project_id: str | None = None,
        user_id: str | None = None,
        key_id: str | None = None,
        model: str | None = None,
        limit: int = 100,
    ) -> list[UsageRow]:
        """Rows in [since, until), newest first; ``model`` matches the served
        or the requested model."""

    @abc.abstractmethod
    async def spend_since(self, scope_kind: str, scope_id: str, since: dt.datetime) -> int:
        """Micro-dollars spent by a scope (org, team, project, user, key) from
        ``since`` until now, read from the sums (whole days, then whole hours,
        then the rows of the partial hour)."""

    @abc.abstractmethod
    async def claim_budget_notice(self, scope_kind: str, scope_id: str, period: str, period_start: dt.datetime,
                                  threshold: str) -> bool:
        """Record that a budget event (a ``threshold`` like ``0.8``, or ``refused``) is told for this scope's
        period starting at ``period_start``: True the first time, False when it was already (by any process)."""

    @abc.abstractmethod
    async def usage_sums(
        self,
        group_by: str | None,
        period: str,
        since: dt.datetime,
        until: dt.datetime,
        *,
        scope_kind: str | None = None,
        scope_id: str | None = None,
    ) -> list[UsageSum]:
        """Sums per bucket (``hour`` or UTC ``day``) whose start is in
        [since, until), per org/team/project/user/key/model (or None: one sum
        per bucket), optionally only for one scope. Ordered by bucket, then group."""

    @abc.abstractmethod
    async def delete_usage_before(self, cutoff: dt.datetime) -> int:
        """Remove usage rows older than ``cutoff`` (the retention); the sums
        are kept. Returns how many rows went."""

    @abc.abstractmethod
    async def delete_hourly_sums_before(self, cutoff: dt.datetime) -> int:
        """Remove hourly sums older than ``cutoff``; daily sums are kept."""

    # ---- settings ----------------------------------------------------------

    @abc.abstractmethod
    async def get_setting(self, key: str) -> Setting | None: ...

    @abc.abstractmethod
    async def get_settings(self) -> dict[str, Setting]:
        """Every setting, by key."""

    @abc.abstractmethod
    async def set_setting(self, key: str, value: Any, *, actor: str) -> Setting:
        """Set a JSON value, recording the change and who made it."""

    @abc.abstractmethod
    async def unset_setting(self, key: str, *, actor: str) -> bool:
        """Remove a setting (recorded in the history); False when it was not set."""

    @abc.abstractmethod
    async def setting_history(self, key: str | None = None, *, keys: Collection[str] | None = None,
                              limit: int = 100) -> list[SettingChange]:
        """Changes, newest first, of one key, of those in `keys`, or of all."""

    # ---- leases ------------------------------------------------------------

    @abc.abstractmethod
    async def try_acquire_lease(
        self, name: str, holder: str, ttl: dt.timedelta | float
    ) -> Lease | None:
        """Take the lease, or extend it when ``holder`` holds it already.
        None while someone else holds it. Taking a lease that is not held
        (never was, expired or released) starts a new epoch: epoch + 1."""

    @abc.abstractmethod
    async def renew_lease(
        self, name: str, holder: str, ttl: dt.timedelta | float, *, epoch: int | None = None,
        even_lapsed: bool = False,
    ) -> Lease | None:
        """Extend a lease ``holder`` still holds (and, when given, in that
        epoch); None when it has lapsed or is someone else's. With
        ``even_lapsed`` (an epoch needed) a lapsed lease is extended too while
        nobody has taken it since: its holder and epoch are still these."""

    @abc.abstractmethod
    async def release_lease(self, name: str, holder: str) -> bool:
        """Give the lease up now so another may take it; False when not held by ``holder``."""

    @abc.abstractmethod
    async def get_lease(self, name: str) -> Lease | None:
        """The lease as last taken (check ``held_at`` for whether it still is)."""

    # ---- replica views (llmgw.control.replica_view) ---------------------------

    @abc.abstractmethod
    async def publish_replica_view(self, name: str, holder: str, epoch: int, body: str) -> int | None:
        """Write the view ``name`` (its version grows when ``body`` differs) and confirm it now; None when a
        leader of a newer epoch wrote it meanwhile. Returns the version."""

    @abc.abstractmethod
    async def confirm_replica_view(self, name: str, holder: str, epoch: int) -> bool:
        """Say the view still stands (its ``confirmed_at`` is now); False when it is not ours in this epoch."""

    @abc.abstractmethod
    async def get_replica_view(self, name: str, *, unless_version: int | None = None) -> ReplicaView | None:
        """The view as last written (None: never); its body left out when its version is ``unless_version``."""

    @abc.abstractmethod
    async def list_replica_views(self, prefix: str) -> list[ReplicaView]:
        """Every view whose name starts with ``prefix``, by name (the standbys' reports of use)."""

    # ---- the run-time catalog ----------------------------------------------

    @abc.abstractmethod
    async def get_catalog_entry(self, name: str) -> CatalogEntry | None: ...

    @abc.abstractmethod
    async def list_catalog_entries(self) -> list[CatalogEntry]:
        """Every run-time catalog row, by name."""

    @abc.abstractmethod
    async def put_catalog_entry(
        self,
        name: str,
        kind: str,
        spec: Mapping[str, Any],
        *,
        actor: str,
        expect_version: int | None = None,
    ) -> CatalogEntry:
        """Create or replace a row. ``expect_version`` 0 means it must not
        exist yet, N that it must still be at version N (else Conflict, saying
        what it is at now); None writes whatever is there."""

    @abc.abstractmethod
    async def delete_catalog_entry(
        self, name: str, *, expect_version: int | None = None
    ) -> bool:
        """Remove a row; False when there was none. A row at another version
        than ``expect_version`` is left alone (Conflict)."""

    # ---- audit -------------------------------------------------------------

    @abc.abstractmethod
    async def append_audit(
        self, actor: str, action: str, target: str, detail: Mapping[str, Any] | None = None
    ) -> AuditEvent: ...

    @abc.abstractmethod
    async def list_audit(
        self,
        *,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
        before_id: int | None = None,
        limit: int = 100,
    ) -> list[AuditEvent]:
        """Events newest first. ``action`` ending in ``*`` matches a prefix
        (``keys.*``); ``before_id`` pages back from an earlier answer."""

    # ---- the portal: sessions and password reset links ----------------------

    @abc.abstractmethod
    async def create_web_session(
        self,
        *,
        token_hash: str,
        user_id: str,
        csrf_token: str,
        expires_at: dt.datetime,
        client: str = "",
        user_agent: str = "",
    ) -> WebSession:
        """Record a sign-in: the SHA-256 (hex) of the cookie the caller made."""

    @abc.abstractmethod
    async def get_web_session(self, token_hash: str) -> WebSession | None: ...

    @abc.abstractmethod
    async def touch_web_session(self, token_hash: str, at: dt.datetime) -> bool:
        """Record that the session was used at ``at`` (an older time is
        ignored); False when there is no such session."""

    @abc.abstractmethod
    async def set_web_session_key(self, token_hash: str, key_id: str | None) -> bool:
        """Remember the chat page's key of a session; False when there is no such session."""

    @abc.abstractmethod
    async def list_web_sessions(self, user_id: str) -> list[WebSession]:
        """A person's sessions, newest first."""

    @abc.abstractmethod
    async def delete_web_session(self, token_hash: str) -> WebSession | None:
        """Sign one session out; returns it as it was (None: there was none)."""

    @abc.abstractmethod
    async def delete_user_web_sessions(self, user_id: str, *, keep: str | None = None) -> list[WebSession]:
        """Sign a person out everywhere, but for the session whose hash is
        ``keep``; returns the sessions removed."""

    @abc.abstractmethod
    async def delete_stale_web_sessions(self, *, now: dt.datetime, idle_before: dt.datetime) -> list[WebSession]:
        """Remove sessions past their end at ``now`` or unused since
        ``idle_before``; returns them (their chat keys are to be revoked)."""

    @abc.abstractmethod
    async def create_password_reset(self, *, token_hash: str, user_id: str, expires_at: dt.datetime) -> PasswordReset:
        """Record a reset link (the SHA-256 hex of its token). The person's
        earlier links stop working: a newer one replaces them."""

    @abc.abstractmethod
    async def get_password_reset(self, token_hash: str) -> PasswordReset | None: ...

    @abc.abstractmethod
    async def use_password_reset(self, token_hash: str, at: dt.datetime) -> PasswordReset | None:
        """Spend a link at ``at``: the link as spent, or None when there is no
        such link or it was spent or had expired by then. Two uses at once:
        one wins."""

    @abc.abstractmethod
    async def delete_stale_password_resets(self, before: dt.datetime) -> int:
        """Remove links that expired before ``before`` (spent or not); returns how many."""

    # ---- Responses API answers kept for previous_response_id ----------------

    @abc.abstractmethod
    async def put_response(
        self,
        response_id: str,
        *,
        scope: str,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        response: Mapping[str, Any],
        ttl: dt.timedelta,
    ) -> StoredResponse:
        """Keep an answer for ``ttl`` (one kept under the same id is replaced)."""

    @abc.abstractmethod
    async def get_response(self, response_id: str) -> StoredResponse | None:
        """The answer kept under this id, unless it has expired."""

    @abc.abstractmethod
    async def delete_response(self, response_id: str) -> bool:
        """Forget an answer; False when there was none."""

    @abc.abstractmethod
    async def prune_responses(self, *, keep_at_most: int) -> int:
        """Remove the expired answers, then the oldest beyond ``keep_at_most``; returns how many went."""

    # ---- what clients keep: projects' switches, threads, memory notes, files, batches ----
    # (llmgw.store.client_data holds the records and the limits; llmgw.store.sql_client_data the SQL.)

    @abc.abstractmethod
    async def storage_used(self, owner: str) -> int:
        """What an owner (a project, else a person) keeps: its files' bytes, its batches' results, its
        threads' turns, its memory notes and its stored responses, in bytes of stored text."""

    @abc.abstractmethod
    async def get_project_features(self, project_id: str) -> ProjectFeatures:
        """A project's switches (threads, memory notes, answer cache); the defaults when never set."""

    @abc.abstractmethod
    async def list_project_features(self) -> list[ProjectFeatures]:
        """Every project whose switches were ever set, by project id."""

    @abc.abstractmethod
    async def set_project_features(
        self,
        project_id: str,
        *,
        actor: str,
        threads: bool | None = None,
        thread_retention: dt.timedelta | None = None,
        memory: bool | None = None,
        cache: bool | None = None,
        cache_ttl: dt.timedelta | None = None,
        storage_quota_bytes: int | None = None,
        strict_max_tokens: bool | None = None,
    ) -> ProjectFeatures:
        """Change some of a project's switches (None leaves one as it is); NotFound for no such project.
        ``storage_quota_bytes``: its own quota (0: no limit), or SERVER_QUOTA for the server's again.
        ``strict_max_tokens``: a max_tokens past what the context leaves is refused (400), not fitted."""

    @abc.abstractmethod
    async def get_thread_turns(self, project_id: str, thread_id: str) -> list[ThreadTurn]:
        """A thread's turns, oldest first; empty when there is none or it is past its retention."""

    @abc.abstractmethod
    async def append_thread_turn(
        self,
        project_id: str,
        thread_id: str,
        messages: Sequence[dict[str, Any]],
        *,
        tokens: int,
        retention: dt.timedelta = DEFAULT_THREAD_RETENTION,
        keep_turns: int = MAX_THREAD_TURNS,
        user_id: str | None = None,
    ) -> ThreadTurn:
        """Add a turn (creating the thread); the thread is kept ``retention`` from now, and only
        its newest ``keep_turns`` turns. ``user_id``: whose turn it is, so forgetting them deletes it."""

    @abc.abstractmethod
    async def delete_thread(self, project_id: str, thread_id: str) -> bool:
        """Forget a thread; False when there was none."""

    @abc.abstractmethod
    async def delete_expired_threads(self) -> int:
        """Remove threads past their retention; returns how many."""

    @abc.abstractmethod
    async def put_memory_note(
        self,
        project_id: str,
        agent: str,
        key: str,
        text: str,
        tags: Sequence[str] = (),
        *,
        max_notes: int = MAX_NOTES_PER_AGENT,
        user_id: str | None = None,
    ) -> tuple[MemoryNote, bool]:
        """Keep a note under its key (replacing one there), written by ``user_id``; True when it is new.
        Conflict when the
        agent already keeps ``max_notes`` notes."""

    @abc.abstractmethod
    async def get_memory_note(self, project_id: str, agent: str, key: str) -> MemoryNote | None: ...

    @abc.abstractmethod
    async def delete_memory_note(self, project_id: str, agent: str, key: str) -> bool:
        """False when there was no such note."""

    @abc.abstractmethod
    async def search_memory_notes(
        self, project_id: str, agent: str, *, text: str | None = None, tag: str | None = None, limit: int = 100,
    ) -> list[MemoryNote]:
        """Notes whose key or text holds ``text`` (any case) and that carry ``tag``, newest first."""

    @abc.abstractmethod
    async def create_file(
        self, owner: str, *, purpose: str, filename: str, content: bytes | BinaryIO,
        expires_at: dt.datetime | None = None,
    ) -> StoredFile:
        """Keep a file's bytes in the store; ``expires_at`` None keeps it until deleted. ``content`` given as
        an open file is read from where it stands to its end, 1 MiB at a time, and kept in pieces."""

    @abc.abstractmethod
    async def get_file(self, owner: str, file_id: str) -> StoredFile | None:
        """The owner's file, unless it has expired."""

    @abc.abstractmethod
    async def read_file_content(self, owner: str, file_id: str) -> bytes | None: ...

    @abc.abstractmethod
    async def iter_file_content(self, owner: str, file_id: str) -> AsyncIterator[bytes] | None:
        """The owner's file a piece (at most 1 MiB) at a time, never whole in memory; None when there is none."""

    @abc.abstractmethod
    async def list_files(
        self, owner: str, *, purpose: str | None = None, after: str | None = None, limit: int = 100,
    ) -> list[StoredFile]:
        """The owner's files newest first; ``after`` the last id of the page before."""

    @abc.abstractmethod
    async def delete_file(self, owner: str, file_id: str) -> bool: ...

    @abc.abstractmethod
    async def delete_expired_files(self) -> int:
        """Remove files past their expiry; returns how many."""

    @abc.abstractmethod
    async def create_batch(
        self,
        owner: str,
        *,
        key_id: str,
        principal: dict[str, Any],
        endpoint: str,
        completion_window: str,
        input_file_id: str,
        expires_at: dt.datetime,
        metadata: dict[str, str] | None = None,
    ) -> Batch:
        """A new batch, ``validating`` until the worker takes it."""

    @abc.abstractmethod
    async def get_batch(self, batch_id: str, *, owner: str | None = None) -> Batch | None:
        """The batch; a client's look-up passes its ``owner``."""

    @abc.abstractmethod
    async def list_batches(self, owner: str, *, after: str | None = None, limit: int = 20) -> list[Batch]:
        """The owner's batches newest first; ``after`` the last id of the page before."""

    @abc.abstractmethod
    async def list_open_batches(self, *, limit: int = 100) -> list[Batch]:
        """Batches still to run or finish (validating, in_progress, finalizing, cancelling), oldest first."""

    @abc.abstractmethod
    async def set_batch_status(
        self,
        batch_id: str,
        status: str,
        *,
        expect: Sequence[str] | None = None,
        total: int | None = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> Batch | None:
        """Move a batch to ``status``, only from one of ``expect`` when given (None: it was not)."""

    @abc.abstractmethod
    async def cancel_batch(self, owner: str, batch_id: str) -> Batch:
        """Ask a running batch to stop (``cancelling``); Conflict when it has ended already."""

    @abc.abstractmethod
    async def delete_batch(self, owner: str, batch_id: str) -> bool:
        """Forget an ended batch with its input, output and error files; False when the owner has no such
        batch; Conflict while it still runs."""

    @abc.abstractmethod
    async def record_batch_results(self, batch_id: str, results: Sequence[BatchResult]) -> Batch:
        """Keep the results of lines done and count them in the batch."""

    @abc.abstractmethod
    async def batch_lines_done(self, batch_id: str) -> set[int]:
        """The lines that have a result already."""

    @abc.abstractmethod
    async def finish_batch(
        self, batch_id: str, status: str, *, output_expires_at: dt.datetime | None = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> Batch:
        """End a batch: its results become its output and error files, and are dropped; ``errors`` (OpenAI's
        {code, message, param, line}) say why it failed."""

    # ---- rules scopes keep on their keys; forgetting a person ------------------
    # (llmgw.store.people holds the records; llmgw.store.sql_people the SQL.)

    @abc.abstractmethod
    async def get_scope_rule(self, scope_kind: str, scope_id: str) -> ScopeRule | None:
        """What an organization, team, project or key says about its keys (lifetime cap, residency)."""

    @abc.abstractmethod
    async def list_scope_rules(self) -> list[ScopeRule]:
        """Every scope rule set."""

    @abc.abstractmethod
    async def scope_rules_chain(self, *, org_id: str | None = None, team_id: str | None = None,
                                project_id: str | None = None, key_id: str | None = None) -> list[ScopeRule]:
        """The rules over a key, widest first."""

    @abc.abstractmethod
    async def set_scope_rule(self, scope_kind: str, scope_id: str, *, actor: str, max_key_ttl_s: Any = ...,
                             in_cluster: Any = ..., routing: Any = ...) -> ScopeRule | None:
        """Change a scope's rule (left out: kept; ``max_key_ttl_s`` None: no cap); None when nothing is left."""

    @abc.abstractmethod
    async def forget_user(self, user_id: str) -> ForgetReport:
        """Forget a person in one transaction (see llmgw.store.sql_people); zeros when already forgotten."""

    # ---- the portal's mail queue (llmgw.store.sql_mail) ---------------------------

    @abc.abstractmethod
    async def enqueue_mail(self, *, kind: str, to: str, subject: str, body: str) -> QueuedMail:
        """Queue a message, due now."""

    @abc.abstractmethod
    async def claim_mail(self, *, lease: dt.timedelta) -> QueuedMail | None:
        """The oldest message due, claimed for ``lease`` so no other sender takes it; None when none is due."""

    @abc.abstractmethod
    async def mail_sent(self, mail_id: str) -> None:
        """A claimed message went out: its body is emptied."""

    @abc.abstractmethod
    async def mail_failed(self, mail_id: str, error: str, *, retry_at: dt.datetime | None) -> None:
        """A claimed message did not go out: tried again at ``retry_at``, or (None) given up, its body emptied."""

    @abc.abstractmethod
    async def list_mail(self, *, state: str | None = None, limit: int = 100) -> list[QueuedMail]:
        """Messages newest first: all, or those waiting, sent or failed."""

    @abc.abstractmethod
    async def delete_mail_before(self, cutoff: dt.datetime) -> int:
        """Remove messages sent or given up and made before ``cutoff``."""

    # ---- kept requests (llmgw.store.sql_kept, `llmgw keys requests`) --------------

    @abc.abstractmethod
    async def set_keep_rule(self, scope_kind: str, scope_id: str, keep: dt.timedelta | None, *,
                            actor: str = "") -> Any:
        """Keep a key's or project's requests for ``keep`` (None: stop); the KeepRule, or None when stopped."""

    @abc.abstractmethod
    async def get_keep_rule(self, scope_kind: str, scope_id: str) -> Any:
        """A key's or project's own KeepRule; None when it set none."""

    @abc.abstractmethod
    async def keep_rules_of(self, key_id: str, project_id: str | None) -> dict[str, Any]:
        """The KeepRules bearing on a key: {"key": …, "project": …}, those set."""

    @abc.abstractmethod
    async def put_kept_request(self, **fields: Any) -> Any:
        """Keep one request and its answer (see llmgw.store.sql_kept); the KeptRequest."""

    @abc.abstractmethod
    async def get_kept_request(self, request_id: str) -> Any:
        """A KeptRequest not yet expired; None when there is none."""

    @abc.abstractmethod
    async def list_kept_requests(self, *, key_id: str | None = None, project_id: str | None = None,
                                 since: dt.datetime | None = None, limit: int = 100) -> list[Any]:
        """Kept requests not yet expired, newest first: a key's, a project's, or every one."""

    @abc.abstractmethod
    async def delete_expired_kept_requests(self) -> int:
        """Remove the kept requests whose time is up; how many."""
