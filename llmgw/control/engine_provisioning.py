"""Engines the control plane has nodes install: asked for by placement, or by an operator.

A mixin of `Reconciler` (reconciler.py), as agent_events.py is. When a model
can be placed nowhere because no node has its engine, the nodes that could
install it (their agent says so in Register, and no installation of it
failed there since) are tried as if they had it; the replica placed on one
waits (`ReplicaRecord.awaiting_engine`) while the node is sent a
`Provision` and installs it, and its StartShard goes out once the node
reports the engine installed. The agent's `EngineStatus` messages are kept
per node and engine (`engine_states`, shown by `llmgw ctl nodes`).

A failed installation is said in the installer's own words; the node then
has that in `Node.engine_problems`, placement gives it as the reason the
node was passed over, and nothing is placed there for that engine again
until something changes: an operator asks for the engine again
(`install_engine`), or the agent registers again with different engines.
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING, Any

import attrs

from llmgw.control.inventory import Node
from llmgw.control.placement import Decision, has_engine
from llmgw.obs import logs
from llmgw.wire.messages import EngineInstalled, EngineStatus, EngineWant, Provision

if TYPE_CHECKING:
    from llmgw.control.catalog import CatalogModel
    from llmgw.control.reconciler import Reconciler as _Base
    from llmgw.control.state import ReplicaRecord
else:
    _Base = object

log = logs.get("llmgw.control.reconciler")

#: The engines an EngineStatus ends with.
ENDED = ("installed", "failed")


@attrs.define
class EngineState:
    """Where one engine's installation stands on one node, as its agent last said."""

    engine: str
    version: str = ""
    state: str = "queued"  #: queued, installing, installed or failed
    step: str = ""
    error: str = ""
    request_id: str = ""
    by: str = ""  #: who asked: an operator, or the control plane for a model
    job: str = ""  #: the job following it (llmgw ctl jobs ID)

    def describe(self) -> dict[str, Any]:
        return {"engine": self.engine, "version": self.version, "state": self.state, "step": self.step,
                "error": self.error, "by": self.by, "job": self.job}


