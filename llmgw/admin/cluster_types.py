"""What the cluster endpoints read and answer: nodes, models, replicas, placement.

These are also the types of the `Cluster` protocol (cluster_api.py), so the
control plane answers the admin API in exactly the shapes the OpenAPI
document describes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs

from llmgw.admin import forms
from llmgw.admin.fields import UNSET, field

# ---------------------------------------------------------------- nodes


@attrs.frozen(kw_only=True)
class GpuInfo:
    """One GPU of a node, as its agent reports it."""

    index: int = field("The card's index on its node, as the driver numbers it.")
    gpu_class: str = field("The card's class, like h100-80g, which profiles ask for.", key="class")
    name: str = field("The card's product name.", "")
    health: str = field("ok, or what the agent found wrong with the card.", "ok")
    memory_total_bytes: int = field("The card's memory in bytes.", 0)


@attrs.frozen(kw_only=True)
class NodeInfo:
    """A node: its hardware, its engines, its state and the replicas it runs."""

    id: str = field("The node's id: its certificate's common name.")
    state: str = field("ready, cordoned, draining, disconnected or lost.")
    hostname: str = field("The machine's host name.", "")
    address: str = field("Where the router reaches the node's engines.", "")
    labels: dict[str, str] = field("The node's labels (llmgw.io/rack and the like), which profiles select on.",
                                   factory=dict)
    engines: dict[str, str] = field("Engines installed on the node, by name, with their versions.", factory=dict)
    cores: int = field("CPU cores.", 0)
    memory_total_bytes: int = field("Host memory in bytes.", 0)
    memory_available_bytes: int = field("Host memory free at the last report, in bytes.", 0)
    gpus: list[GpuInfo] = field("The node's GPUs.", factory=list)
    weights: list[str] = field("Models whose weights are on the node's disk.", factory=list)
    agent_version: str = field("The version of llmgw its agent runs.", "")
    cordoned: bool = field("Nothing new is placed on it.", False)
    cordon_reason: str = field("Why it was cordoned, as the operator said.", "")
    draining: bool = field("Its replicas are being moved elsewhere, one at a time.", False)
    silent_s: float = field("Seconds since the node was last heard from.", 0.0)
    disconnect_reason: str = field("Why its agent's connection ended, when it has.", "")
    replicas: list[str] = field("Ids of the replicas on the node.", factory=list)


@attrs.frozen(kw_only=True)
class NodeList:
    """Every node the leading control plane knows."""

    nodes: list[NodeInfo] = field("The nodes, by id.")


@attrs.frozen(kw_only=True)
class NodeReason:
    """Why an operator cordons or drains a node."""

    reason: str = field("Said in `ctl nodes` and the audit log; empty says nothing.", "")


@attrs.frozen(kw_only=True)
class NodeLabels:
    """Labels to set on a node or take off it."""

    labels: dict[str, str | None] = field(
        "Label name to value; null takes the label off. Labels not named are kept.")


@attrs.frozen(kw_only=True)
class NodeLogQuery:
    """Which of a node's logs to read, and how much of it."""

    lines: int = field("How many of the last lines (1-5000).", 200, schema={"minimum": 1, "maximum": 5000})
    replica: str = field("A replica's id: that replica's engine log on the node, instead of the agent's own.", "",
                         schema=forms.REPLICA_ID)


@attrs.frozen(kw_only=True)
class LogLine:
    """One line of a log."""

    text: str = field("The line as written, anything that looks like a key or a password masked.")
    level: str = field("error, warning, info or debug, as the line says; empty when it does not say.", "")


@attrs.frozen(kw_only=True)
class NodeLog:
    """The last lines of a node's agent log, or of one replica's engine log on it."""

    node: str = field("The node's id.")
    replica: str = field("The replica whose engine log this is; empty for the agent's own log.", "")
    lines: list[LogLine] = field("The lines, oldest first: the newest is the last.", factory=list)


# ---------------------------------------------------------------- replicas


@attrs.frozen(kw_only=True)
class ReplicaInfo:
    """One replica: one engine process serving a model on a node."""

    id: str = field("The replica's id.")
    model: str = field("The model it serves.")
    node: str = field("The node it runs on.")
    profile: str = field("The model's profile it was started with.", "")
    engine: str = field("The engine running it.", "")
    state: str = field("starting, ready or stopping.")
    gpus: list[int] = field("Indexes of the node's GPUs it holds; empty on CPUs.", factory=list)
    memory_bytes: int = field("Host memory it reserves, in bytes.", 0)
    cores: int = field("CPU cores it reserves.", 0)
    port: int = field("The port its engine listens on.", 0)
    for_s: float = field("Seconds it has been in its state.", 0.0)
    replaces: str | None = field("The replica it takes over from, during a drain or a restart.", None)
    stopping_because: str | None = field("Why it is being stopped; null while it is wanted.", None)
    message: str = field("The last thing its agent said about it.", "")


