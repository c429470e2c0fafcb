"""Jobs: a change to a model, followed on the leader until the model serves as asked or has failed.

A job starts when an operator adds a model, scales it, restarts its replicas
(or one of them) or retries it (`ControlPlane` starts it, naming who asked),
and when the reconciler places a replica for a model no job follows (a model
from server.yaml at start, a replica replaced after a crash: `by` is the
control plane). It is fed by the reconciler through `ReconcilerObserver`,
the hooks below, called where a replica is placed, fetches weights, starts,
becomes ready, stops or fails, where placement finds no room, and at the end
of each pass, when every job still running is measured against its goal:

- add, change, scale, retry, start and move: done once the model has as many
  ready replicas as it wants, none starting and none stopping;
- restart: done once every replica it was to restart is gone and the model
  again has what it wants;
- waiting while placement cannot place a replica (the cards are busy),
  running again once one is placed;
- failed when the model is parked after failing every start, leaves the
  catalog, or when this control plane stops leading.

An engine install (kind `engine`) follows one node installing one engine
instead of a model: started when an operator asks for it or placement has a
node install a model's engine, a step (with its time) each time the agent
says what it is doing, done when the node says it is installed and failed
in the installer's words (`engine_install`, fed by engine_provisioning.py).
Its `model` reads `vllm on gpu-a`.

Jobs are kept in the leader's memory, since it started: each one still
running, and the last `KEEP_ENDED` that ended. The jobs a task drives (update,
canary, promote, rollback, serve: llmgw.control.job_driver) are also kept in
the store while they run, so the next leader carries them on after a leader
change (`restore` puts one back among its jobs, under its own id, with its
steps so far).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from llmgw.control.placement import Decision, format_bytes
from llmgw.control.state import ModelState, ReplicaRecord
from llmgw.wire.messages import WeightsProgress

if TYPE_CHECKING:
    from llmgw.control.engine_provisioning import EngineState
    from llmgw.control.reconciler import Reconciler

__all__ = ["ACTIVE_STATES", "JOB_KINDS", "JOB_STATES", "KEEP_ENDED", "Job", "JobStep", "Jobs",
           "ReconcilerObserver"]

JOB_STATES = ("running", "waiting", "done", "failed")
#: States of a job that has not ended.
ACTIVE_STATES = ("running", "waiting")
JOB_KINDS = {
    "add": "a model added to the catalog",
    "change": "a model added again over the one before (replace)",
    "scale": "a model's scaling changed",
    "restart": "a model's replicas restarted, or one of them",
    "retry": "a parked model started again",
    "start": "replicas the control plane placed by itself (at start, after a crash, for load)",
    "move": "a replica moved off a draining node",
    "engine": "an engine installed on a node (an operator asked, or the control plane for a model)",
    "update": "a model moved to a new revision: started beside the old, checked, then given its traffic",
    "canary": "a model's new revision started beside it as MODEL-canary, for a share of its sessions",
    "promote": "a model moved to its canary's revision, and the canary removed",
    "rollback": "a model returned to the revision an update or a promotion replaced",
    "serve": "a model served from a repository or the mirror: fetched, planned, added, started, asked hello",
    "upgrade": "every node's agent moved to a signed release (or back), one node or rack at a time",
}
#: Ended jobs kept; the oldest is forgotten first.
KEEP_ENDED = 200
#: Who a job the control plane started by itself is by.
CONTROL_PLANE = "control-plane"


# ---------------------------------------------------------------- the hooks


class ReconcilerObserver:
    """What the reconciler tells whoever follows it; each hook does nothing here."""

    def pass_begun(self) -> None:
        """A reconciler pass begins (the catalog is read again in it)."""

    def pass_ended(self, rec: Reconciler) -> None:
        """A pass ended; `rec` holds its records and each model's state as the pass left them."""

    def placement_timed(self, seconds: float) -> None:
        """The pass spent `seconds` placing: every decision of the pass, through its placement round."""

    def placed(self, rec: ReplicaRecord, why: str) -> None:
        """A replica was placed on a node (its StartShard goes out at the end of the pass)."""

    def weights(self, node_id: str, progress: WeightsProgress) -> None:
        """A node says how fetching a model's weights goes."""

    def starting(self, rec: ReplicaRecord) -> None:
        """A replica's agent says it is still starting (`rec.message` says how far)."""

    def ready(self, rec: ReplicaRecord) -> None:
        """A replica became ready and is in the router's set."""

    def stopping(self, rec: ReplicaRecord) -> None:
        """A replica is to stop; `rec.retiring` says why."""

    def gone(self, rec: ReplicaRecord, why: str) -> None:
        """A replica's record is dropped: it stopped, failed, or its node was lost."""

    def failed_start(self, rec: ReplicaRecord, st: ModelState, retry_in: float) -> None:
        """A start failed; `st` holds the failures in a row and whether the model is now parked."""

    def unplaced(self, model: str, decision: Decision) -> None:
        """Placement found no room for a replica the model wants (a new one, or a restart's replacement)."""

    def preempted(self, model: str, victims: list[str]) -> None:
        """Replicas (by id) are stopped to make room for `model`."""

    def reset(self, reason: str) -> None:
        """The reconciler forgot everything: this control plane stopped leading."""

    def engine_install(self, node_id: str, state: EngineState) -> str:
        """A node is asked to install an engine, or says how it goes (`state` as it stands now);
        returns the id of the job following it ("" when none does)."""
        return ""


