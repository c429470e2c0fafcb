"""Jobs a task drives itself: a change to a model that runs step by step on the leader.

`llmgw ctl model update`, `canary`, `rollback` (llmgw.control.rollout) and
`llmgw ctl model serve` (llmgw.control.model_serve) each start a job whose
steps their own task writes, as opposed to the jobs the reconciler's hooks
follow (llmgw.control.jobs). What they share is here: one task per model,
a step that notices the job was ended under it, waiting for a model's
replicas to be ready (a parked model or a deadline ends the wait in words),
and ending the job failed, with the reason, whatever stops the task.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from llmgw.control.jobs import Job
from llmgw.obs import logs

if TYPE_CHECKING:
    from llmgw.control.service import ControlPlane

log = logs.get("llmgw.control.job_driver")

__all__ = ["JobDriver", "JobStopped", "POLL", "READY_TIMEOUT"]

#: How long a new model or revision may take to be ready (its weights fetched, its engine started).
READY_TIMEOUT = 1800.0
#: How often a job looks at what runs.
POLL = 0.25


class JobStopped(Exception):
    """The job cannot go on; its words say why."""


class JobDriver:
    """Runs one task per model, each driving its job to done or failed."""

    #: the words a job ends with when its task is cancelled (the leader stopped leading, or what it followed went)
    cancelled_words = "stopped: this control plane stopped leading"

    def __init__(self, plane: ControlPlane, *, wall_clock: Callable[[], float] = time.time) -> None:
        self.plane = plane
        self.wall_clock = wall_clock
        self.ready_timeout = READY_TIMEOUT
        self._tasks: dict[str, asyncio.Task] = {}  #: model -> the task changing it

    def busy(self, model: str) -> bool:
        task = self._tasks.get(model)
        return task is not None and not task.done()

    async def stop(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        for task in list(self._tasks.values()):
            try:
                await task
            except BaseException:  # noqa: BLE001 - stopping: what each ended with is in its job
                pass
        self._tasks.clear()

    # ---------------------------------------------------------------- jobs

    def _job(self, model: str, kind: str, actor: str, first: str) -> Job:
        job = self.plane.jobs.start(model, kind, actor, first=first)
        job.driven = True
        return job

    def _run(self, model: str, job: Job, work: Awaitable[None]) -> None:
        async def drive() -> None:
            try:
                await work
            except JobStopped as exc:
                self.plane.jobs.end(job, "failed", str(exc))
            except asyncio.CancelledError:
                self.plane.jobs.end(job, "failed", self.cancelled_words)
                raise
            except Exception as exc:  # noqa: BLE001 - a job ends in words whatever went wrong
                logs.event(log, "model change failed", logging.ERROR, model=model, job=job.id, error=str(exc))
                self.plane.jobs.end(job, "failed", f"stopped by an error: {exc}")

        self._tasks[model] = asyncio.get_running_loop().create_task(drive(), name=f"{job.kind} {model}")

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
