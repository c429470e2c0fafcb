"""Handlers of the cluster endpoints: the summary, nodes, models, replicas, placement.

Each asks the `Cluster` (cluster_api.py) and answers its types; without one
the cluster endpoints answer 501 saying what this control plane lacks.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging

from llmgw import __version__
from llmgw.admin.api_types import (
    ClusterSummary,
    GpuClassCount,
    ModelStatusLine,
    Summary,
)
from llmgw.admin.cluster_api import ClusterError, ClusterNotFound
from llmgw.admin.cluster_types import (
    JOB_STATES,
    JobInfo,
    JobList,
    ModelDetail,
    ModelList,
    ModelUpdateList,
    NodeInfo,
    NodeList,
    PlacementExplanation,
    ReplicaList,
    RestartResult,
)
from llmgw.admin.dispatch import Call
from llmgw.admin.errors import ApiError

log = logging.getLogger("llmgw.admin")

#: Model statuses the summary lists under `attention`.
NEEDS_ATTENTION = ("invalid", "parked", "backing_off", "unplaced", "short")


async def get_summary(call: Call) -> Summary:
    """The fleet in numbers (nodes by state, GPUs by class, replicas, models and those needing a look),
    and the last 24 hours' requests, tokens and cost. Answers without a scheduler too, saying so."""
    admin = call.admin
    now = admin.now()
    since = (now - dt.timedelta(hours=24)).replace(minute=0, second=0, microsecond=0)
    sums = await admin.store.usage_sums(None, "hour", since, now + dt.timedelta(hours=1))
    cluster_summary, scheduler = None, "running"
    if admin.cluster is None:
        scheduler = admin.no_cluster_reason
    else:
        try:
            cluster_summary = await _cluster_summary(call)
        except ClusterError as exc:
            scheduler = str(exc)
    return Summary(
        version=__version__, store=admin.store.dialect, scheduler=scheduler, cluster=cluster_summary,
        requests_24h=sum(s.requests for s in sums), tokens_24h=sum(s.tokens for s in sums),
        cost_micros_24h=sum(s.cost_micros for s in sums), currency=admin.config.prices.currency,
    )


async def _cluster_summary(call: Call) -> ClusterSummary:
    cluster = call.admin.need_cluster()
    status = await cluster.status()
    nodes = await cluster.nodes()
    models = await cluster.models()
    replicas = await cluster.replicas()
    held: collections.Counter[tuple[str, int]] = collections.Counter()
    for r in replicas:
        for gpu in r.gpus:
            held[(r.node, gpu)] += 1
    classes: dict[str, list[int]] = {}
    for node in nodes:
        for gpu in node.gpus:
            counts = classes.setdefault(gpu.gpu_class or "unknown", [0, 0, 0])
            counts[0] += 1
            counts[1] += gpu.health == "ok"
            counts[2] += (node.id, gpu.index) in held
    return ClusterSummary(
        leading=status.leadership.leading, leader=status.leadership.holder,
        nodes=dict(collections.Counter(n.state for n in nodes)),
        gpus=[GpuClassCount(gpu_class=c, total=t, healthy=h, in_use=u) for c, (t, h, u) in sorted(classes.items())],
        replicas=dict(collections.Counter(r.state for r in replicas)),
        models=dict(collections.Counter(m.status for m in models)),
        attention=[ModelStatusLine(name=m.name, status=m.status, reason=m.reason)
                   for m in models if m.status in NEEDS_ATTENTION],
    )


# ---------------------------------------------------------------- nodes


async def list_nodes(call: Call) -> NodeList:
    """Every node the leading control plane knows: state, hardware, engines, labels and replicas."""
    return NodeList(nodes=await call.admin.need_cluster().nodes())


async def _node(call: Call, node_id: str) -> NodeInfo:
    for node in await call.admin.need_cluster().nodes():
        if node.id == node_id:
            return node
    raise ClusterNotFound(f"no node called {node_id!r} is known; `llmgw ctl nodes` lists them")


async def get_node(call: Call) -> NodeInfo:
    """One node."""
    return await _node(call, call.params["node"])


async def cordon_node(call: Call) -> NodeInfo:
    """Place nothing new on the node; what runs there stays."""
    return await call.admin.need_cluster().cordon(call.params["node"], reason=call.body.reason, actor=call.actor)


async def uncordon_node(call: Call) -> NodeInfo:
    """Undo a cordon, and stop a drain (what has moved stays moved)."""
    return await call.admin.need_cluster().uncordon(call.params["node"], actor=call.actor)