# ---------------------------------------------------------------- jobs


@attrs.define
class JobStep:
    at: float  #: wall-clock time
    text: str


@attrs.define(eq=False)
class Job:
    id: str
    model: str
    kind: str  #: one of JOB_KINDS
    by: str  #: who asked: an operator, or the control plane
    started: float  #: wall-clock time
    state: str = "running"  #: one of JOB_STATES
    now: str = ""  #: what it is doing now, in a sentence
    steps: list[JobStep] = attrs.Factory(list)
    ended: float | None = None
    #: replica id -> node, of the replicas placed while it runs
    replicas: dict[str, str] = attrs.Factory(dict)
    #: for a restart: the replicas to be replaced
    old: tuple[str, ...] = ()
    #: the number of the last pass begun when it started: only a pass begun after it can end it
    after_pass: int = 0
    #: the last state of the weights on each node, so a step is written when it changes
    weights: dict[str, str] = attrs.Factory(dict)
    #: an engine install: the node and the engine (its `model` reads "vllm on gpu-a")
    node: str = ""
    engine: str = ""
    #: driven by a task that writes its steps and ends it itself (llmgw/control/rollout.py), not measured
    driven: bool = False
    #: a driven job a former leader left running: "resumed by B after A lost the lease", or "ended safely by …";
    #: said again with the words it ends with
    taken_over: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, "model": self.model, "kind": self.kind, "by": self.by, "state": self.state,
                "now": self.now, "started": self.started, "ended": self.ended, "replicas": list(self.replicas),
                "steps": [{"at": s.at, "text": s.text} for s in self.steps], "node": self.node,
                "engine": self.engine}


def new_job_id() -> str:
    """`job-3f9a1c`: random, so a job's id on one leader never names another's after a take-over."""
    return f"job-{secrets.token_hex(3)}"


