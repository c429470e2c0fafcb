"""The facility: where nodes stand, what is held for maintenance, and what racks and PDUs may draw.

**Domains.** A node is in the domains its labels name: `llmgw.io/site`,
`room`, `row`, `rack` and `pdu` (a comma-separated list, for a dual-fed
rack), each as `level:name` (`rack:r12-07`, `pdu:r12-07-a`); and in its own,
`node:ID`. A card is `card:NODE:INDEX`. A node without location labels is in
no domain but its own.

**Holds** keep a domain free: nothing new is placed on a held node, rack or
PDU (replicas already there stay unless the hold drains), and a held card is
never handed out. Each has a reason and may have an end, after which it no
longer counts. They are kept in the store (`control.facility_holds`).

**Power budgets** (`facility.budgets` in server.yaml): a replica goes where
none of its node's domains would pass `cap × (1 − margin)`. A domain's use is,
node by node, `node_watts` plus the larger of what is placed there (each card
at the power limit its agent reports, or `gpu_watts`; each reserved core at
`cpu_core_watts`) and what the node's cards draw now, plus the budget's
`other_watts`. A draw nobody knows counts as nothing: missing data never
blocks a placement.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from llmgw.config.server import FacilityConfig, PowerBudget

LEVELS = ("site", "room", "row", "rack", "pdu")
LABEL_PREFIX = "llmgw.io/"
HOLDS_SETTING = "control.facility_holds"
_DOMAIN = re.compile(r"(site|room|row|rack|pdu|node):([A-Za-z0-9][A-Za-z0-9._-]{0,127})|card:([A-Za-z0-9][A-Za-z0-9._-]{0,127}):(\d{1,4})")


def parse_domain(text: str) -> str:
    """The domain as written (`rack:r12-07`, `node:gpu01`, `card:gpu01:3`), or ValueError saying what to write."""
    text = str(text).strip()
    if not _DOMAIN.fullmatch(text):
        raise ValueError(f"{text!r} is not a domain: write level:name with a level of site, room, row, rack, pdu "
                         f"or node (rack:r12-07, node:gpu01), or card:NODE:INDEX for one card (card:gpu01:3)")
    return text


def card_of(domain: str) -> tuple[str, int] | None:
    """(node, card index) of a card:NODE:INDEX domain, or None."""
    match = _DOMAIN.fullmatch(domain)
    if match is None or match.group(3) is None:
        return None
    return match.group(3), int(match.group(4))


def domains_of(node_id: str, labels: Mapping[str, str]) -> list[str]:
    """Every domain a node is in, widest first, its own last."""
    out = []
    for level in LEVELS:
        value = labels.get(LABEL_PREFIX + level, "")
        for name in (value.split(",") if level == "pdu" else [value]):
            if name.strip():
                out.append(f"{level}:{name.strip()}")
    out.append(f"node:{node_id}")
    return out


# ---------------------------------------------------------------------------------------------- holds


@attrs.frozen
class Hold:
    domain: str
    reason: str
    until: float | None = None  #: epoch seconds; None: until released
    drain: bool = False  #: its nodes are drained too (replicas moved away, the replacement up first)
    actor: str = ""
    since: float = 0.0

    def active(self, now: float) -> bool:
        return self.until is None or now < self.until

    def words(self) -> str:
        end = "" if self.until is None else \
            f", until {dt.datetime.fromtimestamp(self.until, dt.timezone.utc):%Y-%m-%d %H:%M} UTC"
        return f"held ({self.domain}): {self.reason}{end}"

    def to_json(self) -> dict[str, Any]:
        return {"domain": self.domain, "reason": self.reason, "until": self.until, "drain": self.drain,
                "actor": self.actor, "since": self.since}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Hold:
        until = data.get("until")
        return cls(domain=str(data["domain"]), reason=str(data.get("reason", "")),
                   until=float(until) if until is not None else None, drain=bool(data.get("drain", False)),
                   actor=str(data.get("actor", "")), since=float(data.get("since", 0.0)))


def holds_from_setting(value: Any) -> dict[str, Hold]:
    """The holds a store setting keeps (what cannot be read is skipped)."""
    out: dict[str, Hold] = {}
    for item in value if isinstance(value, list) else []:
        try:
            hold = Hold.from_json(item)
            parse_domain(hold.domain)
        except (KeyError, TypeError, ValueError):
            continue
        out[hold.domain] = hold
    return out


def node_hold(holds: Mapping[str, Hold], node_id: str, labels: Mapping[str, str], now: float) -> Hold | None:
    """The hold that keeps the node free (its own, or one of its domains'), or None."""
    for domain in domains_of(node_id, labels):
        hold = holds.get(domain)
        if hold is not None and hold.active(now):
            return hold
    return None


def held_cards(holds: Mapping[str, Hold], now: float) -> dict[str, dict[int, Hold]]:
    """node -> card index -> its hold."""
    out: dict[str, dict[int, Hold]] = {}
    for hold in holds.values():
        card = card_of(hold.domain)
        if card is not None and hold.active(now):
            out.setdefault(card[0], {})[card[1]] = hold
    return out


def future_time(text: str, now: float) -> float:
    """Epoch seconds of an ISO 8601 time (UTC when it names no zone) or of a span from `now` (4h, 2d);
    ValueError saying what to write."""
    from llmgw.compat import fromisoformat
    from llmgw.config.units import Duration

    text = str(text).strip()
    forms = "an ISO 8601 time such as 2026-12-02T06:00:00Z, or a span from now such as 4h or 2d"
    if len(text) >= 10 and text[:4].isdigit() and text[4] == "-":
        try:
            when = fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{text[:60]!r} is not a time; give {forms}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        return when.timestamp()
    try:
        span = Duration.parse(text)
    except ValueError:
        raise ValueError(f"{text[:60]!r} is not a time; give {forms}") from None
    if span.total_seconds() <= 0:
        raise ValueError(f"{text!r}: give a span longer than 0s")
    return now + span.total_seconds()


# ---------------------------------------------------------------------------------------------- power


def card_watts(node: Any, index: int, config: FacilityConfig) -> float:
    """What one card may draw: the power limit its agent reports, else `gpu_watts` (0: not known)."""
    sensor = node.sensors.get(index) if getattr(node, "sensors", None) else None
    if sensor is not None and sensor.power_limit_w:
        return float(sensor.power_limit_w)
    return float(config.gpu_watts)


def replica_watts(node: Any, gpus: Sequence[int], cores: int, config: FacilityConfig) -> float:
    if gpus:
        return sum(card_watts(node, g, config) for g in gpus)
    return float(cores or 0) * config.cpu_core_watts


def _need_on(node: Any, cards: int, cores: int, config: FacilityConfig) -> float:
    """What a new replica of `cards` cards (or `cores` cores) would draw on `node`, before its cards are chosen:
    its cards at the highest limit the node's cards have."""
    if cards:
        limits = [card_watts(node, g.index, config) for g in node.gpus] or [float(config.gpu_watts)]
        return cards * max(limits)
    return float(cores or 0) * config.cpu_core_watts


@attrs.frozen
class DomainUse:
    domain: str
    cap: float
    limit: float  #: cap less the margin
    placed: float  #: nodes' own draw, what is placed there (or measured, when more), and the other draw
    measured: float  #: what the cards draw now
    nodes: tuple[str, ...]


class PowerBook:
    """Each budget's use, from the nodes and what holds their cards, for one placement decision."""

    def __init__(self, config: FacilityConfig, nodes: Iterable[Any], holdings: Iterable[Any]) -> None:
        self.config = config
        self.budgets: dict[str, PowerBudget] = {b.domain: b for b in config.budgets}
        self.members: dict[str, list[str]] = {d: [] for d in self.budgets}  # domain -> node ids
        self.domains: dict[str, list[str]] = {}  # node -> its budgeted domains
        nodes = list(nodes)
        self.nodes = {n.id: n for n in nodes}
        placed: dict[str, float] = {}
        #: replica -> (node, watts) of each holding, for what a preemption frees
        self.held: dict[str, list[tuple[str, float]]] = {}
        for h in holdings:
            node = self.nodes.get(h.node)
            if node is not None:  # one being stopped still draws until it has stopped
                watts = replica_watts(node, h.gpus, h.cores, config)
                placed[h.node] = placed.get(h.node, 0.0) + watts
                self.held.setdefault(h.replica_id, []).append((h.node, watts))
        self.node_draw: dict[str, float] = {}
        self.node_measured: dict[str, float] = {}
        for node in nodes:
            mine = [d for d in domains_of(node.id, node.labels) if d in self.budgets]
            self.domains[node.id] = mine
            for d in mine:
                self.members[d].append(node.id)
            measured = sum(s.power_w or 0.0 for s in getattr(node, "sensors", {}).values())
            self.node_measured[node.id] = measured
            self.node_draw[node.id] = config.node_watts + max(placed.get(node.id, 0.0), measured)

    def use(self, domain: str) -> DomainUse:
        budget = self.budgets[domain]
        members = self.members.get(domain, [])
        placed = budget.other_watts + sum(self.node_draw[n] for n in members)
        measured = sum(self.node_measured[n] for n in members)
        limit = budget.cap_watts * (1 - self.config.margin)
        return DomainUse(domain, float(budget.cap_watts), limit, placed, measured, tuple(members))

    def refusal(self, node_id: str, watts: float) -> str | None:
        """Why `watts` more on the node would pass one of its domains' limits, or None."""
        if watts <= 0:
            return None
        for domain in self.domains.get(node_id, ()):
            u = self.use(domain)
            if u.placed + watts > u.limit:
                return self.refusal_words(domain, watts)
        return None

    def kept_out(self, model: Any) -> dict[str, str]:
        """Nodes where even the model's smallest profile would pass a budget, each with the reason."""
        if not self.budgets:
            return {}
        out = {}
        for node_id, node in self.nodes.items():
            if not self.domains.get(node_id):
                continue
            needs = [_need_on(node, p.gpus, p.cores, self.config) for p in model.profiles] or [0.0]
            why = self.refusal(node_id, min(needs))
            if why is not None:
                out[node_id] = why
        return out

    def placement_refusal(self, placement: Any) -> tuple[str, str] | None:
        """(node, why) when a placement, its cards now chosen, passes a budget; every node of it counted together."""
        if not self.budgets:
            return None
        parts = [(placement.node, placement.gpus)] + list(getattr(placement, "workers", ()))
        extra: dict[str, float] = {}
        for node_id, gpus in parts:
            node = self.nodes.get(node_id)
            if node is not None:
                extra[node_id] = extra.get(node_id, 0.0) + replica_watts(node, gpus, placement.cores, self.config)
        freed = [part for victim in getattr(placement, "preempts", ()) for part in self.held.get(victim, ())]
        for domain in sorted({d for n in extra for d in self.domains.get(n, ())}):
            u = self.use(domain)
            watts = sum(w for n, w in extra.items() if domain in self.domains.get(n, ()))
            watts -= sum(w for n, w in freed if domain in self.domains.get(n, ()))
            if u.placed + watts > u.limit:
                node_id = next(n for n in extra if domain in self.domains.get(n, ()))
                return node_id, self.refusal_words(domain, watts)
        return None

    def refusal_words(self, domain: str, watts: float) -> str:
        u = self.use(domain)
        margin = f" ({_kw(u.cap)} cap less {self.config.margin:.0%})" if self.config.margin else ""
        return f"{domain}: {_kw(u.placed)} of a {_kw(u.limit)} limit{margin} in use, the replica needs ~{_kw(watts)}"


def _kw(watts: float) -> str:
    return f"{watts / 1000:.1f} kW"


def budget_problems(config: FacilityConfig) -> list[tuple[tuple, str]]:
    """What is wrong in `facility:`, as (path under facility, sentence)."""
    problems: list[tuple[tuple, str]] = []
    if not 0 <= config.margin < 1:
        problems.append((("margin",), f"give a share from 0 to below 1, such as 0.1; got {config.margin}"))
    for key in ("gpu_watts", "cpu_core_watts", "node_watts"):
        if getattr(config, key) < 0:
            problems.append(((key,), "must not be negative"))
    seen = set()
    for index, budget in enumerate(config.budgets):
        try:
            domain = parse_domain(budget.domain)
            if domain.startswith(("card:", "node:")):
                raise ValueError(f"{domain!r}: a budget is for a site, room, row, rack or pdu")
        except ValueError as exc:
            problems.append((("budgets", index, "domain"), str(exc)))
        if budget.domain in seen:
            problems.append((("budgets", index, "domain"), f"{budget.domain} has a budget already; give one each"))
        seen.add(budget.domain)
        if budget.cap_watts <= 0:
            problems.append((("budgets", index, "cap_watts"), f"must be more than 0, got {budget.cap_watts}"))
        if budget.other_watts < 0:
            problems.append((("budgets", index, "other_watts"), "must not be negative"))
    return problems


__all__ = ["HOLDS_SETTING", "LEVELS", "DomainUse", "Hold", "PowerBook", "budget_problems", "card_of",
           "domains_of", "future_time", "held_cards", "holds_from_setting", "node_hold", "parse_domain"]
