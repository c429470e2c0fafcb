"""What the admin API needs from the control plane: the `Cluster` protocol.

The admin API does not reach into the scheduler's objects; it calls these
methods and nothing else, so any control plane (the real one through an
adapter, a fake in tests) serves the same endpoints. Every method is a
coroutine; answers are the attrs types of `cluster_types`.

Contract, for whoever implements it:

- A method that changes something receives `actor` (who asked, already
  checked) and must not write an audit event of its own: the admin API
  records every change once, with who, through what, the fields given and
  how it ended.
- Refuse with the exceptions below, each message a sentence for the
  operator; the admin API answers them with the status named. Anything else
  raised is a 500.
- A control plane that does not do something at all (set node labels, say)
  raises `ClusterUnsupported` naming it: the API answers 501.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from llmgw.admin.facility_types import FacilityHold, FacilityReport, HoldCreate
from llmgw.admin.cluster_types import (
    ClusterStatus,
    JobInfo,
    ModelDetail,
    ModelInfo,
    ModelUpdateList,
    NodeInfo,
    PlacementExplanation,
    ReplicaInfo,
    RestartResult,
    ScaleChange,
)
from llmgw.admin.engine_types import EngineInstallStarted, EngineRow

__all__ = [
    "Cluster",
    "ClusterConflict",
    "ClusterError",
    "ClusterInvalid",
    "ClusterNotFound",
    "ClusterTimeout",
    "ClusterUnavailable",
    "ClusterUnsupported",
]


class ClusterError(Exception):
    """A refusal from the control plane; `status` is the HTTP status the API answers with."""

    status = 500


class ClusterNotFound(ClusterError):
    """No such node, model or replica (404)."""

    status = 404


class ClusterInvalid(ClusterError):
    """The request cannot be done as given: a model definition with problems, min above max (400)."""

    status = 400

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems or [])


class ClusterConflict(ClusterError):
    """The request clashes with the cluster's state: a name taken, a model from server.yaml (409)."""

    status = 409


class ClusterUnavailable(ClusterError):
    """The control plane cannot answer now: it is a standby, or not started (503)."""

    status = 503


class ClusterTimeout(ClusterError):
    """Something the control plane asked on the caller's behalf (a node's agent) did not answer in time (504)."""

    status = 504


class ClusterUnsupported(ClusterError):
    """This control plane does not do that at all (501); the message names what it lacks."""

    status = 501


@runtime_checkable
class Cluster(Protocol):
    """The control plane as the admin API sees it."""

    async def status(self) -> ClusterStatus:
        """Which control plane leads (the rest of the summary is built from the lists below)."""

    # ---- nodes
    async def nodes(self) -> list[NodeInfo]:
        """Every node known, by id."""

    async def cordon(self, node_id: str, *, reason: str, actor: str) -> NodeInfo:
        """Place nothing new on the node; what runs there stays. ClusterNotFound for an unknown node."""

    async def uncordon(self, node_id: str, *, actor: str) -> NodeInfo:
        """Undo a cordon (and stop a drain: what moved stays moved)."""

    async def drain(self, node_id: str, *, reason: str, actor: str) -> NodeInfo:
        """Cordon the node and move its replicas elsewhere, each replacement up before the original stops."""

    async def remove_node(self, node_id: str, *, actor: str) -> NodeInfo:
        """Forget the node (the machine is not touched); ClusterConflict while replicas run on it."""

    async def set_labels(self, node_id: str, labels: Mapping[str, str | None], *, actor: str) -> NodeInfo:
        """Set labels (a None value takes one off), kept across the node's re-registrations."""

    async def facility(self) -> FacilityReport:
        """Every domain (racks, PDUs, rows, rooms, sites) with its nodes, hold and power, and every hold."""

    async def hold(self, body: HoldCreate, *, actor: str) -> FacilityHold:
        """Keep a domain free of new replicas (ClusterInvalid names the field when the ask is wrong)."""

    async def release(self, domain: str, *, actor: str) -> FacilityHold:
        """Take a domain's hold off (ClusterNotFound: none)."""

    async def node_logs(self, node_id: str, *, replica: str, lines: int) -> list[str]:
        """The last `lines` lines of the node's agent log (or of `replica`'s engine log there), oldest first,
        as its agent sent them with secrets masked. ClusterNotFound: no such node; ClusterConflict: its agent
        is not connected; ClusterTimeout: it did not answer in time."""

    # ---- models
    async def models(self) -> list[ModelInfo]:
        """The catalog, by name."""

    async def model(self, name: str) -> ModelDetail:
        """One model (by name or alias) with its definition, every default filled in."""

    async def add_model(self, spec: Mapping[str, Any], *, replace: bool, actor: str) -> ModelDetail:
        """Add a model from its definition as server.yaml writes one; ClusterInvalid lists every problem."""

    async def remove_model(self, name: str, *, actor: str) -> ModelDetail:
        """Take a model added at run time out of the catalog; its replicas stop."""

    async def scale_model(self, name: str, change: ScaleChange, *, actor: str) -> ModelDetail:
        """Change how many replicas run; fields of `change` left UNSET keep their value."""

    async def restart_model(self, name: str, *, in_place: bool, actor: str) -> RestartResult:
        """Restart every replica of the model, one at a time."""

    async def retry_model(self, name: str, *, actor: str) -> ModelDetail:
        """Start a parked (or backing-off) model again now, its failed starts forgotten."""

    async def explain_placement(self, name: str) -> PlacementExplanation:
        """Why the model runs where it does, or does not run, and where its next replica would go."""

    async def model_updates(self, *, check: bool) -> ModelUpdateList:
        """The leader's last update check (with `check`, one run now first); ClusterUnavailable on a standby."""

    # ---- replicas
    async def replicas(self) -> list[ReplicaInfo]:
        """Every replica, by model."""

    async def restart_replica(self, replica_id: str, *, in_place: bool, actor: str) -> RestartResult:
        """Restart one replica as `restart_model` does each: ClusterNotFound naming it when no such replica runs;
        ClusterConflict while its model's replicas are being restarted the other way."""

    # ---- jobs
    async def jobs(self, *, state: str | None, model: str | None) -> list[JobInfo]:
        """Jobs since the leader started, newest first (only those in `state`, or of `model`, when given)."""

    async def job(self, job_id: str) -> JobInfo:
        """One job with its steps; ClusterNotFound naming it when the leader has no such job."""

    # ---- engines
    async def engines(self, *, node: str | None) -> list[EngineRow]:
        """Every node's engines (only `node`'s, when given: ClusterNotFound when it is not known)."""

    async def install_engine(self, node_id: str, engine: str, version: str, *, actor: str) -> EngineInstallStarted:
        """Have a node install an engine, followed by a job: ClusterNotFound for an unknown node; ClusterInvalid
        for an engine its agent cannot install or a bad version; ClusterConflict while the node is not connected
        or already installing that engine."""