class Jobs(ReconcilerObserver):
    """Every job since this control plane started (bounded), fed by the reconciler's hooks."""

    def __init__(self, *, wall_clock: Callable[[], float] = time.time, keep: int = KEEP_ENDED,
                 new_id: Callable[[], str] = new_job_id) -> None:
        self.wall_clock = wall_clock
        self.keep = keep
        self.new_id = new_id
        self._jobs: dict[str, Job] = {}  #: in the order they started
        self._passes = 0

    # ---------------------------------------------------------------- starting and reading

    def start(self, model: str, kind: str, by: str, *, old: tuple[str, ...] | list[str] = (),
              first: str = "") -> Job:
        """A new job following `model`; `first` is its first step (else one made from its kind)."""
        job_id = self.new_id()
        while job_id in self._jobs:
            job_id = self.new_id()
        job = Job(id=job_id, model=model, kind=kind, by=by, started=self.wall_clock(), old=tuple(old),
                  after_pass=self._passes)
        self._jobs[job.id] = job
        self._step(job, first or _first_step(job))
        return job

    def restore(self, job_id: str, model: str, kind: str, by: str, started: float, steps: list[JobStep]) -> Job:
        """A job a former leader ran, as its record in the store left it, followed here from now on."""
        job = self._jobs.pop(job_id, None) or Job(id=job_id, model=model, kind=kind, by=by, started=started)
        job.state, job.ended, job.after_pass, job.taken_over = "running", None, self._passes, ""
        job.steps = list(steps)
        job.now = steps[-1].text if steps else ""
        self._jobs[job.id] = job
        return job

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def select(self, state: str | None = None, model: str | None = None) -> list[Job]:
        """Newest first; only those in `state`, or of `model`, when given."""
        return [j for j in reversed(self._jobs.values())
                if (state is None or j.state == state) and (model is None or j.model == model)]

    def latest_for(self, model: str) -> Job | None:
        """The newest job of `model`, ended or not."""
        return next((j for j in reversed(self._jobs.values()) if j.model == model), None)

    def _active(self, model: str) -> list[Job]:
        return [j for j in self._jobs.values() if j.active and j.model == model]

    # ---------------------------------------------------------------- writing

    def step(self, job: Job, text: str) -> None:
        """A step of a driven job, said by whoever drives it."""
        self._step(job, text)

    def end(self, job: Job, state: str, text: str) -> None:
        """End a driven job: done or failed, with the words why."""
        if job.active:
            self._end(job, state, text)

    def _step(self, job: Job, text: str, now: str | None = None) -> None:
        job.steps.append(JobStep(at=self.wall_clock(), text=text))
        job.now = text if now is None else now

    def _end(self, job: Job, state: str, text: str) -> None:
        job.state = state
        job.ended = self.wall_clock()
        if job.taken_over:
            text += f" ({job.taken_over})"
        self._step(job, f"{state}: {text}")
        self._forget_old()

    def _forget_old(self) -> None:
        ended = [j.id for j in self._jobs.values() if not j.active]
        for job_id in ended[: max(0, len(ended) - self.keep)]:
            del self._jobs[job_id]

    # ---------------------------------------------------------------- the hooks

    def pass_begun(self) -> None:
        self._passes += 1

    def placed(self, rec: ReplicaRecord, why: str) -> None:
        jobs = self._active(rec.model)
        if not jobs:
            kind = "move" if rec.replaces else "start"
            jobs = [self.start(rec.model, kind, CONTROL_PLANE)]
        text = f"replica {rec.id} placed on {rec.node}"
        if rec.replaces:
            text += f" to replace {rec.replaces}"
        if why:
            text += f" ({why})"
        for job in jobs:
            job.state = "running"
            job.replicas[rec.id] = rec.node
            self._step(job, text, now=f"replica {rec.id} starting on {rec.node}")

    def weights(self, node_id: str, progress: WeightsProgress) -> None:
        for job in self._active(progress.model):
            if node_id not in job.replicas.values():
                continue
            text = _weights_words(node_id, progress)
            if job.weights.get(node_id) != progress.state:
                job.weights[node_id] = progress.state
                self._step(job, text)
            else:
                job.now = text

    def starting(self, rec: ReplicaRecord) -> None:
        if not rec.message:
            return
        for job in self._active(rec.model):
            text = f"replica {rec.id} starting on {rec.node}: {rec.message}"
            if job.now != text:
                self._step(job, text)

    def ready(self, rec: ReplicaRecord) -> None:
        for job in self._active(rec.model):
            self._step(job, f"replica {rec.id} ready on {rec.node}")

    def stopping(self, rec: ReplicaRecord) -> None:
        for job in self._active(rec.model):
            self._step(job, f"replica {rec.id} on {rec.node} stopping: {rec.retiring}")

    def gone(self, rec: ReplicaRecord, why: str) -> None:
        for job in self._active(rec.model):
            if rec.retiring:
                self._step(job, f"replica {rec.id} stopped on {rec.node}")
            else:
                self._step(job, f"replica {rec.id} on {rec.node} ended: {why}")

    def failed_start(self, rec: ReplicaRecord, st: ModelState, retry_in: float) -> None:
        for job in self._active(rec.model):
            if st.parked:
                self._end(job, "failed", st.park_reason)
            else:
                n = st.failures
                self._step(job, f"{n} failed start{'s' if n != 1 else ''} in a row; trying again in {retry_in:g} s")

    def unplaced(self, model: str, decision: Decision) -> None:
        text = f"waiting for room: {decision.summary()}"
        for job in self._active(model):
            if job.state != "waiting":
                job.state = "waiting"
                self._step(job, text)
            else:
                job.now = text

    def reset(self, reason: str) -> None:
        for job in [j for j in self._jobs.values() if j.active]:
            self._end(job, "failed", f"no longer followed: {reason}")

    def pass_ended(self, rec: Reconciler) -> None:
        for job in [j for j in self._jobs.values()
                    if j.active and j.after_pass < self._passes and not j.engine and not j.driven]:
            self._measure(job, rec)

    def engine_install(self, node_id: str, state: EngineState) -> str:
        job = self._jobs.get(state.job) if state.job else None
        if job is None or not job.active:
            who = CONTROL_PLANE if state.by.startswith("the control plane") else state.by
            job = self.start(f"{state.engine} on {node_id}", "engine", who,
                             first=f"{state.by} asked {node_id} to install {state.engine}"
                                   + (f" {state.version}" if state.version else " (the newest the index offers)"))
            job.node, job.engine = node_id, state.engine
            return job.id
        if state.state == "installed":
            took = self.wall_clock() - job.started
            self._end(job, "done", f"{state.engine} {state.version} installed on {node_id}"
                      + (f" ({state.step})" if state.step else "") + f" in {took:.0f} s")
        elif state.state == "failed":
            error = state.error.strip() or "the installer said nothing"
            if "\n" in error:
                self._step(job, f"the installer said:\n{error}")
            last = error.splitlines()[-1].strip()
            self._end(job, "failed", f"{state.engine} could not be installed on {node_id}: {last}")
        elif state.step and state.step != job.now:
            self._step(job, state.step)
        return job.id

    # ---------------------------------------------------------------- has it got there?

    def _measure(self, job: Job, rec: Reconciler) -> None:
        cm = rec.catalog.get(job.model)
        if cm is None:
            self._end(job, "failed", f"{job.model} left the catalog")
            return
        if cm.problems:
            self._end(job, "failed", f"it cannot run until its definition is fixed: {'; '.join(cm.problems)}")
            return
        if not cm.runs_on_cluster:
            self._end(job, "done", "it is forwarded to a provider; nothing runs here")
            return
        st = rec.models.get(cm.name)
        if st is not None and st.parked:
            self._end(job, "failed", st.park_reason)
            return
        mine = [r for r in rec.records.values() if r.model == cm.name]
        ready = sum(1 for r in mine if r.live and r.state == "ready")
        starting = sum(1 for r in mine if r.live and r.state == "starting")
        stopping = sum(1 for r in mine if not r.live)
        wanted = st.wanted if st is not None else 0
        if job.kind == "restart" and any(rid in rec.records for rid in job.old):
            return
        if ready >= wanted and not starting and not stopping:
            self._end(job, "done", _done_words(job, cm, ready, wanted))
            return
        if st is not None and st.next_try > rec.clock() and job.state == "running":
            job.now = f"trying again in {st.next_try - rec.clock():.0f} s after: {st.last_error}"


