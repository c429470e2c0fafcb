"""Handlers of the settings, audit and capacity quota endpoints, and the OpenAPI document."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from llmgw.admin.api_types import (
    AuditEntry,
    AuditList,
    Capacity,
    Held,
    Quota,
    QuotaList,
    SettingChangeInfo,
    SettingHistory,
    SettingInfo,
    SettingList,
)
from llmgw.admin.audit import split_detail
from llmgw.admin.cluster_api import ClusterError
from llmgw.admin.dispatch import Call
from llmgw.admin.errors import ApiError
from llmgw.admin.settings import REGISTRY, SettingSpec, spec_of
from llmgw.admin.timespec import parse_when
from llmgw.config.units import ByteSize
from llmgw.control.quotas import QUOTAS_SETTING, owner_path, under
from llmgw.store import Setting

MAX_PAGE = 1000

# ---------------------------------------------------------------- settings


def _setting_info(spec: SettingSpec, call: Call, kept: Setting | None) -> SettingInfo:
    in_force = call.admin.in_force  # llmgw.admin.in_force: the file's configuration, the store's, what runs
    config = in_force.file
    file_value = spec.file_value(config)
    problem = in_force.problems.get(spec.key) if kept is not None else None
    used = kept is not None and problem is None
    return SettingInfo(
        key=spec.key, value=kept.value if used else file_value,
        source="store" if used else "file", file_value=file_value, type=spec.kind,
        choices=spec.choices(config), doc=spec.doc, version=kept.version if kept else 0,
        updated_at=kept.updated_at if kept else None, actor=kept.actor if kept else None,
        applies="live" if spec.key in in_force.live_keys else "restart",
        restart_pending=spec.key in in_force.restart_pending(), problem=problem,
    )


async def list_settings(call: Call) -> SettingList:
    """Every cluster setting the API can change: the cluster's value, whether it comes from the store or
    server.yaml, its type, what it does, and whether this control plane takes a change up at once."""
    kept = await call.admin.in_force.refresh(call.store)
    return SettingList(settings=[_setting_info(REGISTRY[k], call, kept.get(k)) for k in sorted(REGISTRY)])


async def get_setting(call: Call) -> SettingInfo:
    """One setting; an unknown key is refused (400), naming it."""
    spec = spec_of(call.params["key"])
    kept = await call.admin.in_force.refresh(call.store)
    return _setting_info(spec, call, kept.get(spec.key))


async def set_setting(call: Call) -> SettingInfo:
    """Set a setting, checked against its type and bounds; it wins over server.yaml until unset, on every
    control plane: at once on this one, within seconds on the others (at their next restart for a setting that
    says applies: restart). The change is kept in the setting's history."""
    spec = spec_of(call.params["key"])
    value = spec.parse(call.body.value, call.admin.in_force.file)
    await call.store.set_setting(spec.key, value, actor=call.actor)
    kept = await call.admin.in_force.refresh(call.store)  # in force here now, not at the next read
    return _setting_info(spec, call, kept.get(spec.key))


async def unset_setting(call: Call) -> SettingInfo:
    """Unset a setting: server.yaml's value (or its default) applies again, as a set one does."""
    spec = spec_of(call.params["key"])
    await call.store.unset_setting(spec.key, actor=call.actor)
    await call.admin.in_force.refresh(call.store)
    return _setting_info(spec, call, None)


async def setting_history(call: Call) -> SettingHistory:
    """Changes to the settings (or to one), newest first, with who made each."""
    key = call.query.key
    if key is not None:
        spec_of(key)
    # Only the cluster settings: the store keeps internal values (quotas, cordons, parked models) beside them.
    changes = await call.store.setting_history(key, keys=None if key is not None else REGISTRY,
                                               limit=_page(call.query.limit))
    return SettingHistory(changes=[
        SettingChangeInfo(id=c.id, key=c.key, value=c.value, removed=c.removed, version=c.version,
                          at=c.at, actor=c.actor)
        for c in changes if c.key in REGISTRY
    ])


