"""Handlers of a model's revision endpoints: update, rollback, canary, promote, abort, quality suites.

Each asks the `Cluster` (cluster_api.py); a control plane that does not run
updates (a fake in a test, an older adapter) answers 501 saying so.
"""

from __future__ import annotations

from llmgw.admin.cluster_api import ClusterUnsupported
from llmgw.admin.cluster_types import JobInfo
from llmgw.admin.dispatch import Call
from llmgw.admin.rollout_types import CanaryInfo, CanaryList, EvalResult

__all__ = ["abort_canary", "evaluate_model", "list_canaries", "promote_canary", "rollback_model", "serve_model",
           "set_canary_weight", "start_canary", "update_model"]


def _method(call: Call, name: str):
    method = getattr(call.admin.need_cluster(), name, None)
    if method is None:
        raise ClusterUnsupported("this control plane does not update models or run canaries")
    return method


async def update_model(call: Call) -> JobInfo:
    """Move a model added at run time to a new revision: it starts as MODEL-canary beside the model, taking
    none of its sessions; once ready and past the gate (when given) it takes all of them, the model's definition
    moves to the new source and its replicas restart on it, then the canary goes. A failing gate stops the update
    and the old revision keeps serving. Answers at once with the job that follows it."""
    body = call.body
    return await _method(call, "update_model")(call.params["name"], to=body.to, gate=body.gate, actor=call.actor)


async def serve_model(call: Call) -> JobInfo:
    """Serve a model from a registry repository or the mirror, as one job: fetched into the mirror (a repository),
    planned against the cluster's hardware (the best file, every way it fits a profile), added to the catalog,
    started, and asked to say hello. Answers at once with the job; a refusal before it starts changes nothing."""
    body = call.body
    call.target = f"model:{body.name or body.source}"
    spec = {"source": body.source, "name": body.name, "files": list(body.files), "file": body.file,
            "context": body.context, "concurrency": body.concurrency, "engine": body.engine}
    return await _method(call, "serve_model")(spec, actor=call.actor)


async def rollback_model(call: Call) -> JobInfo:
    """Return a model to the definition the last update or promotion replaced, within control.rollback_window;
    its replicas are replaced one at a time, each new one ready before an old one stops."""
    return await _method(call, "rollback_model")(call.params["name"], actor=call.actor)


async def start_canary(call: Call) -> JobInfo:
    """Run a newer revision of a model beside it as MODEL-canary; once ready and past the gate (when given), it
    takes the share of the model's sessions asked for, each session always on the same side. A failing gate takes
    the canary out. Answers at once with the job that follows it."""
    body = call.body
    return await _method(call, "start_canary")(call.params["name"], to=body.to, weight=body.weight,
                                               replicas=body.replicas, gate=body.gate, actor=call.actor)


async def set_canary_weight(call: Call) -> CanaryInfo:
    """Give a model's canary a new share of its sessions."""
    return await _method(call, "canary_weight")(call.params["name"], weight=call.body.weight, actor=call.actor)


async def promote_canary(call: Call) -> JobInfo:
    """Move the model to its canary's revision (after the gate, when given: a failing one leaves both as they
    are): the canary takes every session while the model's replicas restart on its revision, then it goes."""
    body = call.body
    return await _method(call, "promote_canary")(call.params["name"], gate=body.gate, actor=call.actor)


async def abort_canary(call: Call) -> CanaryInfo:
    """Take a model's canary out: its replicas stop and the model takes every session again."""
    return await _method(call, "abort_canary")(call.params["name"], actor=call.actor)


async def list_canaries(call: Call) -> CanaryList:
    """Every canary: the model it is of, its revision, its share, and how many of its replicas are ready."""
    return CanaryList(canaries=await _method(call, "list_canaries")())


async def evaluate_model(call: Call) -> EvalResult:
    """Ask a quality suite of a model's ready replicas now and score it (the answers are in the reply, not kept)."""
    return await _method(call, "evaluate")(call.params["name"], call.body.suite)
