"""A model's life after its first start: update, rollback, canary, promote, abort, quality gates.

Every one of them starts its new revision as the run-time model
`MODEL-canary` (the model's definition with the new `source`), beside the
model, so the old revision keeps serving until the new one is ready and has
passed its quality suite (llmgw.control.evals):

- **update** `MODEL --to REVISION [--gate SUITE]`: the canary runs as many
  replicas as the model, takes no share of its sessions; once ready (and
  past the gate) it takes all of them, the model's definition moves to the
  new source, its replicas are restarted on it, and the canary goes. The
  definition it replaced is kept for `rollback` for `control.rollback_window`.
- **canary** `MODEL --to REVISION --weight 10%`: one replica (or as asked)
  that, once ready and past its gate, takes that share of the model's
  sessions (llmgw.router.canary); **promote** moves the model to its
  revision as an update does, **abort** takes it out.
- **rollback**: the model's definition goes back to the one kept, its
  replicas replaced one at a time, each new one ready before an old stops.

A gate that fails stops the change in words: the canary is removed (an
update, a canary's start) or left as it is (a promotion), and the model keeps
serving the revision it had. Each change is a job (llmgw.control.jobs) whose
steps say what happened; it runs on the leader, and ends failed if this
control plane stops leading. Only models added at run time can move to a
new definition; one declared in server.yaml may run a canary, and is moved
by changing the file.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from llmgw.control.catalog import CatalogError, CatalogModel, model_to_spec
from llmgw.control.evals import EvalError, Suite, SuiteResult, gate_verdict, parse_suite, replica_asker, run_suite
from llmgw.control.job_driver import POLL, JobDriver
from llmgw.control.job_driver import JobStopped as _Stopped
from llmgw.control.jobs import Job
from llmgw.control.rollout_state import ROLLOUTS_SETTING, Canary, Previous, Rollouts, canary_name
from llmgw.obs import logs

if TYPE_CHECKING:
    from llmgw.control.service import ControlPlane

log = logs.get("llmgw.control.rollout")

__all__ = ["ModelRollouts", "RolloutError", "new_source", "parse_weight"]

class RolloutError(ValueError):
    """A change refused before anything started; `kind` is invalid, conflict or not_found."""

    def __init__(self, text: str, kind: str = "invalid") -> None:
        super().__init__(text)
        self.kind = kind


def parse_weight(value: Any) -> float:
    """A share of sessions: 10, 10%, or 2.5%; RolloutError naming the field otherwise."""
    text = str(value).strip()
    number = text[:-1].strip() if text.endswith("%") else text
    try:
        weight = float(number)
    except ValueError:
        raise RolloutError(f"weight: give a share of the model's sessions like 10%, got {text!r}") from None
    if isinstance(value, bool) or not 0 <= weight <= 100:
        raise RolloutError(f"weight: give a share from 0% to 100%, got {text!r}")
    return weight


_MIRROR_PATH = re.compile(r"^(?P<head>(?:mirror:/*|https?://[^/]+/)?)(?P<model>[^/@:]+)/(?P<version>[^/]+)"
                          r"(?P<rest>(?:/.*)?)$")
_REPO = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[^/@]+))?$")


def new_source(current: str, to: str) -> str:
    """The source a model runs after `--to`: a whole source as given, or, for a bare revision (no / or :),
    the current source with that revision: `org/repo@REV`, or the version of a mirror path or URL."""
    to = to.strip()
    if not to:
        raise RolloutError("to: give the new revision: the model's new source, or a revision of the one it has")
    if "/" in to or ":" in to:
        return to
    current = current.strip()
    repo = _REPO.match(current)
    if repo and not current.startswith("mirror:"):
        return f"{repo['repo']}@{to}"
    path = _MIRROR_PATH.match(current)
    if path:
        return f"{path['head']}{path['model']}/{to}{path['rest']}"
    raise RolloutError(f"to: the model's source {current or '(none)'!r} names no revision to change; "
                       "give the whole new source instead")


@attrs.frozen
class EvalRun:
    """A suite asked of a model by hand (`llmgw ctl eval run`), kept for the API's answer."""

    result: SuiteResult
    at: float


