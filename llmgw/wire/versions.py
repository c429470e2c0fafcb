"""Whether an agent's Register may be taken: its protocol inside [OLDEST_PROTOCOL, PROTOCOL_VERSION].

During a rolling upgrade (docs/upgrades.md) control planes are upgraded
before agents, so an agent a release behind is the usual case and is
taken while its protocol is one this side still speaks. An agent older
than that, or one newer than this control plane (upgraded out of order),
is refused with both llmgw versions and what to do.
"""

from __future__ import annotations

from llmgw import __version__
from llmgw.wire.messages import OLDEST_PROTOCOL, PROTOCOL_VERSION

__all__ = ["agent_refusal"]


def agent_refusal(protocol: object, agent_version: str, *, ours: str = __version__) -> str | None:
    """Why this control plane cannot take an agent speaking `protocol` (llmgw `agent_version`); None when it can."""
    theirs = f"llmgw {agent_version}" if agent_version else "an llmgw that does not say its version"
    window = (f"protocol {OLDEST_PROTOCOL}" if OLDEST_PROTOCOL == PROTOCOL_VERSION
              else f"protocols {OLDEST_PROTOCOL} to {PROTOCOL_VERSION}")
    here = f"this control plane runs llmgw {ours} and speaks {window}"
    if not isinstance(protocol, int) or isinstance(protocol, bool):
        return f"the agent sent protocol {protocol!r}, which is not a number; {here}"
    if protocol < OLDEST_PROTOCOL:
        return (f"the agent runs {theirs} and speaks protocol {protocol}, older than the oldest {here}; "
                f"upgrade the node's agent (`llmgw ctl upgrade RELEASE`, or install llmgw {ours} on the node)")
    if protocol > PROTOCOL_VERSION:
        return (f"the agent runs {theirs} and speaks protocol {protocol}, newer than {here}; upgrade the control "
                f"planes first (`llmgw ctl upgrade RELEASE` does them before the agents), or put llmgw {ours} "
                "back on the node")
    return None
