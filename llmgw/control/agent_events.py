"""How the reconciler takes what agents say: registrations, shard states, progress, results.

A mixin of `Reconciler` (reconciler.py), kept apart so each file reads in one
sitting: this one changes the leader's records as messages arrive and puts
ready replicas in the router's set (or takes them out); the pass that
decides what to start and stop is in reconciler.py.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs

from llmgw.adapters import loading as adapters_loading
from llmgw.config.secrets import Secret
from llmgw.control.catalog import CatalogModel, model_to_spec
from llmgw.control.inventory import Node
from llmgw.control.state import ModelState, ModelUnavailable, ReplicaRecord, WorkerShard, parse_worker_shard_id
from llmgw.notify.events import model_parked
from llmgw.obs import logs
from llmgw.router.replicas import Replica, metrics_url_for
from llmgw.wire.messages import (
    CommandResult,
    EngineStatus,
    Heartbeat,
    Register,
    ShardStatus,
    WeightsProgress,
)

if TYPE_CHECKING:
    from llmgw.control.reconciler import Reconciler as _Base
else:
    _Base = object

log = logs.get("llmgw.control.reconciler")

#: A replica that exits within this many seconds of becoming ready counts as a failed start.
CRASH_WINDOW = 60.0


class AgentEvents(_Base):
    # ---------------------------------------------------------------- agents' events

    def node_registered(self, reg: Register, *, peer_host: str = "", cert_serial: int | None = None) -> Node:
        """An agent (re)connected: take its word for what runs there."""
        node = self.inventory.register(reg, peer_host=peer_host, cert_serial=cert_serial)
        self._take_shards(node, reg.shards)
        self._engines_back(node)  # an installation cut off by the disconnect is asked for again
        self.kick()
        return node

    def node_heard_again(self, node_id: str, hb: Heartbeat) -> Node | None:
        """A lost node's heartbeat on the connection it kept: it is back, and what its agent still runs (the
        heartbeat's shards, described by its registration or by the replicas it had when lost) is adopted, not
        started again; the replicas placed elsewhere meanwhile make too many, and the pass stops the extra ones."""
        node = self.inventory.get(node_id)
        if node is None or not node.lost:
            return node
        running, stale = [], []
        for summary in hb.shards:
            if summary.state not in ("starting", "ready") or summary.shard_id in self.records:
                continue
            shard = node.lost_shards.get(summary.shard_id)
            if shard is not None:
                running.append(attrs.evolve(shard, state=summary.state))
            else:  # being stopped when the node was lost, or a rank of a replica placed again whole
                stale.append(summary)
        node = self.inventory.found(node_id)
        assert node is not None
        node.lost_shards = {}
        logs.event(log, "node back", node_id=node_id, running=[s.shard_id for s in running],
                   stopping=[s.shard_id for s in stale])
        self._take_shards(node, running)
        for summary in stale:
            self.records[summary.shard_id] = rec = ReplicaRecord(
                id=summary.shard_id, model="", node=node_id, profile="", engine="", state=summary.state,
                created=self.clock(), since=self.clock(), adopted=True, start_sent=True)
            self._retire(rec, "it still ran on its node, lost meanwhile, and no replica here wants it")
        self.inventory.heartbeat(node_id, hb)
        self.kick()
        return node

    def _take_shards(self, node: Node, shards: Any) -> None:
        """Match what the node's agent says runs there to the replica records: each one known is kept, each one
        not known adopted (or stopped, when nothing here wants it), each one missing forgotten."""
        reported = {s.shard_id: s for s in shards}
        for rec, worker in [(r, w) for r in list(self.records.values()) for w in r.workers if w.node == node.id]:
            shard = reported.pop(worker.id, None)
            if worker.state == "gone" or (shard is None and not worker.start_sent):
                continue
            if shard is None or shard.state not in ("starting", "ready"):
                self._rank_gone(rec, worker, "exited", "its node registered again without it")
            elif rec.retiring:
                worker.stop_sent = False  # the stop may have been lost with the old connection
        for rec in [r for r in self.records.values() if r.node == node.id]:
            shard = reported.pop(rec.id, None)
            if shard is None and not rec.start_sent:
                continue  # placed a moment ago; its StartShard goes out at the end of the pass
            if shard is None or shard.state not in ("starting", "ready"):
                if rec.workers:
                    if not rec.head_gone:
                        self._head_gone(rec, "exited", "the node registered again without it")
                    continue
                self._drop(rec, "the node registered again without it")
                continue
            if shard.port:
                rec.port = shard.port
            if shard.adapters:
                rec.adapters = tuple(shard.adapters)  # adapters: what the node still holds for it
            if rec.retiring:
                rec.stop_sent_at = None  # the stop may have been lost with the old connection
            elif shard.state == "ready" and rec.state != "ready":
                self._ready(rec)
            elif shard.state == "ready":
                self._publish(rec)
        for shard in reported.values():
            if shard.state not in ("starting", "ready"):
                continue
            if parse_worker_shard_id(shard.shard_id) is not None:
                # A rank of a replica over several nodes this control plane did not start (a take-over):
                # stopped, and its replica started again whole.
                self.records[shard.shard_id] = rec = ReplicaRecord(
                    id=shard.shard_id, model=shard.model, node=node.id, profile="", engine=shard.engine,
                    gpus=tuple(shard.gpus), port=shard.port, state=shard.state, created=self.clock(),
                    since=self.clock(), adopted=True, start_sent=True)
                self._retire(rec, "a rank of a replica over several nodes that this control plane did not start")
                continue
            model = self.catalog.get(shard.model)
            rec = ReplicaRecord(
                id=shard.shard_id, model=shard.model, node=node.id, profile="", engine=shard.engine,
                gpus=tuple(shard.gpus), port=shard.port, state=shard.state, created=self.clock(),
                since=self.clock(), adopted=True, start_sent=True, adapters=tuple(shard.adapters),  # adapters
            )
            if model is None or not model.valid or not model.runs_on_cluster:
                rec.model = shard.model
                self.records[rec.id] = rec
                self._retire(rec, "its model is not in the catalog")
                continue
            rec.model = model.name
            profile = self._profile_for(model, shard.engine, len(shard.gpus))
            rec.profile, rec.memory, rec.cores = profile.name, int(profile.memory), profile.cores
            rec.engine = rec.engine or (profile.engine or model.config.engine)
            self.records[rec.id] = rec
            logs.event(log, "replica adopted", replica_id=rec.id, model=rec.model, node_id=node.id, state=rec.state)
            if shard.state == "ready":
                self._ready(rec)

    def handle(self, node_id: str, message: Any) -> None:
        """One message from a registered agent."""
        if isinstance(message, Heartbeat):
            node = self.inventory.get(node_id)
            if node is not None and node.lost:
                self.node_heard_again(node_id, message)
            else:
                self.inventory.heartbeat(node_id, message)
            return
        self.inventory.heard(node_id)
        if isinstance(message, ShardStatus):
            self._shard_status(node_id, message)
        elif isinstance(message, WeightsProgress):
            self.inventory.weights_progress(node_id, message)
            for rec in self.records.values():
                if node_id in rec.nodes and rec.model == message.model and rec.state == "starting":
                    rec.since = self.clock()  # progress: not stuck
                    rec.message = _progress_words(message)
            self.observer.weights(node_id, message)
        elif isinstance(message, EngineStatus):
            self.engine_status(node_id, message)
        elif isinstance(message, CommandResult):
            kind, _, replica_id = message.command_id.partition(":")
            rec = self.records.get(replica_id)
            if rec is not None and rec.node == node_id and not message.ok and kind == "start" and rec.workers:
                self._head_gone(rec, "failed", message.error or "the agent could not start it")
            elif rec is not None and rec.node == node_id and not message.ok and kind == "start":
                self._gone(rec, "failed", message.error or "the agent could not start it")
            elif (found := self._worker(replica_id)) is not None and not message.ok and kind == "start":
                self._rank_gone(*found, "failed", message.error or "the agent could not start it")

    def node_disconnected(self, node_id: str, reason: str = "") -> None:
        self.inventory.disconnected(node_id, reason)
        self._engines_cut_off(node_id, reason)
        self.kick()

    # ---------------------------------------------------------------- shard states

    def _worker(self, shard_id: str) -> tuple[ReplicaRecord, WorkerShard] | None:
        """The replica and rank a worker rank's shard id names, when this control plane runs it."""
        parsed = parse_worker_shard_id(shard_id)
        rec = self.records.get(parsed[0]) if parsed else None
        if rec is None:
            return None
        worker = next((w for w in rec.workers if w.id == shard_id), None)
        return (rec, worker) if worker is not None else None

    def _worker_status(self, node_id: str, msg: ShardStatus) -> bool:
        """A status of rank 1 and up of a replica over several nodes; False when it is no such shard."""
        found = self._worker(msg.shard_id)
        if found is None or found[1].node != node_id:
            return False
        rec, worker = found
        if msg.message:
            worker.message = msg.message
        if msg.state == "starting":
            rec.since = self.clock()
        elif msg.state == "ready":
            worker.state = "ready"  # running: it serves no API of its own, rank 0 says when the replica is
        elif msg.state in ("failed", "exited", "stopped"):
            detail = msg.message or (f"exit code {msg.exit_code}" if msg.exit_code is not None else "")
            self._rank_gone(rec, worker, msg.state, detail, msg.log_tail)
        self.kick()
        return True

    def _rank_gone(self, rec: ReplicaRecord, worker: WorkerShard, state: str, message: str,
                   log_tail: tuple[str, ...] = ()) -> None:
        """One rank of a replica over several nodes stopped: the replica cannot serve without it, so all of it
        stops (a failure when it was not being stopped), and it is placed again whole."""
        worker.state = "gone"
        if not rec.retiring:
            why = f"rank {worker.rank} on {worker.node} {state}" + (f": {message}" if message else "")
            self._lose_whole(rec, state, why, log_tail)
        elif rec.head_gone and all(w.state == "gone" for w in rec.workers):
            self._drop(rec, rec.retiring)

    def _head_gone(self, rec: ReplicaRecord, state: str, detail: str, log_tail: tuple[str, ...] = ()) -> None:
        """Rank 0 of a replica over several nodes stopped (or its node went): the other ranks are stopped,
        and the record goes once they have."""
        rec.head_gone = True
        self.replicas.remove(rec.id)
        if not rec.retiring:
            self._lose_whole(rec, state, f"rank 0 on {rec.node} {state}" + (f": {detail}" if detail else ""),
                             log_tail)
        if all(w.state == "gone" for w in rec.workers):
            self._drop(rec, rec.retiring or state)

    def _lose_whole(self, rec: ReplicaRecord, state: str, why: str, log_tail: tuple[str, ...]) -> None:
        """A shard of a replica over several nodes failed on its own: count it as _gone does, stop the rest."""
        was = rec.state
        st = self._state(rec.model)
        st.last_log_tail = tuple(log_tail)
        crashed_early = was == "ready" and rec.ready_at is not None and self.clock() - rec.ready_at < CRASH_WINDOW
        self._retire(rec, why)
        if was == "starting" or crashed_early:
            self._failed_start(st, rec, why)
        else:
            st.last_error = f"{rec.node}: replica {rec.id}: {why}"
            logs.event(log, "replica exited; replacing it", logging.WARNING, replica_id=rec.id, model=rec.model,
                       node_id=rec.node, state=state, detail=why)

    def _shard_status(self, node_id: str, msg: ShardStatus) -> None:
        rec = self.records.get(msg.shard_id)
        if rec is None and self._worker_status(node_id, msg):
            return
        if rec is None or rec.node != node_id:
            if msg.state in ("starting", "ready"):
                log.warning("status of a shard this control plane did not start",
                            extra={"fields": {"node_id": node_id, "shard_id": msg.shard_id, "state": msg.state}})
            return
        if msg.port:
            rec.port = msg.port
        if msg.dist_port:
            rec.dist_port = msg.dist_port
        if msg.adapters:
            rec.adapters = tuple(msg.adapters)  # adapters: what the node holds for it
        if msg.message:
            rec.message = msg.message
        if rec.workers and msg.state in ("failed", "exited", "stopped"):
            detail = msg.message or (f"exit code {msg.exit_code}" if msg.exit_code is not None else "")
            self._head_gone(rec, msg.state, detail, msg.log_tail)
            self.kick()
            return
        if msg.state == "starting":
            rec.since = self.clock()
            self.observer.starting(rec)
        elif msg.state == "ready":
            if rec.retiring:
                return
            self._ready(rec)
        elif msg.state == "stopping":
            rec.state = "stopping"
            self.replicas.remove(rec.id)
        elif msg.state in ("failed", "exited", "stopped"):
            detail = msg.message or (f"exit code {msg.exit_code}" if msg.exit_code is not None else "")
            self._gone(rec, msg.state, detail, msg.log_tail)
        self.kick()

    def _ready(self, rec: ReplicaRecord) -> None:
        now = self.clock()
        rec.state, rec.since, rec.ready_at = "ready", now, now
        rec.message = ""
        self._publish(rec)
        st = self._state(rec.model)
        if not rec.adopted:
            st.reset_failures()
        logs.event(log, "replica ready", replica_id=rec.id, model=rec.model, node_id=rec.node, port=rec.port)
        self.observer.ready(rec)
        if rec.replaces:
            old = self.records.get(rec.replaces)
            if old is not None and not old.retiring:
                self._retire(old, f"drained: replaced by {rec.id} on {rec.node}")
        st.wake_waiters()

    def _publish(self, rec: ReplicaRecord) -> None:
        """Put a ready replica in the router's set (again, with its address as now known)."""
        node = self.inventory.get(rec.node)
        cm = self.catalog.get(rec.model)
        if node is None or cm is None:
            return
        if not rec.port:
            log.warning("a ready replica without a port cannot be reached; not given to the router",
                        extra={"fields": {"replica_id": rec.id, "node_id": rec.node}})
            return
        host = node.address
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        base = f"http://{host}:{rec.port}/v1"
        self.replicas.add(Replica(
            id=rec.id, model=cm.name, base_url=base,
            api_key=Secret(self.keys.key_for(rec.id), origin="derived"),
            max_concurrency=max(1, cm.config.concurrency), metrics_url=metrics_url_for(base), source="control",
            labels=dict(node.labels),  # routing profiles: pinned:POOL and router.profiles[].labels read them
        ))
        adapters_loading.publish_held(self.replicas, rec, cm.config)  # adapters: one replica each it holds

    def _gone(self, rec: ReplicaRecord, state: str, message: str, log_tail: tuple[str, ...] = ()) -> None:
        """The shard stopped, failed or exited: forget it, and count a failed start when it was one."""
        now = self.clock()
        was = rec.state
        self._drop(rec, message or state)
        if rec.retiring or state == "stopped":
            return
        st = self._state(rec.model)
        st.last_log_tail = tuple(log_tail)
        crashed_early = was == "ready" and rec.ready_at is not None and now - rec.ready_at < CRASH_WINDOW
        if was == "starting" or crashed_early:
            self._failed_start(st, rec, message or f"the engine {state} before it was ready")
        else:
            st.last_error = f"{rec.node}: replica {rec.id} {state}" + (f": {message}" if message else "")
            logs.event(log, "replica exited; replacing it", logging.WARNING, replica_id=rec.id, model=rec.model,
                       node_id=rec.node, state=state, detail=message)

    def _failed_start(self, st: ModelState, rec: ReplicaRecord, message: str) -> None:
        st.failures += 1
        st.last_error = f"{rec.node}: {message}"
        initial = self.control.backoff.initial.total_seconds()
        ceiling = self.control.backoff.max.total_seconds()
        delay = min(ceiling, initial * 2 ** (st.failures - 1))
        st.next_try = self.clock() + delay
        logs.event(log, "replica failed to start", logging.WARNING, replica_id=rec.id, model=rec.model,
                   node_id=rec.node, failures=st.failures, retry_in_s=delay, detail=message)
        if st.failures >= self.control.park_after and not st.parked:
            st.parked = True
            cm = self.catalog.get(rec.model)
            st.parked_for = model_to_spec(cm.config) if cm is not None else None
            st.parked_at = self.wall_clock()
            st.park_reason = (f"parked after {st.failures} failed starts in a row; the last, on {rec.node}: "
                              f"{message}")
            logs.event(log, "model parked", logging.ERROR, model=rec.model, reason=st.park_reason)
            self.notify(model_parked(rec.model, failures=st.failures, node=rec.node, reason=message))
            st.wake_waiters(ModelUnavailable(st.park_reason))
        self.observer.failed_start(rec, st, delay)

    def _drop(self, rec: ReplicaRecord, why: str) -> None:
        self.records.pop(rec.id, None)
        self.replicas.remove(rec.id)
        for st in self.models.values():
            st.preempting.discard(rec.id)
        rec.message = why
        self.observer.gone(rec, why)

    def _retire(self, rec: ReplicaRecord, why: str) -> None:
        """Stop a replica: out of the router at once, StopShard at the end of the pass."""
        rec.retiring = why
        self.replicas.remove(rec.id)
        self.observer.stopping(rec)
        logs.event(log, "stopping replica", replica_id=rec.id, model=rec.model, node_id=rec.node, reason=why)

    @staticmethod
    def _profile_for(model: CatalogModel, engine: str, gpus: int):
        for profile in model.config.profiles:
            if (profile.engine or model.config.engine) == engine and profile.gpus == gpus:
                return profile
        return model.config.profiles[0]


def _progress_words(p: WeightsProgress) -> str:
    if p.total_bytes:
        return f"weights {p.state}: {100 * p.done_bytes // max(1, p.total_bytes)}% of {p.total_bytes} bytes"
    return f"weights {p.state}" + (f": {p.message}" if p.message else "")
