"""The inventory: every node the leader knows, as its agent last reported it.

Built only from what agents say (Register, Heartbeat, WeightsProgress), so a
control plane that takes over rebuilds it from the registrations that follow.
Besides the hardware it holds what the operator decided about a node
(cordoned, draining) and when the node was last heard from: a node silent
for longer than the heartbeat window is *lost*, and the reconciler places its
replicas again.

A node whose agent disconnects is not lost at once: its engines keep serving
(an agent restart leaves them running), so it is given the heartbeat window
to come back. A lost node comes back when it is heard again: by a new
registration, or by a heartbeat on the connection it kept open.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from llmgw.control.devices import node_devices
from llmgw.wire.messages import (
    EngineInstalled,
    GpuInfo,
    GpuSensor,
    Heartbeat,
    Register,
    RunningShard,
    WeightsPresent,
    WeightsProgress,
)

Clock = Callable[[], float]


@attrs.define(eq=False)
class Node:
    """One node: its hardware and engines, its state, and when it was last heard from."""

    id: str
    hostname: str = ""
    addresses: tuple[str, ...] = ()
    peer_host: str = ""  #: the address its agent connected from
    cert_serial: int | None = None  #: its agent's client certificate's serial, under mutual TLS
    labels: dict[str, str] = attrs.Factory(dict)  #: the agent's, with the operator's on top
    agent_labels: dict[str, str] = attrs.Factory(dict)  #: as agent.yaml gives them
    engines: dict[str, str] = attrs.Factory(dict)  #: engine name -> installed version
    engine_installs: tuple[EngineInstalled, ...] = ()  #: every installation, each version apart
    installable: tuple[str, ...] = ()  #: the engines its agent can install when told to
    #: engine -> why installing it here failed (placement passes the node over for it until that changes)
    engine_problems: dict[str, str] = attrs.Factory(dict)
    gpus: tuple[GpuInfo, ...] = ()
    cores: int = 0
    memory_total: int = 0
    memory_available: int = 0
    weights: dict[str, WeightsPresent] = attrs.Factory(dict)  #: by model
    shards: tuple[RunningShard, ...] = ()  #: as the last Register listed them
    #: what ran there when it was lost, by shard id: a heartbeat on the same connection names only the ids
    lost_shards: dict[str, RunningShard] = attrs.Factory(dict)
    agent_version: str = ""
    protocol: int = 0
    sensors: dict[int, GpuSensor] = attrs.Factory(dict)
    heartbeat: Heartbeat | None = None  #: the last one, for the metrics (llmgw/obs/node_metrics.py)
    connected: bool = False
    lost: bool = False
    registered_at: float = 0.0
    last_heard: float = 0.0
    disconnect_reason: str = ""
    cordoned: bool = False
    cordon_reason: str = ""
    draining: bool = False
    #: the RDMA fabrics it is on, as its agent reports them, or the operator's llmgw.io/fabric label
    fabrics: tuple[str, ...] = ()

    @property
    def address(self) -> str:
        """Where the router reaches this node's engines: its first address, else where it connected from."""
        for candidate in (*self.addresses, self.peer_host, self.hostname):
            if candidate:
                return candidate
        return self.id

    def holds_weights(self, model: str, source: str = "") -> bool:
        present = self.weights.get(model)
        if present is not None:
            return True
        return bool(source) and any(w.source == source for w in self.weights.values())

    def silent_for(self, now: float) -> float:
        return max(0.0, now - self.last_heard)

    def state(self) -> str:
        """ready, cordoned, draining, disconnected or lost."""
        if self.lost:
            return "lost"
        if not self.connected:
            return "disconnected"
        if self.draining:
            return "draining"
        if self.cordoned:
            return "cordoned"
        return "ready"

    def describe(self, now: float | None = None) -> dict[str, Any]:
        now = time.monotonic() if now is None else now
        return {
            "id": self.id, "state": self.state(), "hostname": self.hostname, "address": self.address,
            "labels": dict(self.labels), "engines": dict(self.engines), "cores": self.cores,
            "memory_total_bytes": self.memory_total, "memory_available_bytes": self.memory_available,
            "gpus": [
                {"index": g.index, "class": g.gpu_class, "name": g.name, "health": g.health,
                 "memory_total_bytes": g.memory_total_bytes, "problem": g.problem,
                 "foreign_memory_bytes": g.foreign_memory_bytes, "pcie_replays": g.pcie_replays,
                 "xid_errors": list(g.xid_errors), "mig_mode": g.mig_mode}
                for g in self.gpus
            ],
            # What placement hands out: whole cards, or the MIG instances of a card in MIG mode.
            "devices": [
                {"index": d.index, "label": d.label, "class": d.gpu_class, "uuid": d.uuid,
                 "memory_total_bytes": d.memory_total_bytes, "kept_out": d.kept_out}
                for d in node_devices(self.gpus)
            ],
            "fabrics": list(self.fabrics),
            "weights": sorted(self.weights), "agent_version": self.agent_version,
            "cordoned": self.cordoned, "cordon_reason": self.cordon_reason, "draining": self.draining,
            "silent_s": round(self.silent_for(now), 1),
            "disconnect_reason": self.disconnect_reason,
        }


