"""The principal: what the serving path knows about the key behind a request.

This module is the contract between the router (which asks) and the key
resolver (which answers); both sides import it and nothing else of each other.
"""

from __future__ import annotations

import datetime as dt
from typing import Protocol

import attrs

from llmgw.store.records import Limits


@attrs.frozen(kw_only=True)
class Principal:
    key_id: str
    key_prefix: str
    key_name: str
    kind: str  #: "service", "member" or "personal"
    org_id: str | None
    team_id: str | None
    project_id: str | None
    user_id: str | None
    #: the key's priority band; None: the gateway's default band
    band: str | None
    #: every allowlist on the chain intersected (key's own included); None: any model
    allowed_models: frozenset[str] | None
    #: the limits on the chain, widest first (org, team, project, user, key)
    limits: tuple[Limits, ...] = ()
    expires_at: dt.datetime | None = None
    #: the scope ("org", "project" or "key") whose residency rule keeps this key's requests on the
    #: cluster's own engines; "" when none does
    in_cluster: str = ""
    #: routing profiles: the routing profile set on the key, its project or its organization (the narrowest
    #: set); None: routed as always (llmgw.router.routing_profiles)
    routing: str | None = None

    def may_use(self, model: str) -> bool:
        return self.allowed_models is None or model in self.allowed_models


#: The principal of every request when `auth.keys_required` is false.
ANONYMOUS = Principal(
    key_id="", key_prefix="", key_name="anonymous", kind="anonymous",
    org_id=None, team_id=None, project_id=None, user_id=None,
    band=None, allowed_models=None,
)


class AuthError(Exception):
    """A request whose key cannot be used: 401 (no/unknown/revoked/expired key) or 403."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class KeyResolverProtocol(Protocol):
    async def resolve(self, secret: str) -> Principal:
        """The principal of a key's secret, from a short-lived cache or the store.

        Raises AuthError: 401 `invalid_api_key` for unknown, revoked or expired
        keys (the message says which, never echoing the secret), 403
        `account_suspended` when the owning person is not active.
        """

    def invalidate(self, key_id: str | None = None) -> None:
        """Forget cached principals (of one key, or all) after a change."""
