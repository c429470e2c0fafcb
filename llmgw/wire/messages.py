"""The messages agents and control planes exchange on `/agent/v1`.

Each message is a frozen attrs class whose class attribute `type` is its tag
on the wire. Compatibility rule: a field added later always has a default,
a field is never renamed or given a new meaning, and a receiver ignores
fields it does not know; what cannot follow that rule bumps
`PROTOCOL_VERSION`. Sizes are bytes, temperatures degrees Celsius, power
watts, durations seconds; None is "not measured" or "not set".
"""

from __future__ import annotations

from typing import ClassVar, Union

import attrs

__all__ = [
    "PROTOCOL_VERSION",
    "OLDEST_PROTOCOL",
    "SHARD_STATES",
    "WEIGHTS_STATES",
    # pieces
    "CpuInfo", "DiskFree", "MigInstance", "GpuInfo", "Inventory", "RunningShard",
    "WeightsPresent", "GpuSensor", "ShardSummary", "WeightsSource", "EngineInstalled", "EngineWant",
    "AdapterSource", "AdapterHeld",
    "ENGINE_INSTALL_STATES",
    # agent -> control plane
    "Register", "Heartbeat", "ShardStatus", "WeightsProgress", "LogChunk", "CommandResult", "EngineStatus",
    # control plane -> agent
    "Welcome", "Refused", "StartShard", "StopShard", "DrainShard", "RemoveWeights",
    "ControlPlanes", "RequestLogs", "Restart", "Provision", "Upgrade",
    "AGENT_MESSAGES", "CONTROL_MESSAGES", "ALL_MESSAGES",
    "AgentMessage", "ControlMessage", "Message",
]

#: The version this code speaks; sent in Register and Welcome.
PROTOCOL_VERSION = 1
#: The oldest peer version this code can still talk to.
OLDEST_PROTOCOL = 1

SHARD_STATES = ("starting", "ready", "failed", "stopping", "stopped", "exited")
WEIGHTS_STATES = ("queued", "fetching", "verifying", "ready", "failed")
#: Where one engine's installation stands on a node (EngineStatus.state).
ENGINE_INSTALL_STATES = ("queued", "installing", "installed", "failed")


# --- Pieces of the inventory and of heartbeats ------------------------------


@attrs.frozen
class CpuInfo:
    cores: int = 0  #: logical CPUs the agent may use
    model: str = ""


@attrs.frozen
class DiskFree:
    path: str  #: a directory the agent writes to (weights cache, engines)
    free_bytes: int = 0
    total_bytes: int = 0


@attrs.frozen
class MigInstance:
    """A MIG slice carved from a card."""

    uuid: str  #: MIG-…, what an engine is pointed at
    profile: str = ""  #: NVIDIA's name for the slice, like 3g.40gb
    device: int = 0  #: its number on the card, as `nvidia-smi -L` lists it
    gpu_instance: int = 0
    compute_instance: int = 0
    memory_total_bytes: int = 0
    gpu_class: str = ""  #: its card's class and its profile: a100-40gb-mig-3g.20gb


@attrs.frozen
class GpuInfo:
    index: int
    uuid: str = ""
    name: str = ""  #: as the driver names it: NVIDIA H100 80GB HBM3
    gpu_class: str = ""  #: llmgw's class name placement matches on: h100-80gb
    memory_total_bytes: int = 0
    memory_used_bytes: int = 0
    health: str = "ok"  #: ok, degraded or failed, with the why in `problem`
    problem: str = ""
    temperature_c: float | None = None
    power_w: float | None = None
    utilisation_percent: float | None = None
    mig: tuple[MigInstance, ...] = ()  #: set when the card is in MIG mode: then only these are handed out
    mig_mode: bool = False  #: the card is in MIG mode (with no instances: nothing on it can be handed out)
    #: what processes that are not this agent's engines hold on the card (None: not measured)
    foreign_memory_bytes: int | None = None
    pcie_replays: int | None = None  #: PCIe replay counter since the driver loaded
    xid_errors: tuple[int, ...] = ()  #: XID codes the kernel log shows for the card lately
    #: active NVLink links (to other cards or to NVSwitches); 0: none, or not read (nvidia-smi)
    nvlink_links: int = 0