# ---------------------------------------------------------------- words


def _first_step(job: Job) -> str:
    who = "the control plane" if job.by == CONTROL_PLANE else job.by
    if job.kind == "restart":
        if not job.old:
            return f"{who} asked to restart {job.model}'s replicas; none runs"
        return f"{who} asked to restart {len(job.old)} replica{'s' if len(job.old) != 1 else ''}: {', '.join(job.old)}"
    words = {"add": "added {m} to the catalog", "change": "replaced {m}'s definition", "scale": "scaled {m}",
             "retry": "asked to start {m} again", "start": "started replicas of {m}",
             "move": "moved a replica of {m} off a draining node"}
    return f"{who} " + words.get(job.kind, job.kind + " {m}").format(m=job.model)


def _weights_words(node_id: str, p: WeightsProgress) -> str:
    if p.state == "fetching" and p.total_bytes:
        pct = 100 * p.done_bytes // max(1, p.total_bytes)
        return (f"fetching weights on {node_id}: {format_bytes(p.done_bytes)} of {format_bytes(p.total_bytes)} "
                f"({pct}%)")
    if p.state == "fetching":
        return f"fetching weights on {node_id}" + (f": {format_bytes(p.done_bytes)}" if p.done_bytes else "")
    if p.state == "ready":
        return f"weights ready on {node_id}" + (f" ({format_bytes(p.total_bytes)})" if p.total_bytes else "")
    if p.state == "failed":
        return f"fetching weights on {node_id} failed" + (f": {p.message}" if p.message else "")
    return f"weights {p.state} on {node_id}" + (f": {p.message}" if p.message else "")


def _done_words(job: Job, cm: Any, ready: int, wanted: int) -> str:
    if job.kind == "restart":
        n = len(job.old)
        if not n:
            return "nothing to restart: no replica ran"
        return f"{n} replica{'s' if n != 1 else ''} restarted; {ready} of {wanted} ready"
    if wanted == 0:
        if cm.scaling.max == 0:
            return "no replica runs: it is scaled to a maximum of 0"
        if cm.scaling.on_demand:
            return "no replica is wanted now: on demand, it starts at its first request"
        return "no replica is wanted now"
    return f"{ready} of {wanted} ready"
