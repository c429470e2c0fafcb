"""The update, canary, rollback and quality-suite endpoints of `AdminCluster` (admin_cluster.py).

Each asks the leader's `ModelRollouts` (rollout.py) and answers the admin
API's types; its refusals become the API's (unknown → 404, a bad request →
400, a clash → 409, a standby → 503).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from llmgw.admin.cluster_api import ClusterConflict, ClusterInvalid, ClusterNotFound, ClusterUnavailable
from llmgw.admin.cluster_types import JobInfo
from llmgw.admin.rollout_types import CanaryInfo, EvalCase, EvalResult
from llmgw.control.rollout import RolloutError
from llmgw.control.rollout_state import Canary

if TYPE_CHECKING:
    from llmgw.control.rollout import ModelRollouts
    from llmgw.control.service import ControlPlane

__all__ = ["AdminRollouts"]


def _refusal(exc: RolloutError) -> Exception:
    text = str(exc)
    if exc.kind == "not_found":
        return ClusterNotFound(text)
    if exc.kind == "conflict":
        return ClusterConflict(text)
    if exc.kind == "unavailable":
        return ClusterUnavailable(text)
    return ClusterInvalid(text, [text])


class AdminRollouts:
    """A mixin of AdminCluster: it brings `_leader()` and `_plane()`."""

    def _leader(self) -> ControlPlane:  # pragma: no cover - AdminCluster's
        raise NotImplementedError

    def _rollouts(self) -> ModelRollouts:
        return self._leader().rollouts

    def _canary_info(self, canary: Canary) -> CanaryInfo:
        plane = self._leader()
        ready = sum(1 for r in plane.replicas.replicas_for(canary.name) if r.usable())
        return CanaryInfo(model=canary.model, name=canary.name, revision=canary.revision, weight=canary.weight,
                          replicas=canary.replicas, ready=ready, serving=canary.serving, update=canary.for_update,
                          by=canary.by, started=dt.datetime.fromtimestamp(canary.started, dt.UTC))

    @staticmethod
    def _job_info(job) -> JobInfo:
        from llmgw.control.admin_cluster import _job

        return _job(job)

    async def update_model(self, name: str, *, to: str, gate: Mapping[str, Any] | None, actor: str) -> JobInfo:
        try:
            return self._job_info(await self._rollouts().update(name, to, gate=gate, actor=actor))
        except RolloutError as exc:
            raise _refusal(exc) from None

    async def serve_model(self, spec: Mapping[str, Any], *, actor: str) -> JobInfo:
        try:
            return self._job_info(await self._leader().serving.serve(spec, actor=actor))
        except RolloutError as exc:
            raise _refusal(exc) from None

    async def rollback_model(self, name: str, *, actor: str) -> JobInfo:
        try:
            return self._job_info(await self._rollouts().rollback(name, actor=actor))
        except RolloutError as exc:
            raise _refusal(exc) from None

    async def start_canary(self, name: str, *, to: str, weight: Any, replicas: int,
                           gate: Mapping[str, Any] | None, actor: str) -> JobInfo:
        try:
            job = await self._rollouts().canary(name, to, weight=weight, replicas=replicas, gate=gate, actor=actor)
        except RolloutError as exc:
            raise _refusal(exc) from None
        return self._job_info(job)

    async def canary_weight(self, name: str, *, weight: Any, actor: str) -> CanaryInfo:
        try:
            return self._canary_info(await self._rollouts().set_weight(name, weight, actor=actor))
        except RolloutError as exc:
            raise _refusal(exc) from None

    async def promote_canary(self, name: str, *, gate: Mapping[str, Any] | None, actor: str) -> JobInfo:
        try:
            return self._job_info(await self._rollouts().promote(name, gate=gate, actor=actor))
        except RolloutError as exc:
            raise _refusal(exc) from None

    async def abort_canary(self, name: str, *, actor: str) -> CanaryInfo:
        try:
            canary = await self._rollouts().abort(name, actor=actor)
        except RolloutError as exc:
            raise _refusal(exc) from None
        return self._canary_info(canary)

    async def list_canaries(self) -> list[CanaryInfo]:
        return [self._canary_info(c) for c in self._rollouts().canaries()]

    async def evaluate(self, name: str, suite: Mapping[str, Any]) -> EvalResult:
        try:
            result = await self._rollouts().evaluate(name, suite)
        except RolloutError as exc:
            raise _refusal(exc) from None
        d = result.describe()
        return EvalResult(suite=d["suite"], model=d["model"], score=d["score"], threshold=d["threshold"],
                          reached=d["reached"], passed=d["passed"], total=d["total"],
                          cases=[EvalCase(**c) for c in d["cases"]])
