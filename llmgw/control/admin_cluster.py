"""The control plane as the admin API's `Cluster` (llmgw/admin/cluster_api.py).

`AdminCluster(slot)` answers the admin API's cluster endpoints from the
control plane the server runs (found through its `ControlPlaneSlot`, so the
admin app can be built before the control plane starts). It translates: our
dictionaries into the admin API's attrs types, our refusals into its
exceptions (unknown → 404, a bad definition → 400, a clash → 409, a standby
or a control plane not started → 503). The admin API writes the audit events,
so every change here is made with `audit=False`.

On a standby, the catalog (kept in the store) may still be read and changed;
what needs the leader's memory (nodes, replicas, placement) answers 503
naming the leader.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from llmgw.admin.cluster_api import (
    ClusterConflict,
    ClusterInvalid,
    ClusterNotFound,
    ClusterTimeout,
    ClusterUnavailable,
)
from llmgw.admin.cluster_types import (
    ClusterStatus,
    GpuInfo,
    JobInfo,
    JobStep,
    Leadership,
    ModelDetail,
    ModelInfo,
    ModelUpdateInfo,
    ModelUpdateList,
    NodeInfo,
    PlacementDecision,
    PlacementExplanation,
    ReplicaInfo,
    RestartResult,
    ScaleChange,
    ScalingInfo,
)
from llmgw.admin.facility_types import FacilityDomain, FacilityHold, FacilityReport, HoldCreate
from llmgw.admin.fields import UNSET
from llmgw.control.catalog import CatalogError, UnknownModel, model_to_spec
from llmgw.control.facility import future_time
from llmgw.control.admin_engines import AdminEngines
from llmgw.control.admin_rollout import AdminRollouts
from llmgw.control.jobs import Job
from llmgw.control.node_logs import NodeNotAnswering, NodeNotConnected, UnknownNode
from llmgw.control.service import ControlPlane, ControlPlaneSlot
from llmgw.compat import fromisoformat


def _replica(info: Mapping[str, Any]) -> ReplicaInfo:
    return ReplicaInfo(
        id=info["id"], model=info["model"], node=info["node"], profile=info["profile"], engine=info["engine"],
        state=info["state"], gpus=list(info["gpus"]), memory_bytes=info["memory_bytes"], cores=info["cores"],
        port=info["port"], for_s=info["for_s"], replaces=info["replaces"],
        stopping_because=info["stopping_because"], message=info["message"],
    )


def _node(info: Mapping[str, Any]) -> NodeInfo:
    return NodeInfo(
        id=info["id"], state=info["state"], hostname=info["hostname"], address=info["address"],
        labels=dict(info["labels"]), engines=dict(info["engines"]), cores=info["cores"],
        memory_total_bytes=info["memory_total_bytes"], memory_available_bytes=info["memory_available_bytes"],
        gpus=[GpuInfo(index=g["index"], gpu_class=g["class"], name=g["name"], health=g["health"],
                      memory_total_bytes=g["memory_total_bytes"]) for g in info["gpus"]],
        weights=list(info["weights"]), agent_version=info["agent_version"], cordoned=info["cordoned"],
        cordon_reason=info["cordon_reason"], draining=info["draining"], silent_s=info["silent_s"],
        disconnect_reason=info["disconnect_reason"], replicas=list(info.get("replicas", [])),
    )


def _decision(info: Mapping[str, Any] | None) -> PlacementDecision | None:
    if info is None:
        return None
    import datetime as dt

    at = fromisoformat(info["at"]) if info.get("at") else None
    return PlacementDecision(at=at, placed_on=info["placed_on"], gpus=list(info["gpus"]),
                             preempts=list(info["preempts"]), why=info["why"], summary=info["summary"],
                             rejections=list(info["rejections"]))


def _job(job: Job) -> JobInfo:
    import datetime as dt

    def at(t: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(t, dt.UTC)

    return JobInfo(id=job.id, model=job.model, kind=job.kind, by=job.by, state=job.state, now=job.now,
                   started=at(job.started), ended=at(job.ended) if job.ended is not None else None,
                   replicas=list(job.replicas), steps=[JobStep(at=at(s.at), text=s.text) for s in job.steps],
                   node=job.node, engine=job.engine)


def _model_info(explained: Mapping[str, Any]) -> ModelInfo:
    s = explained["scaling"]
    return ModelInfo(
        name=explained["model"], origin=explained["origin"], model_class=explained["class"],
        owner=explained["owner"], status=explained["status"], reason=explained["reason"],
        ready=explained["ready"], wanted=explained["wanted"],
        scaling=ScalingInfo(min=s["min"], max=s["max"], on_demand=s["on_demand"], idle_timeout=s["idle_timeout"]),
        problems=list(explained["problems"]),
    )


class AdminCluster(AdminEngines, AdminRollouts):
    """Implements `llmgw.admin.cluster_api.Cluster` over the server's control plane."""

    def __init__(self, slot: ControlPlaneSlot) -> None:
        self.slot = slot

    # -- finding the control plane ---------------------------------------------

    def _plane(self) -> ControlPlane:
        plane = self.slot.plane
        if plane is None or plane.reconciler is None:
            raise ClusterUnavailable(self.slot.disabled_reason or "the control plane is not running yet")
        return plane

    async def upgrade_cluster(self, body: Mapping[str, Any], *, actor: str) -> JobInfo:
        """`ctl upgrade`: the job moving every node's agent to a release (llmgw/control/upgrade.py)."""
        from llmgw.admin.cluster_api import ClusterConflict, ClusterInvalid
        from llmgw.control.upgrade import UpgradeError

        plane = self._leader()
        try:
            return _job(await plane.upgrades.start(body, actor=actor, config_path=self.slot.config_path))
        except UpgradeError as exc:
            text = str(exc)
            raise (ClusterConflict(text) if exc.kind == "conflict" else ClusterUnavailable(text)
                   if exc.kind == "unavailable" else ClusterInvalid(text, [text])) from None

    def _leader(self) -> ControlPlane:
        plane = self._plane()
        if not plane.leading:
            leader = plane.leadership.leader
            raise ClusterUnavailable(
                f"this control plane is a standby; ask the leader, {leader}" if leader
                else "this control plane is a standby, and no control plane leads yet")
        return plane

    def _explain(self, plane: ControlPlane, name: str) -> dict[str, Any]:
        try:
            return plane.explain(name)
        except KeyError:
            raise ClusterNotFound(f"no model called {name!r} is in the catalog") from None

    def _node_info(self, plane: ControlPlane, node_id: str) -> NodeInfo:
        for info in plane.nodes():
            if info["id"] == node_id:
                return _node(info)
        raise ClusterNotFound(f"no node called {node_id!r} is known to the leader")

    def _need_node(self, plane: ControlPlane, node_id: str) -> None:
        if plane.inventory.get(node_id) is None:
            raise ClusterNotFound(f"no node called {node_id!r} is known to the leader")

    # -- the whole ----------------------------------------------------------------

    async def status(self) -> ClusterStatus:
        plane = self._plane()
        info = plane.leadership.describe()
        return ClusterStatus(leadership=Leadership(leading=info["leader"], self_name=info["self"],
                                                   holder=info["holder"], epoch=info["epoch"]))

    # -- nodes ----------------------------------------------------------------------

    async def nodes(self) -> list[NodeInfo]:
        return [_node(info) for info in self._leader().nodes()]

    async def cordon(self, node_id: str, *, reason: str, actor: str) -> NodeInfo:
        plane = self._leader()
        self._need_node(plane, node_id)
        await plane.cordon(node_id, reason, actor=actor, audit=False)
        return self._node_info(plane, node_id)

    async def uncordon(self, node_id: str, *, actor: str) -> NodeInfo:
        plane = self._leader()
        self._need_node(plane, node_id)
        await plane.uncordon(node_id, actor=actor, audit=False)
        return self._node_info(plane, node_id)

    async def drain(self, node_id: str, *, reason: str, actor: str) -> NodeInfo:
        plane = self._leader()
        self._need_node(plane, node_id)
        await plane.drain(node_id, reason, actor=actor, audit=False)
        return self._node_info(plane, node_id)

    async def remove_node(self, node_id: str, *, actor: str) -> NodeInfo:
        plane = self._leader()
        info = self._node_info(plane, node_id)
        try:
            await plane.remove_node(node_id, actor=actor, audit=False)
        except ValueError as exc:
            raise ClusterConflict(str(exc)) from None
        return info

    async def set_labels(self, node_id: str, labels: Mapping[str, str | None], *, actor: str) -> NodeInfo:
        plane = self._leader()
        self._need_node(plane, node_id)
        await plane.set_labels(node_id, labels, actor=actor, audit=False)
        return self._node_info(plane, node_id)

    async def facility(self) -> FacilityReport:
        info = self._leader().facility()
        return FacilityReport(domains=[FacilityDomain(**d) for d in info["domains"]],
                              holds=[_hold(h) for h in info["holds"]])

    async def hold(self, body: HoldCreate, *, actor: str) -> FacilityHold:
        plane = self._leader()
        until = None
        if body.until is not None:
            try:
                until = future_time(body.until, plane.reconciler.wall_clock())
            except ValueError as exc:
                raise ClusterInvalid(f"until: {exc}", [f"until: {exc}"]) from None
        try:
            hold = await plane.hold(body.domain, body.reason, until=until, drain=body.drain, actor=actor,
                                    audit=False)
        except ValueError as exc:  # each names its field
            raise ClusterInvalid(str(exc), [str(exc)]) from None
        return _hold({**hold.to_json(), "active": True})

    async def release(self, domain: str, *, actor: str) -> FacilityHold:
        plane = self._leader()
        try:
            hold = await plane.release(domain, actor=actor, audit=False)
        except KeyError:
            raise ClusterNotFound(f"{domain} is not held (GET /api/v1/facility lists the holds)") from None
        return _hold({**hold.to_json(), "active": False})

    async def node_logs(self, node_id: str, *, replica: str, lines: int) -> list[str]:
        plane = self._plane()
        if not plane.leading:  # agents connect to the leader only
            leader = plane.leadership.leader
            raise ClusterUnavailable(
                f"this control plane is a standby: {node_id}'s agent is connected to the leader, {leader}; "
                "ask the leader's admin API for its log" if leader
                else "this control plane is a standby and no control plane leads yet, so no agent is connected")
        try:
            return await plane.node_logs(node_id, replica=replica, lines=lines)
        except UnknownNode as exc:
            raise ClusterNotFound(str(exc)) from None
        except NodeNotConnected as exc:
            raise ClusterConflict(str(exc)) from None
        except NodeNotAnswering as exc:
            raise ClusterTimeout(str(exc)) from None
        except ValueError as exc:
            raise ClusterInvalid(str(exc), [str(exc)]) from None

    # -- models -----------------------------------------------------------------------

    async def models(self) -> list[ModelInfo]:
        plane = self._plane()
        await plane.catalog.load()
        with plane.one_view():  # every model's next placement from one look at the cluster
            return [_model_info(self._explain(plane, m.name)) for m in plane.catalog.models()]

    async def model(self, name: str) -> ModelDetail:
        plane = self._plane()
        await plane.catalog.load()
        explained = self._explain(plane, name)
        cm = plane.catalog.get(name)
        latest = plane.jobs.latest_for(cm.name) if plane.leading else None
        return ModelDetail(model=_model_info(explained), spec=model_to_spec(cm.config),
                           replicas=[_replica(r) for r in explained["replicas"]],
                           job=latest.id if latest is not None else None)

    async def add_model(self, spec: Mapping[str, Any], *, replace: bool, actor: str) -> ModelDetail:
        plane = self._plane()
        try:
            added = await plane.add_model(spec, actor=actor, replace=replace, audit=False)
        except CatalogError as exc:
            raise self._refusal(exc) from None
        return await self.model(added.name)

    async def remove_model(self, name: str, *, actor: str) -> ModelDetail:
        plane = self._plane()
        before = await self.model(name)
        try:
            await plane.remove_model(name, actor=actor, audit=False)
        except UnknownModel as exc:
            raise ClusterNotFound(str(exc)) from None
        except CatalogError as exc:
            raise self._refusal(exc) from None
        return before

    async def scale_model(self, name: str, change: ScaleChange, *, actor: str) -> ModelDetail:
        plane = self._plane()
        changes = {key: getattr(change, key) for key in ("min", "max", "on_demand", "idle_timeout")
                   if getattr(change, key) is not UNSET}
        try:
            scaled = await plane.scale_model(name, actor=actor, audit=False, **changes)
        except UnknownModel as exc:
            raise ClusterNotFound(str(exc)) from None
        except CatalogError as exc:
            raise self._refusal(exc) from None
        except ValueError as exc:  # an idle_timeout that is not a duration
            raise ClusterInvalid(f"idle_timeout: {exc}", [f"idle_timeout: {exc}"]) from None
        return await self.model(scaled.name)

    async def restart_model(self, name: str, *, in_place: bool, actor: str) -> RestartResult:
        plane = self._leader()
        try:
            replica_ids = await plane.restart_model(name, in_place=in_place, actor=actor, audit=False)
        except KeyError:
            raise ClusterNotFound(f"no model called {name!r} is in the catalog") from None
        model = plane.catalog.get(name).name
        latest = plane.jobs.latest_for(model)
        return RestartResult(model=model, replicas=replica_ids,
                             job=latest.id if latest is not None and latest.kind == "restart" else None)

    async def restart_replica(self, replica_id: str, *, in_place: bool, actor: str) -> RestartResult:
        plane = self._leader()
        try:
            model = await plane.restart_replica(replica_id, in_place=in_place, actor=actor, audit=False)
        except KeyError:
            rec = plane.reconciler.records.get(replica_id) if plane.reconciler is not None else None
            if rec is not None:  # known, but already on its way out
                raise ClusterConflict(f"{replica_id} is already stopping ({rec.retiring or rec.state}); "
                                      "there is nothing to restart") from None
            raise ClusterNotFound(f"no replica called {replica_id!r} runs on this cluster: "
                                  "`llmgw ctl replicas` lists them") from None
        except ValueError as exc:
            raise ClusterConflict(str(exc)) from None
        latest = plane.jobs.latest_for(model)
        return RestartResult(model=model, replicas=[replica_id],
                             job=latest.id if latest is not None and latest.kind == "restart" else None)

    async def explain_placement(self, name: str) -> PlacementExplanation:
        plane = self._plane()
        e = self._explain(plane, name)
        return PlacementExplanation(
            model=_model_info(e), replicas=[_replica(r) for r in e["replicas"]], failures=e["failures"],
            retry_in_s=e["retry_in_s"], parked=e["parked"], last_error=e["last_error"], log_tail=e["log_tail"],
            last_placement=_decision(e["last_placement"]), drain_blocked=_decision(e["drain_blocked"]),
            next_placement=_decision(e["next_placement"]),
        )

    async def retry_model(self, name: str, *, actor: str) -> ModelDetail:
        """Start a parked model again now (`POST /models/{name}/retry`, `llmgw ctl model retry`)."""
        plane = self._leader()
        if plane.catalog.get(name) is None:
            raise ClusterNotFound(f"no model called {name!r} is in the catalog")
        await plane.retry(name, actor=actor, audit=False)
        return await self.model(name)

    async def model_updates(self, *, check: bool) -> ModelUpdateList:
        plane = self._leader()
        watcher = plane.updates
        if check:
            await watcher.check_now()
        return ModelUpdateList(
            models=[ModelUpdateInfo(model=r.model, source=r.source, mirror_model=r.mirror_model, version=r.version,
                                    repo=r.repo, status=r.status, update_available=r.update_available,
                                    changed=list(r.changed), local_revision=r.local_revision,
                                    upstream_revision=r.upstream_revision, error=r.error) for r in watcher.rows],
            checked_at=watcher.checked_at, interval_s=watcher.interval, via=watcher.checker.via, error=watcher.error)

    # -- replicas ------------------------------------------------------------------------

    async def replicas(self) -> list[ReplicaInfo]:
        return [_replica(r) for r in self._leader().replicas_info()]

    # -- jobs: in the leader's memory ------------------------------------------------------

    async def jobs(self, *, state: str | None, model: str | None) -> list[JobInfo]:
        plane = self._leader()
        if model is not None and plane.catalog.get(model) is not None:
            model = plane.catalog.get(model).name  # an alias finds the model's jobs
        return [_job(j) for j in plane.jobs.select(state=state, model=model)]

    async def job(self, job_id: str) -> JobInfo:
        plane = self._plane()
        if not plane.leading and (recorded := await plane.upgrades.recorded(job_id)) is not None:
            return _job(recorded)  # ctl upgrade: the leader moves in its middle; a standby shows the store's record
        job = self._leader().jobs.get(job_id) or await plane.upgrades.recorded(job_id)  # one being carried on
        if job is None:
            raise ClusterNotFound(f"no job called {job_id!r}: `llmgw ctl jobs` lists them (the leader keeps those "
                                  "since it started: every one running and the last ended ones)")
        return _job(job)

    @staticmethod
    def _refusal(exc: CatalogError) -> Exception:
        if exc.conflict:
            return ClusterConflict(str(exc))
        return ClusterInvalid(str(exc), exc.problems)


__all__ = ["AdminCluster"]


def _hold(info: Mapping[str, Any]) -> FacilityHold:
    def iso(epoch: float | None) -> str | None:
        return None if epoch is None else dt.datetime.fromtimestamp(epoch, dt.timezone.utc).isoformat()

    return FacilityHold(domain=info["domain"], reason=info["reason"], until=iso(info["until"]), drain=info["drain"],
                        actor=info["actor"], since=iso(info["since"]) or "", active=info["active"])
