"""Jobs a task drives itself: a change to a model that runs step by step on the leader.

`llmgw ctl model update`, `canary`, `rollback` (llmgw.control.rollout) and
`llmgw ctl model serve` (llmgw.control.model_serve) each start a job whose
steps their own task writes, as opposed to the jobs the reconciler's hooks
follow (llmgw.control.jobs). What they share is here: one task per model,
a step that notices the job was ended under it, waiting for a model's
replicas to be ready (a parked model or a deadline ends the wait in words),
and ending the job failed, with the reason, whatever stops the task.

A job survives the loss of its leader. Each one is kept in the store while
it runs, as the setting `control.jobs.JOB-ID` (a `JobRecord`: its kind,
model, steps so far, the stage it reached with what that stage needs, and
the leader and epoch driving it), written before each stage begins, and
removed when the job ends. When this control plane stops leading (or
stops), its tasks are cancelled and their records left in the store; when
a control plane gains the lease, `take_over` finds the records no task of
its own drives and has the driver's `_resume` carry each on from its stage,
or end it safely in words (docs/control-plane.md, "Jobs and leader
changes", says which, per kind and stage).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs

from llmgw.control.jobs import Job, JobStep
from llmgw.obs import logs

if TYPE_CHECKING:
    from llmgw.control.service import ControlPlane

log = logs.get("llmgw.control.job_driver")

__all__ = ["JOB_RECORD_PREFIX", "JobDriver", "JobRecord", "JobStopped", "POLL", "READY_TIMEOUT", "load_records"]

#: Each running job's record is the store setting of this prefix and its id.
JOB_RECORD_PREFIX = "control.jobs."
#: Who writes the records.
ACTOR = "control-plane"

#: How long a new model or revision may take to be ready (its weights fetched, its engine started).
READY_TIMEOUT = 1800.0
#: How often a job looks at what runs.
POLL = 0.25


class JobStopped(Exception):
    """The job cannot go on; its words say why."""


@attrs.define
class JobRecord:
    """A running job as the store keeps it, so that the next leader can carry it on."""

    id: str
    kind: str
    model: str
    by: str
    started: float
    stage: str  #: the stage it reached, named by its driver
    args: dict[str, Any] = attrs.Factory(dict)  #: what that stage needs to run again
    steps: list[dict[str, Any]] = attrs.Factory(list)  #: [{"at": wall-clock time, "text": ...}]
    holder: str = ""  #: the leader driving it when it was written
    epoch: int = 0  #: that leader's epoch

    @property
    def key(self) -> str:
        return JOB_RECORD_PREFIX + self.id

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, value: Any) -> JobRecord | None:
        """None for a damaged record (left as it is, and named in the log)."""
        if not isinstance(value, dict):
            return None
        try:
            record = cls(id=str(value["id"]), kind=str(value["kind"]), model=str(value["model"]),
                         by=str(value.get("by", "")), started=float(value.get("started", 0.0)),
                         stage=str(value["stage"]), args=dict(value.get("args") or {}),
                         steps=[{"at": float(s["at"]), "text": str(s["text"])} for s in value.get("steps") or []],
                         holder=str(value.get("holder", "")), epoch=int(value.get("epoch", 0)))
        except (KeyError, TypeError, ValueError):
            return None
        return record


async def load_records(store) -> list[JobRecord]:
    """Every job record in the store, oldest first."""
    records = []
    for key, setting in (await store.get_settings()).items():
        if not key.startswith(JOB_RECORD_PREFIX):
            continue
        record = JobRecord.from_json(setting.value)
        if record is None or record.key != key:
            logs.event(log, "job record not understood; left in the store", logging.WARNING, key=key)
            continue
        records.append(record)
    return sorted(records, key=lambda r: r.started)


class JobDriver:
    """Runs one task per model, each driving its job to done or failed, and keeps each job in the store."""

    #: the words a job ends with when its task is cancelled by `cancel` (an operator's abort, what it followed went)
    cancelled_words = "stopped: the change was called off"
    #: the words the leader's own copy of a job ends with when the leader stops leading or stops
    handed_over_words = ("handed over: this control plane stopped leading; the next leader carries it on "
                         "from its last stage")
    #: the kinds of job this driver runs, and so resumes after a take-over
    kinds: tuple[str, ...] = ()

    def __init__(self, plane: ControlPlane, *, wall_clock: Callable[[], float] = time.time) -> None:
        self.plane = plane
        self.wall_clock = wall_clock
        self.ready_timeout = READY_TIMEOUT
        self._tasks: dict[str, asyncio.Task] = {}  #: model -> the task changing it
        self._records: dict[str, JobRecord] = {}  #: job id -> its record, as last written
        self._called_off: set[str] = set()  #: ids of jobs cancelled to end them (not to hand them over)
        self._taking_over = asyncio.Lock()  #: one take-over at a time: a job is never carried on twice

    def busy(self, model: str) -> bool:
        """Whether a job changing `model` runs (one that has ended is not, while its record is removed)."""
        task = self._tasks.get(model)
        return task is not None and not task.done() and task.job.active  # type: ignore[attr-defined]

    async def stop(self) -> None:
        """Cancel every task, leaving each job's record in the store for the next leader (`take_over`)."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except BaseException:  # noqa: BLE001 - stopping: what each ended with is in its job
                pass
        self._tasks.clear()

    #: the leader stopped leading: the same as stopping
    hand_over = stop

    def cancel(self, model: str) -> None:
        """End the task changing `model` (its job failed in `cancelled_words`, its record removed)."""
        task = self._tasks.get(model)
        if task is not None and not task.done():
            job_id = getattr(task, "job_id", "")
            self._called_off.add(job_id)
            task.cancel()

    # ---------------------------------------------------------------- jobs

    def _job(self, model: str, kind: str, actor: str, first: str) -> Job:
        job = self.plane.jobs.start(model, kind, actor, first=first)
        job.driven = True
        return job

    def _run(self, model: str, job: Job, work: Awaitable[None]) -> None:
        async def drive() -> None:
            keep = False
            try:
                await work
            except JobStopped as exc:
                self.plane.jobs.end(job, "failed", str(exc))
            except asyncio.CancelledError:
                if job.id in self._called_off:
                    self.plane.jobs.end(job, "failed", self.cancelled_words)
                else:
                    keep = True  # its record stays in the store, no longer this control plane's
                    self._records.pop(job.id, None)
                    self.plane.jobs.end(job, "failed", self.handed_over_words)
                raise
            except Exception as exc:  # noqa: BLE001 - a job ends in words whatever went wrong
                logs.event(log, "model change failed", logging.ERROR, model=model, job=job.id, error=str(exc))
                self.plane.jobs.end(job, "failed", f"stopped by an error: {exc}")
            finally:
                self._called_off.discard(job.id)
                if not keep:
                    await self._forget(job)

        task = asyncio.get_running_loop().create_task(drive(), name=f"{job.kind} {model}")
        task.job_id, task.job = job.id, job  # type: ignore[attr-defined]
        self._tasks[model] = task

    # ---------------------------------------------------------------- the records

    async def _record(self, job: Job, stage: str, **args: Any) -> None:
        """Keep the job in the store at `stage`, with what that stage needs (added to what earlier ones did)."""
        record = self._records.get(job.id)
        if record is None:
            record = JobRecord(id=job.id, kind=job.kind, model=job.model, by=job.by, started=job.started,
                               stage=stage)
            self._records[job.id] = record
        record.stage, record.model = stage, job.model
        record.args.update(args)
        record.steps = [{"at": s.at, "text": s.text} for s in job.steps]
        record.holder, record.epoch = self.plane.holder, self.plane.leadership.epoch
        try:
            await self.plane.store.set_setting(record.key, record.to_json(), actor=ACTOR)
        except Exception as exc:  # noqa: BLE001 - the job goes on; only a take-over would miss it
            logs.event(log, "job record not written", logging.WARNING, job=job.id, error=str(exc))

    def _recorded(self, job: Job) -> JobRecord | None:
        return self._records.get(job.id)

    async def _forget(self, job: Job) -> None:
        record = self._records.pop(job.id, None)
        if record is None:
            return
        try:
            await self.plane.store.unset_setting(record.key, actor=ACTOR)
        except Exception as exc:  # noqa: BLE001 - an ended job left behind is ended again by the next leader
            logs.event(log, "job record not removed", logging.WARNING, job=job.id, error=str(exc))

    async def take_over(self) -> list[Job]:
        """On gaining the lease: carry on (or end safely) every job of this driver's kinds that a former
        leader left running in the store. Returns the jobs taken over."""
        async with self._taking_over:
            return await self._take_over()

    async def _take_over(self) -> list[Job]:
        taken = []
        for record in await load_records(self.plane.store):
            running = {getattr(t, "job_id", "") for t in self._tasks.values() if not t.done()}
            if record.kind not in self.kinds or record.id in running or record.id in self._records:
                continue  # not ours to carry on, or one this control plane drives (perhaps just started)
            job = self.plane.jobs.restore(record.id, record.model, record.kind, record.by, record.started,
                                          [JobStep(at=s["at"], text=s["text"]) for s in record.steps])
            job.driven = True
            self._records[job.id] = record
            me = self.plane.holder
            old = record.holder or "the former leader"
            after = f"after {old} (epoch {record.epoch}) lost the lease"
            logs.event(log, "job taken over", job=job.id, kind=job.kind, model=job.model, stage=record.stage,
                       former=old)
            try:
                work = await self._resume(job, record)
            except JobStopped as exc:
                job.taken_over = f"ended safely by {me} {after}"
                self.plane.jobs.end(job, "failed", str(exc))
                await self._forget(job)
                taken.append(job)
                continue
            job.taken_over = f"resumed by {me} {after}"
            self.plane.jobs.step(job, f"{job.taken_over}, from its stage {record.stage!r}")
            await self._record(job, record.stage)
            self._run(job.model, job, work)
            taken.append(job)
        return taken

    async def _resume(self, job: Job, record: JobRecord) -> Awaitable[None]:
        """The work that carries `job` on from `record.stage`, or JobStopped with the words of a safe end
        (what that needed undone already undone)."""
        raise JobStopped(f"this control plane cannot carry on a job of kind {record.kind}")

    def _step(self, job: Job, text: str) -> None:
        if not job.active:
            raise JobStopped(job.now)
        self.plane.jobs.step(job, text)

    # ---------------------------------------------------------------- what runs

    def _ready(self, name: str) -> list:
        return [r for r in self.plane.replicas.replicas_for(name) if r.usable() and r.source == "control"]

    def _ready_count(self, name: str) -> int:
        return len(self._ready(name))

    def _wanted(self, name: str) -> int:
        rec = self.plane.reconciler
        st = rec.models.get(name) if rec is not None else None
        return st.wanted if st is not None else 0

    async def _wait_ready(self, job: Job, name: str, count: int) -> None:
        deadline = asyncio.get_running_loop().time() + self.ready_timeout
        while self._ready_count(name) < count:
            if not job.active:
                raise JobStopped(job.now)
            rec = self.plane.reconciler
            st = rec.models.get(name) if rec is not None else None
            if st is not None and st.parked:
                raise JobStopped(f"{name} could not start: {st.park_reason}")
            if asyncio.get_running_loop().time() > deadline:
                raise JobStopped(f"{name} was not ready within {self.ready_timeout:g} s "
                                 f"({self._ready_count(name)} of {count} replicas ready)")
            if st is not None and st.decision is not None and st.decision.placement is None:
                job.now = f"{name} waiting for room: {st.decision.summary()}"  # placement's reason, as jobs say
            await asyncio.sleep(POLL)