async def drain_node(call: Call) -> NodeInfo:
    """Cordon the node and move its replicas off, one at a time, each replacement ready before the original stops."""
    return await call.admin.need_cluster().drain(call.params["node"], reason=call.body.reason, actor=call.actor)


async def remove_node(call: Call) -> NodeInfo:
    """Forget the node: the control plane stops counting it; the machine itself is not touched.
    Refused (409) while replicas run there: drain it first."""
    return await call.admin.need_cluster().remove_node(call.params["node"], actor=call.actor)


async def set_node_labels(call: Call) -> NodeInfo:
    """Set labels on a node (null takes one off); placement spreads and selects by them."""
    return await call.admin.need_cluster().set_labels(call.params["node"], call.body.labels, actor=call.actor)


# ---------------------------------------------------------------- models


async def list_models(call: Call) -> ModelList:
    """The catalog: each model's status, ready against wanted, class, owner and scaling."""
    return ModelList(models=await call.admin.need_cluster().models())


async def get_model(call: Call) -> ModelDetail:
    """One model (by name or alias) with its whole definition, every default filled in, and its replicas."""
    return await call.admin.need_cluster().model(call.params["name"])


async def add_model(call: Call) -> ModelDetail:
    """Add a model from its definition, written as a model is in server.yaml. Every problem is named
    (400); a name taken is 409 unless `replace` is given for a model added through the API."""
    name = call.body.get("name")
    call.target = f"model:{name}" if isinstance(name, str) else "model:?"
    return await call.admin.need_cluster().add_model(call.body, replace=call.query.replace, actor=call.actor)


async def remove_model(call: Call) -> ModelDetail:
    """Take a model added through the API out of the catalog; its replicas stop. A model declared in
    server.yaml is removed there (409)."""
    return await call.admin.need_cluster().remove_model(call.params["name"], actor=call.actor)


async def scale_model(call: Call) -> ModelDetail:
    """Change how many replicas run: min, max (0 stops it without removing it), on_demand, idle_timeout.
    Fields left out keep their value."""
    return await call.admin.need_cluster().scale_model(call.params["name"], call.body, actor=call.actor)


async def restart_model(call: Call) -> RestartResult:
    """Restart every replica of the model, one at a time: a replacement first, or in place."""
    return await call.admin.need_cluster().restart_model(call.params["name"], in_place=call.body.in_place,
                                                         actor=call.actor)


async def retry_model(call: Call) -> ModelDetail:
    """Start a parked model again now: its failed starts are forgotten, and the next pass places it (a model
    backing off is tried at once too). The store forgets the parking at once, so a leader that follows does
    not park it again. 503 on a standby."""
    return await call.admin.need_cluster().retry_model(call.params["name"], actor=call.actor)


async def explain_placement(call: Call) -> PlacementExplanation:
    """Why a model runs where it does or does not run: its status, its replicas, the last placement with
    every node's rejection, failed starts, and where its next replica would go now (a dry run)."""
    return await call.admin.need_cluster().explain_placement(call.params["name"])


async def list_model_updates(call: Call) -> ModelUpdateList:
    """Whether the registry repositories served models came from have new files, as the leader's last
    update check (every mirror.update_check) found."""
    return await call.admin.need_cluster().model_updates(check=False)


async def check_model_updates(call: Call) -> ModelUpdateList:
    """Ask the mirror (or the registry) now instead of waiting for the next scheduled check."""
    return await call.admin.need_cluster().model_updates(check=True)


async def list_replicas(call: Call) -> ReplicaList:
    """Every replica: its model, node, state, GPUs and what it reserves."""
    return ReplicaList(replicas=await call.admin.need_cluster().replicas())


async def restart_replica(call: Call) -> RestartResult:
    """Restart one replica: a replacement is started first and the replica stops once it is ready, or, in
    place, it stops and a new one starts. 409 while its model's replicas are being restarted the other way."""
    return await call.admin.need_cluster().restart_replica(call.params["replica"], in_place=call.body.in_place,
                                                           actor=call.actor)


# ---------------------------------------------------------------- jobs


async def list_jobs(call: Call) -> JobList:
    """Models being served or changed since the leader started, newest first: each one running, waiting for
    room on busy cards, done or failed, with what it is doing now. Kept in the leader's memory: the ones
    running and the last 200 ended."""
    state = call.query.state
    if state is not None and state not in JOB_STATES:
        raise ApiError(400, f"state: one of {', '.join(JOB_STATES)}, got {state!r}")
    return JobList(jobs=await call.admin.need_cluster().jobs(state=state, model=call.query.model))


async def get_job(call: Call) -> JobInfo:
    """One job and every step it took, with when; read it again to follow it until it ends."""
    return await call.admin.need_cluster().job(call.params["job"])