@attrs.frozen
class Inventory:
    cpu: CpuInfo = attrs.Factory(CpuInfo)
    memory_total_bytes: int = 0
    memory_available_bytes: int = 0
    disks: tuple[DiskFree, ...] = ()
    gpus: tuple[GpuInfo, ...] = ()
    #: the RDMA fabrics the node's active ports are on: ib:<subnet prefix>/<pkey>, roce:<IPv4 network>
    fabrics: tuple[str, ...] = ()


@attrs.frozen
class RunningShard:
    """A shard the agent already runs when it registers (it keeps engines across its own restarts)."""

    shard_id: str
    model: str = ""
    engine: str = ""
    state: str = "ready"  #: one of SHARD_STATES
    port: int = 0
    pid: int | None = None
    gpus: tuple[int, ...] = ()
    adapters: tuple[AdapterHeld, ...] = ()  #: adapters: what its node fetched for it, and loaded at start


@attrs.frozen
class WeightsPresent:
    """A model's files the node already holds."""

    model: str
    source: str = ""
    sha256: str = ""
    size_bytes: int = 0
    path: str = ""


@attrs.frozen
class GpuSensor:
    """One card's readings, sampled every heartbeat."""

    index: int
    temperature_c: float | None = None
    memory_temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    utilisation_percent: float | None = None
    memory_used_bytes: int | None = None
    #: what processes that are not this agent's shards hold on the card
    foreign_memory_bytes: int | None = None
    throttle: tuple[str, ...] = ()  #: sw_power_cap, hw_slowdown, sw_thermal, hw_thermal, …
    ecc_uncorrected: int | None = None
    health: str = "ok"
    problem: str = ""  #: why health is not ok, in words
    pcie_replays: int | None = None
    xid_errors: tuple[int, ...] = ()
    # For the metrics (llmgw_gpu_*); None where the driver does not say.
    memory_utilisation_percent: float | None = None
    sm_clock_mhz: float | None = None
    retired_pages_pending: bool | None = None
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    last_xid: int | None = None  #: the code of the most recent of `xid_errors`
    #: NVLink errors since the driver loaded, summed over the card's links, by kind (crc, replay, recovery);
    #: empty for a card without NVLink or an agent that does not read them
    nvlink_errors: dict[str, int] = attrs.Factory(dict)


@attrs.frozen
class ShardSummary:
    """One shard's state and use, in a heartbeat."""

    shard_id: str
    state: str = ""  #: one of SHARD_STATES
    cpu_percent: float | None = None
    memory_bytes: int | None = None
    gpu_memory_bytes: int | None = None


@attrs.frozen
class WeightsSource:
    """Where a model's files come from and what they must hash to."""

    source: str  #: a mirror path, hf://org/repo@rev, or a URL
    sha256: str = ""  #: of the file, or of the manifest for a directory; empty: not checked
    size_bytes: int = 0


@attrs.frozen
class AdapterSource:
    """adapters: a LoRA adapter a replica serves beside its model, fetched as its weights are."""

    name: str  #: the adapter's own name (the engine serves it by this)
    source: str  #: as WeightsSource.source
    sha256: str = ""
    scale: float = 1.0


@attrs.frozen
class AdapterHeld:
    """adapters: an adapter a shard's node fetched, where it lies there, and whether the engine loaded it."""

    name: str
    path: str = ""
    loaded: bool = False  #: loaded at start; False: on the node, loaded when asked for (max_adapters)


@attrs.frozen
class EngineInstalled:
    """One engine installation a node holds: an engine at one version, and where."""

    engine: str
    version: str
    path: str = ""  #: its program (llama-server) or its environment's python


@attrs.frozen
class EngineWant:
    """An engine a node should have: `version` empty takes the newest the index offers."""

    engine: str
    version: str = ""
    request_id: str = ""  #: names the request; its EngineStatus messages carry it back


# --- Agent -> control plane ---------------------------------------------------


@attrs.frozen
class Register:
    """The first message on every connection: who the node is and everything it has."""

    type: ClassVar[str] = "register"
    node_id: str  #: with mutual TLS, must equal the certificate's common name
    protocol: int = PROTOCOL_VERSION
    agent_version: str = ""
    hostname: str = ""
    addresses: tuple[str, ...] = ()  #: where the router reaches this node's engines
    inventory: Inventory = attrs.Factory(Inventory)
    labels: dict[str, str] = attrs.Factory(dict)
    engines: dict[str, str] = attrs.Factory(dict)  #: engine name -> installed version
    shards: tuple[RunningShard, ...] = ()
    weights: tuple[WeightsPresent, ...] = ()
    #: every installation, each version apart (`engines` names the one a StartShard without a version gets)
    engine_installs: tuple[EngineInstalled, ...] = ()
    installable: tuple[str, ...] = ()  #: the engines this agent can install when a Provision asks