class EngineProvisioning(_Base):
    # ---------------------------------------------------------------- asking

    def install_engine(self, node_id: str, engine: str, version: str = "", *, by: str = "") -> EngineState:
        """Have `node_id` install `engine` (at `version`); a failure recorded for it there is forgotten."""
        node = self.inventory.get(node_id)
        if node is None:
            raise KeyError(node_id)
        if engine in node.engine_problems:
            self._set_problems(node, {k: v for k, v in node.engine_problems.items() if k != engine})
        state = EngineState(engine=engine, version=version, request_id=f"eng-{secrets.token_hex(4)}",
                            by=by or "an operator", step="asked for; not yet sent")
        self.engine_states.setdefault(node_id, {})[engine] = state
        state.job = self.observer.engine_install(node_id, state)
        self._provision_due.add((node_id, engine))
        logs.event(log, "engine install asked", node_id=node_id, engine=engine, version=version or "newest",
                   by=state.by)
        self.kick()
        return state

    async def _send_provisions(self) -> None:
        for node_id, engine in sorted(self._provision_due):
            state = self.engine_states.get(node_id, {}).get(engine)
            node = self.inventory.get(node_id)
            if state is None or node is None or not node.connected:
                continue
            try:
                await self.link.send(node_id, Provision(
                    engines=(EngineWant(engine=engine, version=state.version, request_id=state.request_id),),
                    command_id=f"provision:{state.request_id}"))
            except Exception as exc:  # noqa: BLE001 - NodeUnreachable: tried again at the next pass
                log.warning("provision not sent", extra={"fields": {"node_id": node_id, "error": str(exc)}})
                continue
            self._provision_due.discard((node_id, engine))
            state.step = "sent to the node"
            if state.job:
                self.observer.engine_install(node_id, state)

    # ---------------------------------------------------------------- what agents say

    def engine_status(self, node_id: str, msg: EngineStatus) -> None:
        node = self.inventory.get(node_id)
        if node is None:
            return
        states = self.engine_states.setdefault(node_id, {})
        state = states.get(msg.engine)
        if state is None or (msg.request_id and state.request_id and msg.request_id != state.request_id):
            state = states[msg.engine] = EngineState(engine=msg.engine, request_id=msg.request_id, by="the node")
        state.state, state.step, state.error = msg.state, msg.step, msg.error
        if msg.version:
            state.version = msg.version
        if state.job:
            self.observer.engine_install(node_id, state)
        waiting = [r for r in self.records.values() if r.node == node_id and r.awaiting_engine == msg.engine]
        for rec in waiting:
            rec.since = self.clock()  # progress: not stuck
            rec.message = f"installing {msg.engine}: {msg.step}" if msg.step else f"{msg.engine} {msg.state}"
        if msg.state not in ENDED:
            return
        if msg.engines is not None:
            node.engines = dict(msg.engines)
            node.engine_installs = tuple(msg.engine_installs)
        if msg.state == "installed":
            logs.event(log, "engine installed", node_id=node_id, engine=msg.engine, version=msg.version)
            self._set_problems(node, {k: v for k, v in node.engine_problems.items() if k != msg.engine})
        else:
            last = msg.error.strip().splitlines()[-1] if msg.error.strip() else "the installer said nothing"
            logs.event(log, "engine install failed", logging.WARNING, node_id=node_id, engine=msg.engine,
                       error=last)
            self._set_problems(node, {**node.engine_problems, msg.engine: msg.error.strip() or last})
            for rec in waiting:
                self._drop(rec, f"{msg.engine} could not be installed on {node_id}")
                self._state(rec.model).last_error = f"{node_id}: {msg.engine} could not be installed: {last}"
        self.kick()

    def _engines_cut_off(self, node_id: str, reason: str) -> None:
        """The node's agent went away while installing: its installations wait for it to come back."""
        for engine, state in self.engine_states.get(node_id, {}).items():
            if state.state not in ENDED:
                why = reason or "no reason given"
                state.step = f"the node's agent disconnected ({why}); asked again when it is back"
                if state.job:
                    self.observer.engine_install(node_id, state)

    def _engines_back(self, node: Node) -> None:
        """The node registered again: what it has now ends an installation it was doing, or it is asked again
        (the agent answers at once when it has the engine, or goes on with it)."""
        for engine, state in self.engine_states.get(node.id, {}).items():
            if state.state in ENDED:
                continue
            if state.version and has_engine(node, engine, state.version):
                state.state, state.step = "installed", "found installed when the node registered again"
                if state.job:
                    self.observer.engine_install(node.id, state)
                continue
            self._provision_due.add((node.id, engine))

    def _set_problems(self, node: Node, problems: dict[str, str]) -> None:
        """A new Node object, so placement's kept pass (which compares node objects) is made again."""
        self.inventory.replace(attrs.evolve(node, engine_problems=problems))

    # ---------------------------------------------------------------- placing where an engine is to be installed

    def _place_with_install(self, model: CatalogModel) -> tuple[Decision, str, str] | None:
        """A decision placing `model` on a node that would have to install its engine first:
        (decision, engine, version), or None when no such node would do."""
        engines = {p.engine or model.config.engine for p in model.config.profiles}
        version = model.config.engine_version  # pinned: a node with another version installs that one
        nodes, changed = [], set()
        for node in self.inventory.nodes():
            lacking = [e for e in engines if not has_engine(node, e, version) and e in node.installable
                       and e not in node.engine_problems and e in (self.engines or {e: None})]
            if lacking and node.connected and not node.lost:
                given = {e: version or "(to be installed)" for e in lacking}
                nodes.append(attrs.evolve(node, engines={**node.engines, **given}))
                changed.add(node.id)
            else:
                nodes.append(node)
        if not changed:
            return None
        decision = self._place(model, nodes, self._holdings(), quotas=self.quotas, preempt=False)
        placement = decision.placement
        if placement is None or placement.node not in changed:
            return None
        node = self.inventory.get(placement.node)
        if node is not None and has_engine(node, placement.engine, version):
            return None
        return decision, placement.engine, version

    def _await_engine(self, rec: ReplicaRecord, engine: str, version: str) -> None:
        """`rec` waits for its node to install `engine`; the node is asked unless it is installing it now."""
        rec.awaiting_engine = engine
        rec.message = f"waiting for {rec.node} to install {engine}" + (f" {version}" if version else "")
        state = self.engine_states.get(rec.node, {}).get(engine)
        if state is None or state.state in ENDED or (version and state.version != version):
            self.install_engine(rec.node, engine, version, by=f"the control plane, for {rec.model}")

    def _engine_arrived(self, rec: ReplicaRecord) -> bool:
        """Whether a replica waiting for its engine may be started now (clearing the wait)."""
        if not rec.awaiting_engine:
            return True
        node = self.inventory.get(rec.node)
        cm = self.catalog.get(rec.model)
        if node is not None and has_engine(node, rec.awaiting_engine, cm.config.engine_version if cm else ""):
            rec.awaiting_engine = ""
            rec.since = self.clock()
            return True
        return False


def installs_of(node: Node) -> list[dict[str, Any]]:
    """The node's engine installations as `llmgw ctl nodes` shows them."""
    out = [{"engine": e.engine, "version": e.version, "path": e.path} for e in node.engine_installs]
    listed = {e.engine for e in node.engine_installs}
    out += [{"engine": name, "version": version, "path": ""} for name, version in sorted(node.engines.items())
            if name not in listed]
    return out


__all__ = ["EngineInstalled", "EngineProvisioning", "EngineState", "installs_of"]