class Inventory:
    """Nodes by id. Used from the event loop only."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self._nodes: dict[str, Node] = {}
        #: cordons by node id, kept apart so they survive re-registration and may precede it
        self._cordons: dict[str, str] = {}
        #: labels an operator set, by node id: they win over the agent's own
        self._labels: dict[str, dict[str, str]] = {}

    # -- reading ------------------------------------------------------------

    def get(self, node_id: str) -> Node | None:
        return self._nodes.get(node_id)

    def nodes(self) -> list[Node]:
        return [self._nodes[n] for n in sorted(self._nodes)]

    def __iter__(self):
        return iter(self.nodes())

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def cordons(self) -> dict[str, str]:
        """Cordoned node ids with the reason, including nodes not connected yet."""
        return dict(self._cordons)

    # -- what agents say -----------------------------------------------------------

    def register(self, reg: Register, *, peer_host: str = "", cert_serial: int | None = None) -> Node:
        """A node (re)connected: everything about it is replaced by what it says now."""
        now = self.clock()
        old = self._nodes.get(reg.node_id)
        inv = reg.inventory
        node = Node(
            id=reg.node_id,
            hostname=reg.hostname,
            addresses=tuple(a for a in reg.addresses if a),
            peer_host=peer_host,
            cert_serial=cert_serial,
            labels={**reg.labels, **self._labels.get(reg.node_id, {})},
            agent_labels=dict(reg.labels),
            engines=dict(reg.engines),
            engine_installs=tuple(reg.engine_installs),
            installable=tuple(reg.installable),
            # a failed install is remembered while the node's engines stay as they were
            engine_problems=dict(old.engine_problems) if old is not None and old.engines == reg.engines else {},
            gpus=tuple(inv.gpus),
            fabrics=tuple(inv.fabrics),
            cores=inv.cpu.cores,
            memory_total=inv.memory_total_bytes,
            memory_available=inv.memory_available_bytes,
            weights={w.model: w for w in reg.weights},
            shards=tuple(reg.shards),
            agent_version=reg.agent_version,
            protocol=reg.protocol,
            connected=True,
            registered_at=now,
            last_heard=now,
            cordoned=reg.node_id in self._cordons,
            cordon_reason=self._cordons.get(reg.node_id, ""),
            draining=old.draining if old is not None else False,
        )
        self._nodes[node.id] = node
        return node

    def replace(self, node: Node) -> None:
        """Put a changed copy of a node in its place (placement sees a new object and looks again)."""
        self._nodes[node.id] = node

    def heard(self, node_id: str) -> Node | None:
        """Any message counts as a sign of life."""
        node = self._nodes.get(node_id)
        if node is not None and node.connected:
            node.last_heard = self.clock()
        return node

    def heartbeat(self, node_id: str, hb: Heartbeat) -> Node | None:
        node = self.heard(node_id)
        if node is None:
            return None
        node.heartbeat = hb
        if hb.memory_available_bytes is not None:
            node.memory_available = hb.memory_available_bytes
        for sensor in hb.gpus:
            node.sensors[sensor.index] = sensor
        if hb.gpus:
            node.gpus = _with_sensors(node.gpus, {s.index: s for s in hb.gpus})
        return node

    def weights_progress(self, node_id: str, progress: WeightsProgress) -> None:
        node = self.heard(node_id)
        if node is not None and progress.state == "ready":
            node.weights[progress.model] = WeightsPresent(
                model=progress.model, source=progress.source, size_bytes=progress.total_bytes,
            )

    def disconnected(self, node_id: str, reason: str = "") -> Node | None:
        """The agent's connection ended; the node has the heartbeat window to come back."""
        node = self._nodes.get(node_id)
        if node is not None:
            node.connected = False
            node.disconnect_reason = reason
        return node

    def expire(self, window: float) -> list[Node]:
        """Nodes silent for longer than `window` seconds, newly marked lost."""
        now = self.clock()
        lost = []
        for node in self._nodes.values():
            if not node.lost and node.silent_for(now) > window:
                node.lost = True
                node.connected = False
                lost.append(node)
        return lost

    def found(self, node_id: str) -> Node | None:
        """A lost node heard again on the connection it kept: ready again, its hardware as it last said."""
        node = self._nodes.get(node_id)
        if node is not None:
            node.lost, node.connected, node.disconnect_reason = False, True, ""
            node.last_heard = self.clock()
        return node

    def forget(self, node_id: str) -> Node | None:
        """Remove a node from the inventory (it is removed from the cluster)."""
        return self._nodes.pop(node_id, None)

    # -- what the operator decides ------------------------------------------------

    def cordon(self, node_id: str, reason: str = "") -> None:
        """Place nothing new on the node; what runs there stays."""
        self._cordons[node_id] = reason or "cordoned by an operator"
        node = self._nodes.get(node_id)
        if node is not None:
            node.cordoned, node.cordon_reason = True, self._cordons[node_id]

    def uncordon(self, node_id: str) -> None:
        """Undo cordon (and stop a drain: what has moved stays moved)."""
        self._cordons.pop(node_id, None)
        node = self._nodes.get(node_id)
        if node is not None:
            node.cordoned, node.cordon_reason, node.draining = False, "", False

    def drain(self, node_id: str, reason: str = "") -> Node:
        """Cordon the node and mark it draining: its replicas move elsewhere, one at a time."""
        node = self._nodes.get(node_id)
        if node is None:
            raise KeyError(node_id)
        self.cordon(node_id, reason or "draining")
        node.draining = True
        return node

    @property
    def label_overrides(self) -> dict[str, dict[str, str]]:
        return {node: dict(labels) for node, labels in self._labels.items() if labels}

    def set_labels(self, node_id: str, labels: dict[str, str | None]) -> None:
        """Set labels on a node (None takes the operator's value off, back to the agent's), before or after it joins."""
        mine = self._labels.setdefault(node_id, {})
        for key, value in labels.items():
            if value is None:
                mine.pop(key, None)
            else:
                mine[key] = value
        node = self._nodes.get(node_id)
        if node is not None:
            node.labels = {**node.agent_labels, **mine}

    def set_label_overrides(self, overrides: dict[str, dict[str, str]]) -> None:
        """Replace every operator's label (read back from the store after a take-over)."""
        self._labels = {node: dict(labels) for node, labels in overrides.items()}
        for node in self._nodes.values():
            node.labels = {**node.agent_labels, **self._labels.get(node.id, {})}

    def set_cordons(self, cordons: dict[str, str]) -> None:
        """Replace every cordon (read back from the store after a take-over)."""
        self._cordons = dict(cordons)
        for node in self._nodes.values():
            node.cordoned = node.id in self._cordons
            node.cordon_reason = self._cordons.get(node.id, "")

    def clear(self) -> None:
        """Forget every node (this control plane stopped leading); cordons are kept."""
        self._nodes.clear()


def _with_sensors(gpus: tuple[GpuInfo, ...], sensors: dict[int, GpuSensor]) -> tuple[GpuInfo, ...]:
    """The cards as the latest readings judge them: health (back to ok too), why, and who else holds memory.

    The same tuple when nothing placement reads changed, so a pass of placement is kept."""
    out = []
    for g in gpus:
        s = sensors.get(g.index)
        if s is None:
            out.append(g)
            continue
        changed = attrs.evolve(
            g, health=s.health, problem=s.problem if s.health != "ok" else "",
            foreign_memory_bytes=s.foreign_memory_bytes if s.foreign_memory_bytes is not None
            else g.foreign_memory_bytes,
            pcie_replays=s.pcie_replays if s.pcie_replays is not None else g.pcie_replays,
            xid_errors=s.xid_errors,
        )
        out.append(g if changed == g else changed)
    return tuple(out) if any(a is not b for a, b in zip(out, gpus)) else gpus


def describe_nodes(nodes: Iterable[Node], now: float | None = None) -> list[dict[str, Any]]:
    return [n.describe(now) for n in nodes]