@attrs.frozen(kw_only=True)
class ReplicaList:
    """Every replica, by model."""

    replicas: list[ReplicaInfo] = field("The replicas.")


# ---------------------------------------------------------------- models


@attrs.frozen(kw_only=True)
class ScalingInfo:
    """How many replicas of a model run."""

    min: int = field("Replicas kept running at all times.")
    max: int = field("Most replicas run; 0 stops the model without removing it.")
    on_demand: bool = field("The first replica starts at a request and the last stops when idle.", False)
    idle_timeout: str = field("How long a replica above min may sit unused, like 30m.", "30m")


@attrs.frozen(kw_only=True)
class ModelInfo:
    """A model in the catalog, and how it is doing."""

    name: str = field("The name clients ask for.")
    origin: str = field("file (declared in server.yaml) or store (added through the API).")
    model_class: str = field("critical, standard or opportunistic.", "standard", key="class")
    owner: str = field("The organization, team or project its capacity counts against, like team:acme/ml.", "")
    status: str = field("ready, starting, short, unplaced, backing_off, parked, stopped, invalid or standby.")
    reason: str = field("The status in a sentence.", "")
    ready: int = field("Replicas ready.", 0)
    wanted: int = field("Replicas wanted now.", 0)
    scaling: ScalingInfo = field("Its scaling as in force (the file's, or changed at run time).")
    problems: list[str] = field("Why it cannot run; empty when it can.", factory=list)


@attrs.frozen(kw_only=True)
class ModelList:
    """The catalog."""

    models: list[ModelInfo] = field("Every model, by name.")


@attrs.frozen(kw_only=True)
class ModelDetail:
    """A model with its whole definition, every default filled in, and its replicas."""

    model: ModelInfo = field("The model and its status.")
    spec: dict[str, Any] = field("Its definition as server.yaml writes a model, with every default filled in.")
    replicas: list[ReplicaInfo] = field("Its replicas.", factory=list)
    job: str | None = field("The newest job following a change to it (GET /jobs/{job}): after an add or a scale, "
                            "the one that change started; null when it has had none since the leader started.",
                            None)


@attrs.frozen(kw_only=True)
class ModelAddOptions:
    """How a model definition is added."""

    replace: bool = field("Replace a model of the same name added earlier through the API.", False)


@attrs.frozen(kw_only=True)
class ScaleChange:
    """A change to a model's scaling; fields left out keep their value."""

    min: int = field("Replicas kept running at all times.", UNSET)
    max: int = field("Most replicas run; 0 stops the model without removing it.", UNSET)
    on_demand: bool = field("Start the first replica at a request; min must then be 0.", UNSET)
    idle_timeout: str = field("How long a replica above min may sit unused, like 30m.", UNSET)


@attrs.frozen(kw_only=True)
class RestartRequest:
    """How replicas are restarted: every one of a model's, or one alone."""

    in_place: bool = field(
        "Stop and start each replica where it is, instead of starting a replacement first.", False)


@attrs.frozen(kw_only=True)
class RestartResult:
    """The replicas being restarted."""

    model: str = field("The model whose replicas they are.")
    replicas: list[str] = field("Ids of the replicas being replaced or restarted, one at a time.")
    job: str | None = field("The job following the restart (GET /jobs/{job}); null when none was started.", None)


@attrs.frozen(kw_only=True)
class PlacementDecision:
    """One answer of placement: the node chosen, or why none was."""

    at: dt.datetime | None = field("When it was asked; null for a dry run now.", None)
    placed_on: str | None = field("The node chosen; null when no node can run it.", None)
    gpus: list[int] = field("The GPUs it would hold there.", factory=list)
    preempts: list[str] = field("Replicas of lesser classes that would be stopped for it.", factory=list)
    why: str = field("Why that node, in a sentence.", "")
    summary: str = field("The decision in one sentence.", "")
    rejections: list[str] = field("Each node that cannot run it, and why, one sentence a node.", factory=list)


@attrs.frozen(kw_only=True)
class PlacementExplanation:
    """Why a model runs where it does, or does not run."""

    model: ModelInfo = field("The model and its status.")
    replicas: list[ReplicaInfo] = field("Its replicas.", factory=list)
    failures: int = field("Failed starts in a row.", 0)
    retry_in_s: float | None = field("Seconds until the next start is tried, while backing off.", None)
    parked: bool = field("Left stopped after failing too often, until retried.", False)
    last_error: str = field("The last failed start, in the engine's or agent's words.", "")
    log_tail: list[str] = field("The engine's last lines from that start.", factory=list)
    last_placement: PlacementDecision | None = field("The last placement asked for a new replica.", None)
    drain_blocked: PlacementDecision | None = field("Why a replacement for a draining node cannot be placed.", None)
    next_placement: PlacementDecision | None = field("Where the next replica would go now (changes nothing).", None)


