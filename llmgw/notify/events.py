"""The events llmgw sends to people, and how each is said.

One function per kind builds its `Event` (llmgw.plugins.types, the type sink
plugins are given): the subject it is about, a sentence for people, and the
facts as JSON values. The notifier stamps the time, the control plane's name
and an id when it takes the event. What an event says never holds a secret,
a key, a prompt or an answer.

| kind | subject | sent by |
|---|---|---|
| `model_parked` | the model | the leader's reconciler, when a model failed every start |
| `node_lost` | the node | the leader's reconciler, when a node's agent is silent past the heartbeat window |
| `budget_spent` | the scope, like `team:…` | the gateway, when a budget refuses a request and when its spend crosses a share of `budgets.notify_at` (each once per period) |
| `model_update_available` | the model | the leader's update checks, when its repository has new files |
| `backup_failed` | `backup` | the admin API, when `POST /api/v1/backups` fails |
| `test` | `notify` | `llmgw ctl notify test` (every sink takes it, whatever its `events`) |
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from llmgw.config.validate import NOTIFY_EVENTS
from llmgw.plugins.types import Event

__all__ = [
    "EVENT_KINDS",
    "TEST",
    "Event",
    "backup_failed",
    "budget_spent",
    "model_parked",
    "model_update_available",
    "node_lost",
    "probe",
]

#: Every kind a sink's `events` may name (server.yaml checks it against this).
EVENT_KINDS: tuple[str, ...] = NOTIFY_EVENTS
#: The kind `llmgw ctl notify test` sends.
TEST = "test"

_SCOPE_WORDS = {"org": "organization", "team": "team", "project": "project", "user": "person", "key": "key"}


def model_parked(model: str, *, failures: int, node: str, reason: str) -> Event:
    """A model failed `failures` starts in a row and is left stopped."""
    return Event(
        kind="model_parked", subject=model,
        summary=(f"{model} is parked after {failures} failed starts in a row and stays stopped until its "
                 f"definition changes or an operator tries it again; `llmgw ctl explain-placement {model}` says why."),
        details={"model": model, "failures": failures, "last_node": node, "reason": reason},
    )


def node_lost(node: str, *, silent_s: float, replicas: Sequence[tuple[str, str]] = ()) -> Event:
    """A node's agent was silent past the heartbeat window; `replicas` are (replica id, model) it had."""
    models = sorted({m for _, m in replicas})
    placed = (f"; its {len(replicas)} replica(s) of {', '.join(models)} will be placed on other nodes"
              if replicas else "; no replica ran there")
    return Event(
        kind="node_lost", subject=node,
        summary=f"Node {node} is lost: its agent has not been heard for {silent_s:g} s{placed}.",
        details={"node": node, "silent_s": silent_s, "replicas": [r for r, _ in replicas], "models": models},
    )


def budget_spent(scope_kind: str, scope_id: str, *, period: str, budget: str, budget_micros: int,
                 renews_at: dt.datetime, threshold: float | None = None, spent_micros: int | None = None,
                 spent: str = "") -> Event:
    """A budget refused a request (`threshold` None: it is spent, or what is left cannot cover the request),
    or its spend crossed `threshold` (a share of it, budgets.notify_at)."""
    words = _SCOPE_WORDS.get(scope_kind, scope_kind)
    every = "daily" if period == "day" else "monthly"
    renews = renews_at.astimezone(dt.UTC)
    until = f"until it renews at {renews.strftime('%Y-%m-%d %H:%M UTC')}"
    so_far = f"; {spent} spent" if spent else ""
    if threshold is not None:
        summary = (f"The {words}'s {every} budget of {budget} is {threshold:.0%} spent ({scope_kind}:{scope_id}"
                   f"{so_far}): requests to priced models will be refused once it is all spent, {until}.")
    elif spent_micros is not None and spent_micros < budget_micros:
        summary = (f"The {words}'s {every} budget of {budget} refused a request ({scope_kind}:{scope_id}{so_far}): "
                   f"what is left cannot cover what requests could cost; priced requests that do not fit are "
                   f"refused {until}.")
    else:
        summary = (f"The {words}'s {every} budget of {budget} is spent ({scope_kind}:{scope_id}): requests to "
                   f"priced models are refused {until}.")
    details = {"scope": scope_kind, "scope_id": scope_id, "period": period, "budget": budget,
               "budget_micros": budget_micros, "renews_at": renews.isoformat().replace("+00:00", "Z"),
               "reason": "threshold" if threshold is not None else "refused", "threshold": threshold}
    if spent_micros is not None:
        details["spent_micros"] = spent_micros
    return Event(kind="budget_spent", subject=f"{scope_kind}:{scope_id}", summary=summary, details=details)


def model_update_available(model: str, *, source: str, repo: str, changed: Sequence[str],
                           upstream_revision: str = "") -> Event:
    """The repository a served model came from has new files under the names it took."""
    files = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return Event(
        kind="model_update_available", subject=model,
        summary=(f"{model}'s repository {repo or source} has new files" + (f" ({files})" if files else "")
                 + f": `llmgw mirror add {source}` fetches them as a new version beside the one in use."),
        details={"model": model, "source": source, "repo": repo, "changed": list(changed),
                 "upstream_revision": upstream_revision},
    )


def backup_failed(error: str, *, actor: str = "") -> Event:
    """A backup asked for through the admin API failed."""
    from llmgw.obs.logs import redact_text

    error = redact_text(error)  # a store address's password is never in it; anything key-shaped is masked too
    return Event(
        kind="backup_failed", subject="backup",
        summary=f"A backup asked for through the admin API failed: {error}",
        details={"error": error, "asked_by": actor},
    )


def probe(actor: str = "") -> Event:
    """What `llmgw ctl notify test` sends."""
    return Event(
        kind=TEST, subject="notify",
        summary="A test notification from llmgw (llmgw ctl notify test): this sink is set up right.",
        details={"asked_by": actor} if actor else {},
    )