def _page(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise ApiError(400, f"limit: between 1 and {MAX_PAGE}, got {limit}")
    return limit


# ---------------------------------------------------------------- audit


async def list_audit(call: Call) -> AuditList:
    """Changes made to the cluster and its people, newest first, refusals included: who, when, what,
    through what, the fields given (secrets taken out) and how it ended. Filters combine."""
    q = call.query
    now = call.admin.now()
    limit = _page(q.limit)
    if q.before_id is not None and q.before_id < 1:
        raise ApiError(400, f"before_id: at least 1, got {q.before_id}")
    events = await call.store.list_audit(
        since=parse_when(q.since, now, "since"), until=parse_when(q.until, now, "until"),
        actor=q.actor, action=q.action, target=q.target, before_id=q.before_id, limit=limit,
    )
    out = []
    for e in events:
        via, outcome, reason, rest = split_detail(e.detail)
        out.append(AuditEntry(id=e.id, at=e.at, actor=e.actor, action=e.action, target=e.target, via=via,
                              outcome=outcome, reason=reason, detail=rest))
    return AuditList(events=out, next_before_id=events[-1].id if len(events) == limit else None)


# ---------------------------------------------------------------- capacity quotas


async def _quotas_kept(call: Call) -> tuple[dict[str, Any], Setting | None]:
    kept = await call.store.get_setting(QUOTAS_SETTING)
    value = kept.value if kept is not None and isinstance(kept.value, dict) else {}
    return dict(value), kept


async def _held_by_owner(call: Call) -> dict[str, Held] | None:
    """What the replicas not being stopped hold, by the path their model's owner names (lower-cased)."""
    cluster = call.admin.cluster
    if cluster is None:
        return None
    try:
        owners = {m.name: owner_path(m.owner) for m in await cluster.models()}
        replicas = await cluster.replicas()
    except ClusterError:
        return None
    held: dict[str, list[int]] = {}
    for r in replicas:
        owner = owners.get(r.model, "")
        if owner and r.stopping_because is None:
            sums = held.setdefault(owner, [0, 0, 0])
            sums[0] += len(r.gpus)
            sums[1] += r.cores
            sums[2] += r.memory_bytes
    return {o: Held(gpus=g, cores=c, memory_bytes=m) for o, (g, c, m) in held.items()}


def _capacity(value: Any) -> Capacity:
    value = value if isinstance(value, dict) else {}
    return Capacity(gpus=value.get("gpus"), cores=value.get("cores"), memory=value.get("memory"))


async def list_quotas(call: Call) -> QuotaList:
    """Every capacity quota: the GPUs, cores and memory each organization, team or project may hold at
    most and is guaranteed, and what its models hold now (by their owner, the scopes under it included)."""
    kept, setting = await _quotas_kept(call)
    tenancy = call.tenancy()
    held = await _held_by_owner(call)
    quotas = []
    for scope_id, entry in kept.items():
        kind = entry.get("kind", "org") if isinstance(entry, dict) else "org"
        label = f"{kind}:{await tenancy.path_of(kind, scope_id)}"
        mine = None
        if held is not None:  # the scope's models and those of the scopes under it, as placement counts
            inside = [h for path, h in held.items() if under(path, owner_path(label))]
            mine = Held(gpus=sum(h.gpus for h in inside), cores=sum(h.cores for h in inside),
                        memory_bytes=sum(h.memory_bytes for h in inside))
        quotas.append(Quota(scope=label, id=scope_id, limit=_capacity(entry.get("limit")),
                            guaranteed=_capacity(entry.get("guaranteed")), held=mine,
                            updated_at=setting.updated_at if setting else None,
                            actor=setting.actor if setting else None))
    return QuotaList(quotas=sorted(quotas, key=lambda q: q.scope))


def _check_capacity(c: Capacity, what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("gpus", "cores"):
        n = getattr(c, name)
        if n is not None:
            if n < 0 or n > 1_000_000:
                raise ApiError(400, f"{what}.{name}: between 0 and 1000000, got {n}")
            out[name] = n
    if c.memory is not None:
        try:
            out["memory"] = str(ByteSize.parse(c.memory))
        except ValueError as exc:
            raise ApiError(400, f"{what}.memory: {exc}") from None
    return out


async def set_quota(call: Call) -> Quota:
    """Set an organization's, team's or project's capacity quota, replacing the one it had. What it is
    guaranteed may not exceed its limit."""
    body = call.body
    scope = await call.tenancy().scope(body.scope)
    if scope.kind not in ("org", "team", "project"):
        raise ApiError(400, f"scope: a capacity quota is for an org, team or project, not a {scope.kind}")
    limit = _check_capacity(body.limit, "limit")
    guaranteed = _check_capacity(body.guaranteed, "guaranteed")
    for name, floor in guaranteed.items():
        top = limit.get(name)
        if top is not None and _amount(floor) > _amount(top):
            raise ApiError(400, f"guaranteed.{name}: {floor} is more than the limit, {top}")
    kept, _ = await _quotas_kept(call)
    kept[scope.id] = {"kind": scope.kind, "limit": limit, "guaranteed": guaranteed}
    setting = await call.store.set_setting(QUOTAS_SETTING, kept, actor=call.actor)
    call.target = f"{scope.kind}:{scope.id}"
    return Quota(scope=f"{scope.kind}:{scope.label}", id=scope.id, limit=_capacity(limit),
                 guaranteed=_capacity(guaranteed), held=None, updated_at=setting.updated_at, actor=call.actor)


def _amount(value: Any) -> int:
    return int(ByteSize.parse(value)) if isinstance(value, str) else int(value)


async def remove_quota(call: Call) -> Quota:
    """Take a scope's capacity quota away."""
    scope = await call.tenancy().scope(call.query.scope)
    kept, _ = await _quotas_kept(call)
    entry = kept.pop(scope.id, None)
    if entry is None:
        raise ApiError(404, f"{scope}: has no capacity quota")
    await call.store.set_setting(QUOTAS_SETTING, kept, actor=call.actor)
    call.target = f"{scope.kind}:{scope.id}"
    return Quota(scope=f"{scope.kind}:{scope.label}", id=scope.id, limit=_capacity(entry.get("limit")),
                 guaranteed=_capacity(entry.get("guaranteed")))


# ---------------------------------------------------------------- the document


async def get_openapi(call: Call) -> web.Response:
    """This API described in OpenAPI 3.1, as built into this server."""
    from llmgw.admin.routes import openapi_document

    return web.json_response(openapi_document())