# ---------------------------------------------------------------- model updates


@attrs.frozen(kw_only=True)
class ModelUpdateInfo:
    """A served model, and whether the repository its weights came from has new files."""

    model: str = field("The catalog's model.")
    source: str = field("Its source, as the catalog has it.", "")
    mirror_model: str = field("The model on the mirror that source names.", "")
    version: str = field("The mirror's version compared: its newest whole one.", "")
    repo: str = field("The registry repository that version was fetched from.", "")
    status: str = field("up to date, newer files, newer revision, pinned, not from a registry, or error.")
    update_available: bool = field("The repository has different files under the names the model took.", False)
    changed: list[str] = field("The files that differ, and those gone upstream.", factory=list)
    local_revision: str = field("The commit the version was fetched at.", "")
    upstream_revision: str = field("The commit the repository's revision is at now.", "")
    error: str = field("Why this model could not be compared, when it could not.", "")


@attrs.frozen(kw_only=True)
class ModelUpdateList:
    """The leader's last update check (mirror.update_check)."""

    models: list[ModelUpdateInfo] = field("Every model whose source is on the mirror, by name.")
    checked_at: dt.datetime | None = field("When the last check ran; null before the first.", None)
    interval_s: float = field("Seconds between checks (mirror.update_check); 0 never checks.", 0.0)
    via: str = field("Who is asked: mirror API, registry, or empty when no mirror is configured.", "")
    error: str = field("Why the last check failed as a whole; the rows are then the check before.", "")


# ---------------------------------------------------------------- jobs

#: A job's states: the first two while it has not ended.
JOB_STATES = ("running", "waiting", "done", "failed")


@attrs.frozen(kw_only=True)
class JobStep:
    """One thing a job did, and when."""

    at: dt.datetime = field("When.")
    text: str = field("What, in a sentence: replica r-12 ready on node-a.")


@attrs.frozen(kw_only=True)
class JobInfo:
    """A change to a model, followed until the model serves as asked or the change has failed."""

    id: str = field("The job's id, like job-3f9a1c.")
    model: str = field("The model it follows; for an engine install, the engine and its node: vllm on gpu-a.")
    kind: str = field("add, change (added again with replace), scale, restart or retry; start or move for replicas "
                      "the control plane placed by itself (at start, after a crash, off a draining node); engine "
                      "for an engine a node installs; update, canary, promote or rollback for a model's "
                      "revision.")
    by: str = field("Who started it: the operator, or control-plane.")
    state: str = field("running; waiting for room (placement finds no free cards for a replica it needs); "
                       "done; or failed.")
    now: str = field("What it is doing now (fetching weights on node-a: 1.2 GiB of 4 GiB (30%)), or how it ended.",
                     "")
    started: dt.datetime = field("When it started.")
    ended: dt.datetime | None = field("When it ended; null while it runs or waits.", None)
    replicas: list[str] = field("Ids of the replicas placed for it.", factory=list)
    steps: list[JobStep] = field("What it did, oldest first.", factory=list)
    node: str = field("For an engine install: the node installing it.", "")
    engine: str = field("For an engine install: the engine.", "")


@attrs.frozen(kw_only=True)
class JobList:
    """Jobs since the leading control plane started, newest first."""

    jobs: list[JobInfo] = field("Every job running or waiting, and the last ones that ended.")


@attrs.frozen(kw_only=True)
class JobQuery:
    """Which jobs to list."""

    state: str | None = field("Only jobs in this state: running, waiting, done or failed.", None,
                              schema={"enum": ["running", "waiting", "done", "failed"]})
    model: str | None = field("Only this model's jobs.", None)


# ---------------------------------------------------------------- the whole


@attrs.frozen(kw_only=True)
class Leadership:
    """Which control plane leads."""

    leading: bool = field("This control plane leads the cluster.")
    self_name: str = field("This control plane's name in the leader lease.", "", key="self")
    holder: str | None = field("The control plane leading, as far as this one knows; null when none does.", None)
    epoch: int = field("The lease's epoch: it grows at every change of leader.", 0)


@attrs.frozen(kw_only=True)
class ClusterStatus:
    """What only the control plane knows about itself."""

    leadership: Leadership = field("Which control plane leads.")