@attrs.frozen
class Heartbeat:
    """The node's load, every `Welcome.heartbeat_interval` seconds."""

    type: ClassVar[str] = "heartbeat"
    seq: int  #: counts up from 1 on each connection
    load_1m: float | None = None
    cpu_percent: float | None = None
    memory_available_bytes: int | None = None
    gpus: tuple[GpuSensor, ...] = ()
    shards: tuple[ShardSummary, ...] = ()
    # For the metrics (llmgw_node_*); None where the machine has no such sensor.
    disks: tuple[DiskFree, ...] = ()
    cpu_temperature_c: float | None = None
    inlet_temperature_c: float | None = None
    cpu_power_w: float | None = None
    engine_exits: int = 0  #: engines that exited or failed unasked since the agent started


@attrs.frozen
class ShardStatus:
    """A shard changed state."""

    type: ClassVar[str] = "shard_status"
    shard_id: str
    state: str  #: one of SHARD_STATES
    model: str = ""
    port: int = 0
    pid: int | None = None
    exit_code: int | None = None
    message: str = ""
    log_tail: tuple[str, ...] = ()  #: the engine's last lines, sent with failed and exited
    command_id: str = ""  #: the StartShard/StopShard this answers, when it answers one
    #: rank 0 of a replica over several nodes: the port the other ranks meet it at (its agent chose it)
    dist_port: int = 0
    adapters: tuple[AdapterHeld, ...] = ()  #: adapters: what the shard's node fetched for it, and loaded


@attrs.frozen
class WeightsProgress:
    """How fetching a model's files goes."""

    type: ClassVar[str] = "weights_progress"
    model: str
    source: str = ""
    done_bytes: int = 0
    total_bytes: int = 0
    state: str = "fetching"  #: one of WEIGHTS_STATES
    message: str = ""


@attrs.frozen
class LogChunk:
    """Lines answering a RequestLogs; `last` marks the final chunk."""

    type: ClassVar[str] = "log_chunk"
    request_id: str
    lines: tuple[str, ...] = ()
    last: bool = True


@attrs.frozen
class CommandResult:
    """Whether a command with a `command_id` was carried out."""

    type: ClassVar[str] = "command_result"
    command_id: str
    ok: bool
    error: str = ""


@attrs.frozen
class EngineStatus:
    """How installing one engine goes; `installed` and `failed` end it, and carry the node's engines now."""

    type: ClassVar[str] = "engine_status"
    engine: str
    version: str = ""  #: asked for, or (installed) what was installed
    state: str = "installing"  #: one of ENGINE_INSTALL_STATES
    step: str = ""  #: what it is doing now, in words: "creating the environment", "pip install vllm==0.9.1"
    error: str = ""  #: with failed: the installer's own last lines, cleaned
    request_id: str = ""
    engines: dict[str, str] | None = None  #: with installed and failed: as Register's `engines`
    engine_installs: tuple[EngineInstalled, ...] = ()  #: with installed and failed: as Register's


# --- Control plane -> agent ---------------------------------------------------


@attrs.frozen
class Welcome:
    """The answer to an accepted Register."""

    type: ClassVar[str] = "welcome"
    node_id: str
    protocol: int = PROTOCOL_VERSION
    heartbeat_interval: float = 5.0  #: seconds between Heartbeat messages
    epoch: int = 0  #: the leader's epoch; a command from a lower one is stale
    #: the mirror's file server nodes fetch weights from (server.yaml's mirror.url); agent.yaml's mirror wins
    mirror: str = ""
    #: every control plane's agent address; the agent keeps them (with agent.yaml's) and dials the next when one goes
    control_planes: tuple[str, ...] = ()
    #: server.yaml's mirror.offline: the node fetches nothing from outside (weights and engines from the mirror only)
    offline: bool = False


@attrs.frozen
class Refused:
    """The answer to a Register that is not accepted; the connection closes after it."""

    type: ClassVar[str] = "refused"
    reason: str