class ModelRollouts(JobDriver):
    """The leader's updates, canaries and rollbacks; each change runs as a task driving its job."""

    cancelled_words = "stopped: the canary was taken out, or this control plane stopped leading"

    def __init__(self, plane: ControlPlane, *, wall_clock: Callable[[], float] = time.time) -> None:
        super().__init__(plane, wall_clock=wall_clock)

    # ---------------------------------------------------------------- reading

    @property
    def catalog(self):
        return self.plane.catalog

    def state(self) -> Rollouts:
        return self.catalog.rollouts

    def canaries(self) -> list[Canary]:
        return [self.state().canaries[m] for m in sorted(self.state().canaries)]

    def previous(self, model: str) -> Previous | None:
        prev = self.state().previous.get(model)
        return prev if prev is not None and prev.until > self.wall_clock() else None

    # ---------------------------------------------------------------- the changes

    async def update(self, model: str, to: str, *, gate: Mapping[str, Any] | None, actor: str) -> Job:
        cm = self._movable(model, "update")
        suite = self._suite(gate)
        source = self._new_revision(cm, to)
        replicas = max(1, self._ready_count(cm.name), self._wanted(cm.name))
        canary = await self._start_canary(cm, source, 0.0, replicas, actor, for_update=True)
        job = self._job(cm.name, "update", actor,
                        f"{actor} asked to update {cm.name} from {cm.config.source or '(no source)'} to {source}")
        self._run(cm.name, job, self._update(job, cm, canary, suite, actor))
        return job

    async def canary(self, model: str, to: str, *, weight: Any, replicas: int = 1,
                     gate: Mapping[str, Any] | None, actor: str) -> Job:
        cm = self._model(model)
        share = parse_weight(weight)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= 64:
            raise RolloutError(f"replicas: give the canary's replicas, from 1 to 64, got {replicas!r}")
        suite = self._suite(gate)
        source = self._new_revision(cm, to)
        canary = await self._start_canary(cm, source, share, replicas, actor, for_update=False)
        job = self._job(cm.name, "canary", actor,
                        f"{actor} asked to try {source} as {canary.name}, for {share:g}% of {cm.name}'s sessions")
        self._run(cm.name, job, self._canary(job, cm, canary, suite))
        return job

    async def set_weight(self, model: str, weight: Any, *, actor: str) -> Canary:
        share = parse_weight(weight)
        canary = self._need_canary(model)
        if canary.for_update:
            raise RolloutError(f"{model}'s canary belongs to an update under way; it takes its traffic by itself",
                               "conflict")
        changed = attrs.evolve(canary, weight=share)
        await self._save(lambda r: r.canaries.__setitem__(canary.model, changed))
        return changed

    async def promote(self, model: str, *, gate: Mapping[str, Any] | None, actor: str) -> Job:
        canary = self._need_canary(model)
        cm = self._movable(canary.model, "promote")
        if canary.for_update:
            raise RolloutError(f"{model}'s canary belongs to an update under way; it is promoted by the update",
                               "conflict")
        if self.busy(cm.name):
            raise RolloutError(f"{cm.name}'s canary is still starting; promote it once it serves", "conflict")
        suite = self._suite(gate)
        job = self._job(cm.name, "promote", actor, f"{actor} asked to move {cm.name} to its canary's revision "
                                                   f"{canary.revision}")
        self._run(cm.name, job, self._promote(job, cm, canary, suite, actor))
        return job

    async def abort(self, model: str, *, actor: str) -> Canary:
        canary = self._need_canary(model)
        task = self._tasks.get(canary.model)
        if task is not None and not task.done():
            task.cancel()
        await self._remove_canary(canary, actor)
        return canary

    async def rollback(self, model: str, *, actor: str) -> Job:
        cm = self._movable(model, "roll back")
        prev = self.previous(cm.name)
        if prev is None:
            window = self.plane.config.control.rollback_window
            raise RolloutError(f"{cm.name} has no revision to go back to: none was replaced in the last {window} "
                               "(control.rollback_window)", "conflict")
        if self._need_canary(cm.name, required=False) is not None:
            raise RolloutError(f"{cm.name} has a canary; promote it or take it out first", "conflict")
        job = self._job(cm.name, "rollback", actor,
                        f"{actor} asked to return {cm.name} from {cm.config.source} to {prev.revision}")
        self._run(cm.name, job, self._rollback(job, cm, prev, actor))
        return job

    async def evaluate(self, model: str, suite_spec: Mapping[str, Any]) -> SuiteResult:
        """Ask a quality suite of a model's ready replicas now, and score it."""
        cm = self.catalog.get(model)
        if cm is None:
            raise RolloutError(f"no model called {model!r} is in the catalog", "not_found")
        suite = self._suite(suite_spec)
        assert suite is not None
        if not self._ready_count(cm.name):
            raise RolloutError(f"no replica of {cm.name} is ready here to ask the suite of", "conflict")
        result = await run_suite(suite, cm.name, replica_asker(self.plane.replicas))
        logs.event(log, "quality suite asked", model=cm.name, suite=suite.name, score=round(result.score, 4),
                   cases=len(result.cases))
        return result

    # ---------------------------------------------------------------- checks before anything starts

    def _model(self, name: str) -> CatalogModel:
        if self.plane.reconciler is None or not self.plane.leading:
            raise RolloutError("this control plane does not lead; ask the leader", "unavailable")
        cm = self.catalog.get(name)
        if cm is None:
            raise RolloutError(f"no model called {name!r} is in the catalog", "not_found")
        if cm.name.endswith("-canary") and any(c.name == cm.name for c in self.state().canaries.values()):
            raise RolloutError(f"{cm.name} is a canary; change the model it is the canary of", "conflict")
        if not cm.runs_on_cluster:
            raise RolloutError(f"{cm.name} is forwarded to a provider; it has no revision running here")
        if cm.problems:
            raise RolloutError(f"{cm.name} cannot run until its definition is fixed: {'; '.join(cm.problems)}")
        if self.busy(cm.name):
            raise RolloutError(f"{cm.name} is already being changed (GET /jobs?model={cm.name}); "
                               "wait for that job to end", "conflict")
        return cm

    def _movable(self, name: str, doing: str) -> CatalogModel:
        cm = self._model(name)
        if cm.origin == "file":
            raise RolloutError(f"{cm.name} is declared in server.yaml, which this cannot {doing}: change its "
                               "source there (a canary of it may still be tried)", "conflict")
        return cm

    def _new_revision(self, cm: CatalogModel, to: str) -> str:
        if self._need_canary(cm.name, required=False) is not None:
            raise RolloutError(f"{cm.name} already has a canary; promote it or take it out first", "conflict")
        source = new_source(cm.config.source, to)
        if source == cm.config.source:
            raise RolloutError(f"to: {cm.name} already runs {source}")
        return source

    def _suite(self, spec: Mapping[str, Any] | None) -> Suite | None:
        if spec is None:
            return None
        try:
            suite = parse_suite(spec)
        except EvalError as exc:
            raise RolloutError(f"gate: {exc}") from None
        if suite.judge and suite.judge not in self.catalog:
            raise RolloutError(f"gate: judge: no model called {suite.judge!r} is in the catalog")
        return suite

    def _need_canary(self, model: str, required: bool = True) -> Canary | None:
        state = self.state()
        canary = state.canaries.get(model)
        if canary is None:  # named by the canary's own name
            canary = next((c for c in state.canaries.values() if c.name == model), None)
        if canary is None and required:
            if self.catalog.get(model) is None:
                raise RolloutError(f"no model called {model!r} is in the catalog", "not_found")
            raise RolloutError(f"{model} has no canary (llmgw ctl model canaries lists them)", "not_found")
        return canary

    # ---------------------------------------------------------------- the store

    async def _save(self, change: Callable[[Rollouts], None]) -> None:
        store = self.plane.store
        kept = await store.get_setting(ROLLOUTS_SETTING)
        state = Rollouts.from_setting(kept.value if kept else None)
        now = self.wall_clock()
        for model in [m for m, p in state.previous.items() if p.until <= now]:
            del state.previous[model]
        change(state)
        await store.set_setting(ROLLOUTS_SETTING, state.to_setting(), actor="control-plane")
        await self.catalog.load()

    async def _start_canary(self, cm: CatalogModel, source: str, weight: float, replicas: int, actor: str, *,
                            for_update: bool) -> Canary:
        name = canary_name(cm.name)
        if name in self.catalog:
            raise RolloutError(f"a model called {name} is already in the catalog; remove it first", "conflict")
        spec = model_to_spec(cm.config)
        spec.update(name=name, source=source, aliases=[], fallbacks=[])
        spec["scaling"] = {"min": replicas, "max": replicas}
        try:
            await self.catalog.add(spec, actor=actor, audit=False)
        except CatalogError as exc:
            raise RolloutError(f"to: {source} cannot run as {name}: {'; '.join(exc.problems)}",
                               "conflict" if exc.conflict else "invalid") from None
        canary = Canary(model=cm.name, name=name, revision=source, weight=weight, replicas=replicas, by=actor,
                        started=self.wall_clock(), for_update=for_update)
        await self._save(lambda r: r.canaries.__setitem__(cm.name, canary))
        self.plane.reconciler.kick()
        return canary

    async def _remove_canary(self, canary: Canary, actor: str) -> None:
        def drop(r: Rollouts) -> None:
            r.canaries.pop(canary.model, None)

        await self._save(drop)
        if canary.name in self.catalog:
            try:
                await self.catalog.remove(canary.name, actor=actor, audit=False)
            except CatalogError as exc:
                logs.event(log, "canary not removed from the catalog", logging.WARNING, model=canary.name,
                           error=str(exc))
        if self.plane.reconciler is not None:
            self.plane.reconciler.kick()

    async def _wait_replaced(self, job: Job, name: str, old: list[str]) -> None:
        rec = self.plane.reconciler
        deadline = asyncio.get_running_loop().time() + self.ready_timeout
        while True:
            if not job.active:
                raise _Stopped(job.now)
            left = [rid for rid in old if rid in rec.records]
            wanted = self._wanted(name)
            mine = [r for r in rec.records.values() if r.model == name]
            ready = sum(1 for r in mine if r.live and r.state == "ready")
            if not left and ready >= wanted and not any(r.live and r.state == "starting" for r in mine):
                return
            st = rec.models.get(name)
            if st is not None and st.parked:
                raise _Stopped(f"{name}'s replicas could not start on the new revision: {st.park_reason}")
            if asyncio.get_running_loop().time() > deadline:
                raise _Stopped(f"{name}'s replicas were not replaced within {self.ready_timeout:g} s")
            await asyncio.sleep(POLL)

    async def _gate(self, job: Job, suite: Suite | None, new: str, old: str) -> None:
        """Ask the suite of the new revision (and of the old, to compare); _Stopped when it may not serve."""
        if suite is None:
            return
        ask = replica_asker(self.plane.replicas)
        self._step(job, f"asking {new} the quality suite {suite.name} ({len(suite.cases)} cases)")
        new_result = await run_suite(suite, new, ask)
        self._step(job, new_result.summary())
        old_result = None
        if self._ready_count(old):
            old_result = await run_suite(suite, old, ask)
            self._step(job, old_result.summary())
        verdict = gate_verdict(suite, new_result, old_result)
        logs.event(log, "quality gate", model=old, suite=suite.name, score=round(new_result.score, 4),
                   passed=not verdict)
        if verdict:
            raise _Stopped(f"stopped by the quality gate: {verdict}")
        self._step(job, f"{new} passed the quality gate {suite.name}")

    async def _move(self, job: Job, cm: CatalogModel, canary: Canary, actor: str) -> None:
        """The canary takes every session; the model's definition moves to its revision, its replicas restart
        on it (in place: the canary serves meanwhile); then the canary goes."""
        moved = attrs.evolve(canary, weight=100.0, serving=True, for_update=False)
        await self._save(lambda r: r.canaries.__setitem__(cm.name, moved))
        self._step(job, f"{canary.name} takes all of {cm.name}'s sessions while {cm.name} moves to "
                        f"{canary.revision}")
        current = self.catalog.get(cm.name)
        old_spec = model_to_spec(current.config)
        spec = dict(old_spec, source=canary.revision)
        try:
            await self.catalog.add(spec, actor=actor, replace=True, audit=False)
        except CatalogError as exc:
            await self._remove_canary(canary, actor)
            raise _Stopped(f"{cm.name}'s definition could not be changed: {'; '.join(exc.problems)}") from None
        until = self.wall_clock() + self.plane.config.control.rollback_window.total_seconds()
        prev = Previous(model=cm.name, spec=old_spec, revision=cm.config.source, until=until, by=actor)
        await self._save(lambda r: r.previous.__setitem__(cm.name, prev))
        old = self.plane.reconciler.restart(cm.name, in_place=True)
        self._step(job, f"{cm.name}'s definition runs {canary.revision}; restarting its "
                        f"{len(old)} replica{'s' if len(old) != 1 else ''} on it")
        await self._wait_replaced(job, cm.name, old)
        await self._remove_canary(canary, actor)
        self._step(job, f"{canary.name} removed")
        when = dt.datetime.fromtimestamp(until, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        self.plane.jobs.end(job, "done", f"{cm.name} runs {canary.revision}; `llmgw ctl model rollback {cm.name}` "
                                         f"returns it to {cm.config.source or '(no source)'} until {when}")

    async def _update(self, job: Job, cm: CatalogModel, canary: Canary, suite: Suite | None, actor: str) -> None:
        self._step(job, f"{canary.name} started beside {cm.name}: {canary.replicas} "
                        f"replica{'s' if canary.replicas != 1 else ''} of {canary.revision}, taking no sessions yet")
        try:
            await self._wait_ready(job, canary.name, canary.replicas)
            self._step(job, f"{canary.name} ready: {canary.replicas} replica{'s' if canary.replicas != 1 else ''}")
            await self._gate(job, suite, canary.name, cm.name)
        except _Stopped as exc:
            await self._remove_canary(canary, actor)
            raise _Stopped(f"{exc}; {cm.name} keeps serving {cm.config.source or '(no source)'}") from None
        await self._move(job, cm, canary, actor)

    async def _canary(self, job: Job, cm: CatalogModel, canary: Canary, suite: Suite | None) -> None:
        self._step(job, f"{canary.name} started beside {cm.name}: {canary.replicas} "
                        f"replica{'s' if canary.replicas != 1 else ''} of {canary.revision}")
        try:
            await self._wait_ready(job, canary.name, 1)
            self._step(job, f"{canary.name} ready")
            await self._gate(job, suite, canary.name, cm.name)
        except _Stopped as exc:
            await self._remove_canary(canary, canary.by)
            raise _Stopped(f"{exc}; the canary was taken out and {cm.name} keeps every session") from None
        current = self._need_canary(cm.name, required=False)
        if current is None or current.name != canary.name:
            raise _Stopped("the canary was taken out before it served")
        await self._save(lambda r: r.canaries.__setitem__(cm.name, attrs.evolve(current, serving=True)))
        self.plane.jobs.end(job, "done", f"{canary.name} serves {current.weight:g}% of {cm.name}'s sessions; "
                                         f"`llmgw ctl model promote {cm.name}` moves the model to "
                                         f"{canary.revision}, `abort` takes it out")

    async def _promote(self, job: Job, cm: CatalogModel, canary: Canary, suite: Suite | None, actor: str) -> None:
        if not self._ready_count(canary.name):
            raise _Stopped(f"{canary.name} has no ready replica to promote; it stays as it is")
        try:
            await self._gate(job, suite, canary.name, cm.name)
        except _Stopped as exc:
            raise _Stopped(f"{exc}; the canary stays at {canary.weight:g}% and {cm.name} keeps "
                           f"{cm.config.source or '(no source)'}") from None
        await self._move(job, cm, canary, actor)

    async def _rollback(self, job: Job, cm: CatalogModel, prev: Previous, actor: str) -> None:
        try:
            await self.catalog.add(prev.spec, actor=actor, replace=True, audit=False)
        except CatalogError as exc:
            raise _Stopped(f"the definition kept cannot run now: {'; '.join(exc.problems)}") from None

        def forget(r: Rollouts) -> None:
            r.previous.pop(cm.name, None)

        await self._save(forget)
        old = self.plane.reconciler.restart(cm.name)
        self._step(job, f"{cm.name}'s definition runs {prev.revision} again; replacing its {len(old)} "
                        f"replica{'s' if len(old) != 1 else ''}, each new one ready before an old one stops")
        await self._wait_replaced(job, cm.name, old)
        self.plane.jobs.end(job, "done", f"{cm.name} runs {prev.revision} again")
