"""What the join-code endpoints read and answer."""

from __future__ import annotations

import attrs

from llmgw.admin import forms
from llmgw.admin.fields import field


@attrs.frozen(kw_only=True)
class JoinCodeCreate:
    """A join code to make."""

    ttl: str = field("How long the code works, like 30m or 1h (1m to 7d).", "1h", schema=forms.JOIN_TTL)
    name: str = field("The node's name the code is for; empty lets the machine use its host name or --name.", "")


@attrs.frozen(kw_only=True)
class JoinCodeIssued:
    """A new join code: shown once, since the store keeps only its secret's hash."""

    id: str = field("The code's id, as `ctl node join-codes` lists it.")
    code: str = field("The code itself, for `llmgw join CODE` on the machine; it works once.")
    command: str = field("The line to run on the machine.")
    expires_at: str = field("When the code stops working (UTC, ISO 8601).")
    name: str = field("The node's name the code is for; empty: the machine's choice.", "")
    addresses: list[str] = field("The control planes' agent addresses the machine dials.", factory=list)
    ca_sha256: str = field("The SHA-256 fingerprint of the cluster's CA, which the machine checks.", "")


@attrs.frozen(kw_only=True)
class JoinCodeInfo:
    """A join code not yet used nor expired (never its secret)."""

    id: str = field("The code's id.")
    expires_at: str = field("When it stops working (UTC, ISO 8601).")
    name: str = field("The node's name it is for; empty: the machine's choice.", "")
    created_by: str = field("Who made it.", "")
    created_at: str = field("When it was made (UTC, ISO 8601).", "")


@attrs.frozen(kw_only=True)
class JoinCodeList:
    """The join codes that still work."""

    codes: list[JoinCodeInfo] = field("The codes, soonest to expire first.", factory=list)
