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
steps say what happened; it runs on the leader and is kept in the store
stage by stage (llmgw.control.job_driver), so that when the leader changes
the next one carries it on from its stage (`resume_decision` says how, per
kind and stage) or ends it safely with the model on the revision it had.
Only models added at run time can move to a new definition; one declared
in server.yaml may run a canary, and is moved by changing the file.
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

__all__ = ["ModelRollouts", "Resume", "RolloutError", "new_source", "parse_weight", "resume_decision"]

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


@attrs.frozen
class Resume:
    """What a new leader does with a change it found running: carry it on from `stage`, or end it (`end`
    holds the words, and `remove_canary` whether the canary goes with it)."""

    stage: str = ""
    end: str = ""
    remove_canary: bool = False


def resume_decision(kind: str, stage: str, args: Mapping[str, Any], *, model_source: str | None,
                    canary: Canary | None, previous: Previous | None) -> Resume:
    """How a change left running by a former leader goes on, from what the store holds now: the model's source
    (None: it left the catalog), its canary and its kept previous revision.

    Every stage can run again: waiting for a canary and its quality gate are asked again from the start; moving
    the model writes only what is not yet written and restarts only the replicas recorded as still to restart.
    A change ends instead, safely, when what it needs has gone: the model, or the canary it was moving to."""
    model = str(args.get("model", ""))
    keeps = f"{model} keeps serving {args.get('from') or model_source or '(no source)'}"
    if model_source is None:
        return Resume(end=f"{model} is no longer in the catalog; nothing is left to change",
                      remove_canary=canary is not None)
    to = str(args.get("to", ""))
    if kind == "rollback":
        if stage == "moving" and (model_source == to or (previous is not None and previous.revision == to)):
            return Resume(stage="moving")
        return Resume(end=f"the revision to return to is no longer kept; {model} keeps serving {model_source}")
    if kind not in ("update", "canary", "promote"):
        return Resume(end=f"a change of kind {kind!r} is not carried on by this version; {keeps}")
    if canary is None or canary.revision != to:
        if stage == "moving" and model_source == to:
            return Resume(stage="finishing")  # moved, its canary already gone: its replicas still to restart
        return Resume(end=f"its canary was taken out meanwhile; {keeps}")
    if stage in ("starting", "gate", "moving"):
        return Resume(stage=stage)
    return Resume(end=f"its stage {stage!r} is not known to this version; the canary was taken out and {keeps}",
                  remove_canary=kind != "promote")


