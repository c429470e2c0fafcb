"""The kept-request endpoints: whose requests are kept (GET/PUT /kept-requests), the requests kept
(GET /requests, GET /requests/{id}) and a replay against another model (POST /requests/{id}/replay).

Only the admin token reads kept requests; each read is written to the audit log (action requests.list or
requests.read), as changes are. The text itself is in no log line and no audit event.
"""

from __future__ import annotations

from llmgw.admin import audit
from llmgw.admin.dispatch import Call
from llmgw.admin.errors import ApiError
from llmgw.admin.kept_types import (
    KeepSetting,
    KeptDetail,
    KeptList,
    KeptSummary,
    ReplayResult,
)
from llmgw.admin.timespec import parse_when
from llmgw.config.units import Duration
from llmgw.router import kept_requests
from llmgw.store.sql_kept import RULE_KINDS

#: The audit log's actions of reads (each list and each request shown), beside the changes'.
READ_ACTIONS = ("requests.list", "requests.read")

#: A scope's kind in a sentence.
_A_KIND = {"org": "an organization", "team": "a team", "user": "a person"}


async def _scope(call: Call, ref: str):
    tenancy = call.tenancy()
    scope = await tenancy.scope(ref)
    if scope.kind not in RULE_KINDS:
        kind = _A_KIND.get(scope.kind, scope.kind)
        raise ApiError(400, f"scope: requests are kept for a key or a project, not {kind} "
                            "(give project:PATH or key:ID)")
    return scope


async def keep_setting(store, scope) -> KeepSetting:
    """What a scope says, and for a key what holds (its own rule, else its project's)."""
    rule = await store.get_keep_rule(scope.kind, scope.id)
    held, set_by = rule, scope.kind if rule else None
    if scope.kind == "key" and rule is None:
        key = await store.get_key(scope.id)
        rules = await store.keep_rules_of(scope.id, key.project_id if key is not None else None)
        held = rules.get("project")
        set_by = "project" if held else None
    return KeepSetting(scope=str(scope), keep_s=int(rule.keep.total_seconds()) if rule else None,
                       in_force_s=int(held.keep.total_seconds()) if held else None, in_force_set_by=set_by)


async def get_kept_requests(call: Call) -> KeepSetting:
    """Whether a key's or a project's requests are kept, and for how long (a key's own time wins over its
    project's). None is kept unless asked."""
    return await keep_setting(call.store, await _scope(call, call.query.scope))


async def set_kept_requests(call: Call) -> KeepSetting:
    """Keep a key's or a project's requests and answers for a time (at most 366 days), or stop (null). What
    the guardrails redact is kept redacted; a key under a no_store policy is never kept. A gateway on this
    server takes the change up at once, others within 30 seconds."""
    scope = await _scope(call, call.body.scope)
    keep = None
    if call.body.keep is not None:
        try:
            keep = Duration.parse(call.body.keep)
        except ValueError as exc:
            raise ApiError(400, f"keep: {exc}") from None
    await call.store.set_keep_rule(scope.kind, scope.id, keep, actor=call.actor)
    call.target = f"{scope.kind}:{scope.id}"
    kept_requests.forget_rules(call.request.app.get(kept_requests.GATEWAY_APP))
    return await keep_setting(call.store, scope)


def summary(k) -> KeptSummary:
    return KeptSummary(id=k.id, at=k.at.isoformat(), expires_at=k.expires_at.isoformat(), key_id=k.key_id,
                       project_id=k.project_id, endpoint=k.endpoint, model=k.model, model_served=k.model_served,
                       status=k.status, outcome=k.outcome, streamed=k.streamed, prompt_tokens=k.prompt_tokens,
                       completion_tokens=k.completion_tokens, guard_action=k.guard_action)


async def _read(call: Call, action: str, target: str) -> None:
    """A read of kept requests, in the audit log like a change."""
    await audit.record(call.store, actor=call.actor, via=call.via, action=action, target=target,
                       fields=call.fields, outcome="ok")


async def list_requests(call: Call) -> KeptList:
    """The requests kept, newest first: a key's, a project's, or every one (no text; GET /requests/{id}
    shows it). The read is in the audit log."""
    q = call.query
    tenancy = call.tenancy()
    key_id = (await tenancy.find_key(q.key)).id if q.key else None
    project_id = (await tenancy.find(q.project, "project")).id if q.project else None
    since = parse_when(q.since, call.admin.now(), "since")
    kept = await call.store.list_kept_requests(key_id=key_id, project_id=project_id, since=since, limit=q.limit)
    await _read(call, "requests.list", f"key:{key_id}" if key_id else f"project:{project_id}" if project_id
                else "requests")
    return KeptList(requests=[summary(k) for k in kept])


async def _kept(call: Call):
    kept = await call.store.get_kept_request(call.params["id"])
    if kept is None:
        raise ApiError(404, f"no kept request {call.params['id']!r}: it was never kept (its key or project did "
                            "not ask: llmgw keys requests), or it expired")
    return kept


async def get_request(call: Call) -> KeptDetail:
    """One kept request: the body the model was sent and the answer the client got. The read is in the
    audit log."""
    kept = await _kept(call)
    await _read(call, "requests.read", f"request:{kept.id}")
    return KeptDetail(summary=summary(kept), request=kept.request, answer=kept.answer,
                      text=kept_requests.answer_text(kept.answer))


async def replay_request(call: Call) -> ReplayResult:
    """Send a kept request again to another model, through the gateway as the key that sent it (its limits,
    budget, residency and guardrails hold, and the usage is its own, tagged replay_of=ID), not streamed and
    not kept again; the answer comes back beside the one kept."""
    kept = await _kept(call)
    gateway_app = call.request.app.get(kept_requests.GATEWAY_APP)
    if gateway_app is None:
        raise ApiError(501, "this admin API runs beside no gateway: replay it on the control plane that serves "
                            "the client API")
    try:
        status, answer, request_id = await kept_requests.replay(gateway_app, kept, call.body.model)
    except kept_requests.ReplayRefused as exc:
        raise ApiError(exc.status, exc.message) from None
    return ReplayResult(id=kept.id, model=kept.model_served or kept.model, replay_model=call.body.model,
                        replay_request_id=request_id, status=status, original=kept.answer, replayed=answer,
                        original_text=kept_requests.answer_text(kept.answer),
                        replayed_text=kept_requests.answer_text(answer))


__all__ = ["READ_ACTIONS", "get_kept_requests", "get_request", "keep_setting", "list_requests", "replay_request",
           "set_kept_requests"]
