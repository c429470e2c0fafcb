"""What the catalog keeps of a model's updates: its canary and the revision it may roll back to.

Both live in one store setting, `control.rollouts`, so every control plane
reads the same split with the catalog (llmgw.control.catalog reads it with
the run-time models, and the router follows it: llmgw.router.canary):

- a **canary**: the model's newer revision running beside it as its own
  run-time model `MODEL-canary`, and the share of the model's sessions it
  takes once it serves (`serving`; before that, and while its quality suite
  runs, it takes none unless a request asks for it with `x-llmgw-variant`);
- a **previous** revision: the definition an update or a promotion
  replaced, kept until `control.rollback_window` has passed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["CANARY_SUFFIX", "ROLLOUTS_SETTING", "Canary", "Previous", "Rollouts", "canary_name"]

ROLLOUTS_SETTING = "control.rollouts"
CANARY_SUFFIX = "-canary"


def canary_name(model: str) -> str:
    return model + CANARY_SUFFIX


@attrs.frozen
class Canary:
    model: str  #: the model it is the canary of
    name: str  #: its own catalog name, MODEL-canary
    revision: str  #: the source it runs
    weight: float  #: the share of the model's sessions it takes while serving, in percent
    replicas: int = 1
    serving: bool = False  #: ready and past its quality suite: it takes its share
    by: str = ""
    started: float = 0.0  #: wall-clock time
    #: an update's canary takes no share: it waits to be promoted by the update's job
    for_update: bool = False

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class Previous:
    model: str
    spec: dict[str, Any] = attrs.field(hash=False)  #: the definition replaced, as server.yaml writes it
    revision: str = ""
    until: float = 0.0  #: wall-clock time after which it is forgotten
    by: str = ""

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _structure(cls: type, value: Any) -> Any:
    if not isinstance(value, Mapping):
        return None
    names = {a.name for a in attrs.fields(cls)}
    try:
        return cls(**{k: v for k, v in value.items() if k in names})
    except TypeError:
        return None


@attrs.frozen
class Rollouts:
    canaries: dict[str, Canary] = attrs.Factory(dict)  #: by the model they are the canary of
    previous: dict[str, Previous] = attrs.Factory(dict)

    @classmethod
    def from_setting(cls, value: Any) -> Rollouts:
        """As kept in the store; a damaged entry is left out rather than stopping the catalog."""
        value = value if isinstance(value, Mapping) else {}
        canaries = {}
        for item in value.get("canaries", []) if isinstance(value.get("canaries"), list) else []:
            canary = _structure(Canary, item)
            if canary is not None:
                canaries[canary.model] = canary
        previous = {}
        for item in value.get("previous", []) if isinstance(value.get("previous"), list) else []:
            prev = _structure(Previous, item)
            if prev is not None:
                previous[prev.model] = prev
        return cls(canaries, previous)

    def to_setting(self) -> dict[str, Any]:
        return {"canaries": [c.to_json() for c in self.canaries.values()],
                "previous": [p.to_json() for p in self.previous.values()]}

    def split(self) -> dict[str, tuple[str, float]]:
        """model -> (its canary's name, the percent of its sessions the canary takes), for the router."""
        return {m: (c.name, c.weight if c.serving and not c.for_update else 0.0) for m, c in self.canaries.items()}