class ModelRollouts(JobDriver):
    """The leader's updates, canaries and rollbacks; each change runs as a task driving its job."""

    cancelled_words = "stopped: the canary was taken out"
    kinds = ("update", "canary", "promote", "rollback")

    def __init__(self, plane: ControlPlane, *, wall_clock: Callable[[], float] = time.time) -> None:
        super().__init__(plane, wall_clock=wall_clock)
        from llmgw.router.catalog_follow import WATCH_S

        #: seconds every gateway (a standby's too) takes to read a new split from the store, and so to follow it
        self.follow_wait = WATCH_S + 1.0

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
        async with self._taking_over:  # a take-over meanwhile would find its canary and no job following it
            canary = await self._start_canary(cm, source, 0.0, replicas, actor, for_update=True)
            job = self._job(cm.name, "update", actor, f"{actor} asked to update {cm.name} from "
                                                      f"{cm.config.source or '(no source)'} to {source}")
            await self._record(job, "starting", model=cm.name, to=source, gate=dict(gate) if gate else None,
                               actor=actor, **{"from": cm.config.source})
            self._run(cm.name, job, self._update(job, cm.name, canary, suite, actor, cm.config.source))
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
        await self._record(job, "starting", model=cm.name, to=source, gate=dict(gate) if gate else None,
                           actor=actor, **{"from": cm.config.source})
        self._run(cm.name, job, self._canary(job, cm.name, canary, suite))
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
        await self._record(job, "gate", model=cm.name, to=canary.revision, gate=dict(gate) if gate else None,
                           actor=actor, **{"from": cm.config.source})
        self._run(cm.name, job, self._promote(job, cm.name, canary, suite, actor, cm.config.source))
        return job

    async def abort(self, model: str, *, actor: str) -> Canary:
        canary = self._need_canary(model)
        self.cancel(canary.model)
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
        await self._record(job, "moving", model=cm.name, to=prev.revision, spec=prev.spec, actor=actor,
                           **{"from": cm.config.source})
        self._run(cm.name, job, self._rollback(job, cm.name, prev.spec, prev.revision, actor))
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

    async def _settled(self, job: Job) -> None:
        """After a take-over: wait until the agents have had their moment to register again, so the replicas
        they still run are known before any is restarted (or counted as gone)."""
        rec = self.plane.reconciler
        while rec.clock() < rec.hold_starts_until:
            if not job.active:
                raise _Stopped(job.now)
            await asyncio.sleep(POLL)

    async def _wait_replaced(self, job: Job, name: str, old: list[str], *, in_place: bool) -> None:
        """Until none of `old` runs and the model has what it wants, ready. An old replica that is running but
        not being restarted (found again after a take-over) is restarted here, the way the first were."""
        rec = self.plane.reconciler
        deadline = asyncio.get_running_loop().time() + self.ready_timeout
        while True:
            if not job.active:
                raise _Stopped(job.now)
            left = [rid for rid in old if rid in rec.records]
            st = rec.models.get(name)
            for rid in left:
                if rec.records[rid].live and (st is None or rid not in st.restarting):
                    try:
                        rec.restart_replica(rid, in_place=in_place)
                    except (KeyError, ValueError) as exc:
                        logs.event(log, "replica not restarted", logging.WARNING, replica_id=rid, error=str(exc))
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

    async def _move(self, job: Job, name: str, canary: Canary, actor: str, from_source: str) -> None:
        """The canary takes every session; the model's definition moves to its revision, its replicas restart
        on it (in place: the canary serves meanwhile); then the canary goes. Each part is written only when
        not yet done, so a new leader runs this again from the start of the stage."""
        await self._record(job, "moving")
        moved = attrs.evolve(canary, weight=100.0, serving=True, for_update=False)
        if self.state().canaries.get(name) != moved:
            await self._save(lambda r: r.canaries.__setitem__(name, moved))
            self._step(job, f"{canary.name} takes all of {name}'s sessions while {name} moves to "
                            f"{canary.revision}")
            await self._gateways_follow(job)  # no gateway still sends a session to a replica about to restart
        current = self.catalog.get(name)
        if current is None:
            await self._remove_canary(canary, actor)
            raise _Stopped(f"{name} left the catalog while it moved; its canary was taken out")
        until = self.wall_clock() + self.plane.config.control.rollback_window.total_seconds()
        if current.config.source != canary.revision:
            old_spec = model_to_spec(current.config)
            kept = self.state().previous.get(name)
            if kept is None or kept.revision != current.config.source:  # kept first: a take-over keeps it too
                prev = Previous(model=name, spec=old_spec, revision=current.config.source, until=until, by=actor)
                await self._save(lambda r: r.previous.__setitem__(name, prev))
            try:
                await self.catalog.add(dict(old_spec, source=canary.revision), actor=actor, replace=True,
                                       audit=False)
            except CatalogError as exc:
                await self._remove_canary(canary, actor)
                raise _Stopped(f"{name}'s definition could not be changed: {'; '.join(exc.problems)}") from None
        prev = self.state().previous.get(name)
        until = prev.until if prev is not None else until
        await self._finish_move(job, name, canary, actor, from_source, until)

    async def _finish_move(self, job: Job, name: str, canary: Canary, actor: str, from_source: str,
                           until: float) -> None:
        """The model's definition runs the canary's revision: restart its replicas on it, then the canary goes."""
        old = (self._recorded(job).args.get("restarting") if self._recorded(job) else None)
        if old is None:
            await self._settled(job)
            old = self.plane.reconciler.restart(name, in_place=True)
            self._step(job, f"{name}'s definition runs {canary.revision}; restarting its "
                            f"{len(old)} replica{'s' if len(old) != 1 else ''} on it")
            await self._record(job, "moving", restarting=list(old))
        else:
            await self._settled(job)
        await self._wait_replaced(job, name, list(old), in_place=True)
        left = self._need_canary(name, required=False)
        if left is not None:
            if left.weight:  # its sessions back to the model first, on every gateway, then it goes
                await self._save(lambda r: r.canaries.__setitem__(name, attrs.evolve(left, weight=0.0)))
                self._step(job, f"{name} takes its sessions back from {canary.name}")
                await self._gateways_follow(job)
            await self._remove_canary(canary, actor)
            self._step(job, f"{canary.name} removed")
        when = dt.datetime.fromtimestamp(until, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        self.plane.jobs.end(job, "done", f"{name} runs {canary.revision}; `llmgw ctl model rollback {name}` "
                                         f"returns it to {from_source or '(no source)'} until {when}")

    async def _gateways_follow(self, job: Job) -> None:
        """Wait until every gateway has read the split just written (each reads it every few seconds)."""
        deadline = asyncio.get_running_loop().time() + self.follow_wait
        while asyncio.get_running_loop().time() < deadline:
            if not job.active:
                raise _Stopped(job.now)
            await asyncio.sleep(min(POLL, self.follow_wait))

    async def _update(self, job: Job, name: str, canary: Canary, suite: Suite | None, actor: str,
                      from_source: str, *, stage: str = "starting", resumed: bool = False) -> None:
        if stage == "starting":
            if not resumed:
                self._step(job, f"{canary.name} started beside {name}: {canary.replicas} "
                                f"replica{'s' if canary.replicas != 1 else ''} of {canary.revision}, "
                                "taking no sessions yet")
            try:
                await self._wait_ready(job, canary.name, canary.replicas)
                self._step(job, f"{canary.name} ready: {canary.replicas} "
                                f"replica{'s' if canary.replicas != 1 else ''}")
                await self._gate(job, suite, canary.name, name)
            except _Stopped as exc:
                await self._remove_canary(canary, actor)
                raise _Stopped(f"{exc}; {name} keeps serving {from_source or '(no source)'}") from None
        await self._move(job, name, canary, actor, from_source)

    async def _canary(self, job: Job, name: str, canary: Canary, suite: Suite | None, *,
                      resumed: bool = False) -> None:
        if not resumed:
            self._step(job, f"{canary.name} started beside {name}: {canary.replicas} "
                            f"replica{'s' if canary.replicas != 1 else ''} of {canary.revision}")
        try:
            await self._wait_ready(job, canary.name, 1)
            self._step(job, f"{canary.name} ready")
            await self._gate(job, suite, canary.name, name)
        except _Stopped as exc:
            await self._remove_canary(canary, canary.by)
            raise _Stopped(f"{exc}; the canary was taken out and {name} keeps every session") from None
        current = self._need_canary(name, required=False)
        if current is None or current.name != canary.name:
            raise _Stopped("the canary was taken out before it served")
        await self._save(lambda r: r.canaries.__setitem__(name, attrs.evolve(current, serving=True)))
        self.plane.jobs.end(job, "done", f"{canary.name} serves {current.weight:g}% of {name}'s sessions; "
                                         f"`llmgw ctl model promote {name}` moves the model to "
                                         f"{canary.revision}, `abort` takes it out")

    async def _promote(self, job: Job, name: str, canary: Canary, suite: Suite | None, actor: str,
                       from_source: str, *, resumed: bool = False) -> None:
        if resumed:  # the agents register again with this leader: wait for the canary's replicas to be known
            await self._settled(job)
            await self._wait_ready(job, canary.name, 1)
        if not self._ready_count(canary.name):
            raise _Stopped(f"{canary.name} has no ready replica to promote; it stays as it is")
        try:
            await self._gate(job, suite, canary.name, name)
        except _Stopped as exc:
            raise _Stopped(f"{exc}; the canary stays at {canary.weight:g}% and {name} keeps "
                           f"{from_source or '(no source)'}") from None
        await self._move(job, name, canary, actor, from_source)

    async def _rollback(self, job: Job, name: str, spec: Mapping[str, Any], revision: str, actor: str) -> None:
        current = self.catalog.get(name)
        if current is None:
            raise _Stopped(f"{name} left the catalog; nothing is left to roll back")
        if current.config.source != revision:
            try:
                await self.catalog.add(dict(spec), actor=actor, replace=True, audit=False)
            except CatalogError as exc:
                raise _Stopped(f"the definition kept cannot run now: {'; '.join(exc.problems)}") from None

        def forget(r: Rollouts) -> None:
            r.previous.pop(name, None)

        if name in self.state().previous:
            await self._save(forget)
        record = self._recorded(job)
        old = record.args.get("restarting") if record is not None else None
        await self._settled(job)
        if old is None:
            old = self.plane.reconciler.restart(name)
            self._step(job, f"{name}'s definition runs {revision} again; replacing its {len(old)} "
                            f"replica{'s' if len(old) != 1 else ''}, each new one ready before an old one stops")
            await self._record(job, "moving", restarting=list(old))
        await self._wait_replaced(job, name, list(old), in_place=False)
        self.plane.jobs.end(job, "done", f"{name} runs {revision} again")

    # ---------------------------------------------------------------- after a leader change

    async def _resume(self, job: Job, record) -> Any:
        args = record.args
        name = str(args.get("model") or record.model)
        cm = self.catalog.get(name)
        canary = self._need_canary(name, required=False)
        decision = resume_decision(record.kind, record.stage, {**args, "model": name},
                                   model_source=cm.config.source if cm is not None else None, canary=canary,
                                   previous=self.state().previous.get(name))
        actor = str(args.get("actor") or record.by)
        from_source = str(args.get("from") or "")
        if decision.end:
            if decision.remove_canary and canary is not None:
                await self._remove_canary(canary, actor)
            raise _Stopped(decision.end)
        try:
            suite = self._suite(args.get("gate"))
        except RolloutError as exc:
            if record.kind != "promote" and canary is not None and decision.stage != "moving":
                await self._remove_canary(canary, actor)
                raise _Stopped(f"its quality gate cannot be asked now ({exc}); the canary was taken out and "
                               f"{name} keeps serving {from_source or '(no source)'}") from None
            raise _Stopped(f"its quality gate cannot be asked now ({exc}); {name} and its canary stay as they "
                           "are") from None
        if record.kind == "rollback":
            return self._rollback(job, name, args.get("spec") or {}, str(args.get("to", "")), actor)
        if decision.stage == "finishing":
            moved = Canary(model=name, name=canary_name(name), revision=str(args.get("to", "")), weight=100.0,
                           serving=True)
            prev = self.state().previous.get(name)
            until = prev.until if prev is not None else self.wall_clock()
            return self._finish_move(job, name, moved, actor, from_source, until)
        if decision.stage == "moving":
            return self._move(job, name, canary, actor, from_source)
        if record.kind == "update":
            return self._update(job, name, canary, suite, actor, from_source, stage=decision.stage, resumed=True)
        if record.kind == "canary":
            return self._canary(job, name, canary, suite, resumed=True)
        return self._promote(job, name, canary, suite, actor, from_source, resumed=True)

    async def _take_over(self) -> list[Job]:
        """Carry on the changes a former leader left running; then take out an update's canary that no job
        follows any more (its leader stopped before it wrote the job), so no model runs two revisions for
        nothing. (An update starting here meanwhile waits: it holds the same lock while it starts.)"""
        await self.catalog.load()  # the canaries and kept revisions as the store holds them now
        taken = await super()._take_over()
        for canary in list(self.state().canaries.values()):
            if canary.for_update and not self.busy(canary.model):
                logs.event(log, "an update's canary no job follows taken out", logging.WARNING, model=canary.model,
                           canary=canary.name)
                await self._remove_canary(canary, "control-plane")
        return taken