@attrs.frozen
class StartShard:
    """Run one shard of a replica: fetch the weights if needed, launch the engine."""

    type: ClassVar[str] = "start_shard"
    shard_id: str
    model: str
    engine: str
    engine_version: str = ""
    weights: WeightsSource | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = attrs.Factory(dict)
    gpus: tuple[int, ...] = ()  #: card indices (1000 + 100 × card + n: a MIG instance); empty runs on CPUs
    cores: int | None = None  #: CPU cores to allow; None: no limit
    memory_bytes: int | None = None
    port: int = 0
    #: the key the router presents to the engine, or a reference the agent resolves
    api_key: str = attrs.field(default="", repr=False)
    api_key_ref: str = ""
    context_length: int | None = None
    command_id: str = ""
    #: a replica over several nodes: how many, this shard's rank (0 serves the API), and where rank 0
    #: listens for the others (head_address:dist_port); tensor and pipeline parallel sizes for the whole replica
    nnodes: int = 1
    node_rank: int = 0
    head_address: str = ""
    dist_port: int = 0
    tensor_parallel: int = 0
    pipeline_parallel: int = 0
    #: adapters: the model's LoRA adapters, in order, and how many the engine holds at once (0: all, from start)
    adapters: tuple[AdapterSource, ...] = ()
    max_adapters: int = 0


@attrs.frozen
class StopShard:
    type: ClassVar[str] = "stop_shard"
    shard_id: str
    grace_seconds: float = 30.0  #: asked to stop, then killed after this
    command_id: str = ""


@attrs.frozen
class DrainShard:
    """Finish what is running, take nothing new; the router stops sending."""

    type: ClassVar[str] = "drain_shard"
    shard_id: str
    grace_seconds: float = 300.0
    command_id: str = ""


@attrs.frozen
class RemoveWeights:
    type: ClassVar[str] = "remove_weights"
    model: str
    source: str = ""
    sha256: str = ""
    command_id: str = ""


@attrs.frozen
class ControlPlanes:
    """Every control plane the agent may dial; it replaces the agent's list and is kept."""

    type: ClassVar[str] = "control_planes"
    addresses: tuple[str, ...]  #: wss:// URLs or host:port
    epoch: int = 0


@attrs.frozen
class RequestLogs:
    """Send the last `lines` of a shard's engine log, or of the agent's own when `shard_id` is empty."""

    type: ClassVar[str] = "request_logs"
    request_id: str
    shard_id: str = ""
    lines: int = 200


@attrs.frozen
class Restart:
    """Start the agent again; its engines keep serving and are taken over."""

    type: ClassVar[str] = "restart"
    reason: str = ""
    command_id: str = ""


@attrs.frozen
class Provision:
    """Install these engines (those the node lacks at that version); each answers in EngineStatus messages."""

    type: ClassVar[str] = "provision"
    engines: tuple[EngineWant, ...] = ()
    command_id: str = ""


@attrs.frozen
class Upgrade:
    """Replace the agent's program with release `version`'s zipapp from the mirror, checked against the release's
    signed SHA256SUMS with the node's trusted keys, and start it again; engines keep serving and are taken over.
    With `back`, put the file kept from before the last upgrade back instead."""

    type: ClassVar[str] = "upgrade"
    version: str = ""
    mirror: str = ""  #: the mirror's file server holding _llmgw/releases/VERSION/; empty: the one the node knows
    back: bool = False
    command_id: str = ""


AGENT_MESSAGES: tuple[type, ...] = (
    Register, Heartbeat, ShardStatus, WeightsProgress, LogChunk, CommandResult, EngineStatus,
)
CONTROL_MESSAGES: tuple[type, ...] = (
    Welcome, Refused, StartShard, StopShard, DrainShard, RemoveWeights, ControlPlanes, RequestLogs, Restart,
    Provision, Upgrade,
)
ALL_MESSAGES: tuple[type, ...] = AGENT_MESSAGES + CONTROL_MESSAGES

AgentMessage = Union[Register, Heartbeat, ShardStatus, WeightsProgress, LogChunk, CommandResult, EngineStatus]
ControlMessage = Union[
    Welcome, Refused, StartShard, StopShard, DrainShard, RemoveWeights, ControlPlanes, RequestLogs, Restart,
    Provision, Upgrade,
]
Message = Union[AgentMessage, ControlMessage]
