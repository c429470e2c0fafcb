"""Residency: keys whose requests must stay on the cluster's own engines.

A key is kept in the cluster when a residency rule is set on it, its project
or its organization (`llmgw keys residency … --in-cluster`), or when a
guardrails policy with `no_store` applies to it: what is not to be kept is
not to be handed to someone else either. Such a request is served only by
replicas the cluster's scheduler runs; a model served by an external
provider (server.yaml's `endpoints:`) or by a federation peer is refused
with the reason, before anything is sent, and is skipped as a fallback.
"""

from __future__ import annotations

from typing import Any

from llmgw.auth.principal import Principal
from llmgw.router.client_data import no_store
from llmgw.router.errors import GatewayError
from llmgw.router.replicas import Replica

#: The replicas the cluster's own scheduler runs (llmgw.control); every other source is outside it.
CLUSTER_SOURCE = "control"

_SET_ON = {"org": "its organization", "project": "its project", "key": "the key"}


def in_cluster_reason(gw: Any, principal: Principal, guard: Any = None) -> str:
    """Why this key's requests must stay in the cluster, in words; "" when they need not."""
    if principal.in_cluster:
        return f"residency in-cluster is set on {_SET_ON.get(principal.in_cluster, principal.in_cluster)}"
    if (guard is not None and getattr(guard, "no_store", False)) or no_store(gw, principal):
        return "a guardrails policy with no_store applies to the key"
    return ""


def in_cluster(replica: Replica) -> bool:
    return replica.source == CLUSTER_SOURCE


def served_in_cluster(gw: Any, model: str) -> bool:
    """Whether the cluster's own engines serve `model` (running now, or the scheduler can start it)."""
    if any(in_cluster(r) for r in gw.replicas.replicas_for(model)):
        return True
    plane = gw.control.plane if gw.control is not None else None
    return plane is not None and plane.knows(model)


def refusal(model: str, reason: str) -> GatewayError:
    return GatewayError(
        403, "residency_in_cluster",
        f"model {model!r} is served outside the cluster (by an external provider or a federation peer), and "
        f"this key's requests must stay on the cluster's own engines: {reason}; ask for a model the cluster runs",
        param="model")
