"""What the facility endpoints read and answer: domains, their power, and holds (llmgw/control/facility.py)."""

from __future__ import annotations

import attrs

from llmgw.admin import forms
from llmgw.admin.fields import field

#: When a hold ends: an ISO 8601 time, or a span from now. That it is still to come is checked against the clock,
#: which JSON Schema cannot read (x-llmgw-after: now).
AHEAD = {
    "x-form": "a time to come: an ISO 8601 time like 2026-12-02T06:00:00Z, or a span from now like 4h or 2d",
    "pattern": rf"^({forms._DATE}T{forms._CLOCK}(\.[0-9]{{1,6}})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?"
               rf"|(?=.*[1-9]){forms._DURATION})$",
    "x-llmgw-after": "now",
}
DOMAIN_PATTERN = r"^((site|room|row|rack|pdu|node):[A-Za-z0-9][A-Za-z0-9._-]{0,127}|card:[A-Za-z0-9][A-Za-z0-9._-]{0,127}:[0-9]{1,4})$"


@attrs.frozen(kw_only=True)
class FacilityDomain:
    """A rack, PDU, row, room or site: the nodes labelled into it, its hold, and its power budget."""

    domain: str = field("The domain, as level:name (rack:r12-07).")
    nodes: list[str] = field("The nodes labelled into it.")
    held: str = field("Why nothing new is placed there, when a hold keeps it free; empty when none does.", "")
    cap_watts: float | None = field("Its budget's cap in watts; null when it has no budget.", None)
    limit_watts: int | None = field("The cap less facility.margin: what placement fills it to.", None)
    in_use_watts: int | None = field("What is placed there (or measured, when more), nodes' own draw and the "
                                     "budget's other_watts.", None)
    measured_watts: int | None = field("What its nodes' cards draw now, as their agents report.", None)


@attrs.frozen(kw_only=True)
class FacilityHold:
    """A domain kept free for maintenance."""

    domain: str = field("What is held: node:, rack:, pdu:, row:, room:, site:, or card:NODE:INDEX.")
    reason: str = field("Why, as the operator said; shown wherever the hold keeps work out.")
    until: str | None = field("When it ends (ISO 8601, UTC); null: until released.", None)
    drain: bool = field("Its nodes were drained too.", False)
    actor: str = field("Who held it.", "")
    since: str = field("When it was made (ISO 8601, UTC).", "")
    active: bool = field("It keeps work out now (false once its end has passed).", True)


@attrs.frozen(kw_only=True)
class FacilityReport:
    """Every domain and every hold."""

    domains: list[FacilityDomain] = field("Each domain the nodes' labels name or a budget gives, by name.")
    holds: list[FacilityHold] = field("Each hold, by domain.")


@attrs.frozen(kw_only=True)
class HoldCreate:
    """A domain to keep free."""

    domain: str = field("What to hold: rack:r12-07, pdu:r12-07-a, node:gpu01, card:gpu01:3, row:, room:, site:.",
                        schema={"pattern": DOMAIN_PATTERN})
    reason: str = field("Why: shown in explain-placement, ctl nodes and the audit log.",
                        schema={"minLength": 1, "maxLength": 500, "pattern": r"\S"})
    until: str | None = field("When it ends: an ISO 8601 time, or a span from now like 4h; null: until released.",
                              None, schema=AHEAD)
    drain: bool = field("Also move what runs on its nodes elsewhere, one replica at a time.", False)
