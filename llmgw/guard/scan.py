"""Running detectors over texts, and what a policy does with each finding.

`Scanner` runs the detectors a policy needs over a text once: what they
found is kept by the text's hash (never the text), so a conversation's
earlier turns, sent again with every new turn, are not read again, and a
text checked by an enforced and a shadow policy is read once for both.

`CompiledStage` is one direction (input or output) of an `Effective`
ready to use: which detector families run, the deny patterns compiled, and
the actions under the enforced and the shadow rules. `evaluate` turns
findings into `Hit`s. `GuardRecord` keeps what was done to one request for
its headers, usage row and metrics: the action, the policies, the category
and the time, never the text, a value or the placeholder map.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

import attrs

from llmgw.guard.normalize import DenyMatcher
from llmgw.guard.policy import RANK, StageRules
from llmgw.plugins.types import Detector, Finding

__all__ = ["ACTION_WORDS", "CompiledStage", "GuardRecord", "Hit", "Scanner", "evaluate", "strongest"]

#: The word recorded and sent in `x-llmgw-guard` for each action.
ACTION_WORDS = {"flag": "flagged", "redact": "redacted", "block": "blocked"}
DENY = "deny"


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class Scanner:
    """The detectors plugins give, each text read once per detector (cached by hash)."""

    def __init__(self, detectors: Mapping[str, Detector], *, cache_size: int = 8192) -> None:
        self.detectors = dict(detectors)
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[bytes, str], tuple[Finding, ...]] = OrderedDict()
        #: a kind or category -> the detectors that find it
        self.selectors: dict[str, set[str]] = {}
        for name, d in self.detectors.items():
            self.selectors.setdefault(d.category, set()).add(name)
            for kind in d.kinds:
                self.selectors.setdefault(kind, set()).add(name)

    def needed(self, rules: Iterable[StageRules]) -> tuple[str, ...]:
        """The detectors whose findings any of `rules` acts on."""
        names: set[str] = set()
        for r in rules:
            for selector in r.actions:
                names |= self.selectors.get(selector, set())
        return tuple(sorted(names))

    def unknown(self, rules: StageRules) -> list[str]:
        """Selectors no detector finds (a misspelt kind): the caller says so at start."""
        return [s for s in rules.actions if s not in self.selectors]

    def find(self, text: str, detectors: Sequence[str]) -> list[Finding]:
        """What `detectors` find in `text`, in order of position."""
        if not text or not detectors:
            return []
        digest = _digest(text) if len(text) > 16 else text.encode("utf-8", "surrogatepass")
        out: list[Finding] = []
        cache = self._cache
        for name in detectors:
            key = (digest, name)
            found = cache.get(key)
            if found is None:
                found = tuple(self.detectors[name].find(text))
                cache[key] = found
                if len(cache) > self.cache_size:
                    cache.popitem(last=False)
            else:
                cache.move_to_end(key)
            out.extend(found)
        out.sort(key=lambda f: (f.start, f.end))
        return out


@attrs.frozen
class Hit:
    """A finding and what the enforced and the shadow rules do with it ("" for nothing)."""

    finding: Finding
    slot: int  #: which text of the request or answer
    action: str
    would: str

    @property
    def label(self) -> str:
        """What a client or a record is told: the category and the kind (or deny pattern's name)."""
        f = self.finding
        if f.category == DENY:
            return f"deny: {f.detail.split(chr(39))[1]}" if f.detail.count("'") >= 2 else DENY
        return f.category if f.kind == f.category else f"{f.category}: {f.kind}"


@attrs.define
class CompiledStage:
    """One direction of an Effective, ready to run."""

    enforced: StageRules
    would: StageRules
    detectors: tuple[str, ...]
    #: (matcher, enforced action, shadow action) per deny pattern
    deny: list[tuple[DenyMatcher, str, str]]

    @classmethod
    def build(cls, scanner: Scanner, enforced: StageRules, would: StageRules) -> CompiledStage:
        deny = []
        in_force = set(enforced.deny)
        for rule in would.deny:
            matcher = DenyMatcher([rule.regex], [rule.name])
            deny.append((matcher, rule.action if rule in in_force else "", rule.action))
        return cls(enforced, would, scanner.needed((enforced, would)), deny)

    @property
    def max_chars(self) -> tuple[int | None, int | None]:
        return self.enforced.max_chars, self.would.max_chars

    def __bool__(self) -> bool:
        return bool(self.detectors or self.deny or self.would.max_chars is not None)


def evaluate(scanner: Scanner, stage: CompiledStage, texts: Sequence[str], first_slot: int = 0) -> list[Hit]:
    """Every finding in `texts` that either set of rules acts on."""
    hits: list[Hit] = []
    for i, text in enumerate(texts):
        if not text:
            continue
        for f in scanner.find(text, stage.detectors):
            action = stage.enforced.action_for(f.kind, f.category)
            would = stage.would.action_for(f.kind, f.category)
            if action or would:
                hits.append(Hit(f, first_slot + i, action, would))
        for matcher, action, would in stage.deny:
            hits.extend(Hit(f, first_slot + i, action, would) for f in matcher.find(text))
    return hits


def strongest(hits: Iterable[Hit], *, shadow: bool = False) -> Hit | None:
    """The hit with the strictest action (the first of equals), enforced or as the shadow rules say."""
    best: Hit | None = None
    for h in hits:
        rank = RANK[h.would if shadow else h.action]
        if rank and (best is None or rank > RANK[best.would if shadow else best.action]):
            best = h
    return best


@attrs.define
class GuardRecord:
    """What the guard did to one request: for headers, the usage row and the access log."""

    policy: str = ""
    action: str = ""  #: flagged, redacted, blocked, or shadow-… for what a shadow policy would have done
    category: str = ""
    stage: str = ""  #: input or output, where `action` happened
    seconds: float = 0.0  #: time the checks took, judges included
    enforced: str = ""  #: the strictest action taken (flag, redact, block): `x-llmgw-guard`
    _key: tuple[int, int] = (0, 0)

    def note(self, stage: str, action: str, category: str, *, shadow: bool = False) -> None:
        """Keep the strictest thing done (what was done wins over what would have been, at equal rank)."""
        if not action:
            return
        if not shadow and RANK[action] > RANK.get(self.enforced, 0):
            self.enforced = action
        key = (RANK[action], 0 if shadow else 1)
        if key > self._key:
            self._key = key
            word = ACTION_WORDS[action]
            self.action = f"shadow-{word}" if shadow else word
            self.category = category
            self.stage = stage

    @property
    def ms(self) -> int:
        return int(self.seconds * 1000)

    def headers(self) -> dict[str, str]:
        """`x-llmgw-guard` and `x-llmgw-guard-policy`, once something was enforced."""
        if not self.enforced:
            return {}
        return {"x-llmgw-guard": ACTION_WORDS[self.enforced], "x-llmgw-guard-policy": self.policy}
