"""The control plane as one object: agent endpoint, leadership, inventory, catalog, reconciler.

`ControlPlane(config, store, replicas)` is what `llmgw server` runs beside the
gateway: `start()` serves the agent port and campaigns for the lease; while
it leads it accepts agents and reconciles, otherwise it holds an agent's
registration a few seconds (in case leadership comes) and then refuses it
with the leader's name, so the agent dials the next control plane. `stop()`
gives the lease up at once so a standby takes over without waiting for it
to lapse.

`install_control_plane(app, config, replicas)` runs it inside the gateway's
aiohttp application (after the store is open, before it closes) and adds
`GET /leader`. Everything an admin API needs is a method here: `explain`,
`nodes`, `replicas_info`, `node_logs`, `cordon`, `uncordon`, `drain`, `retry`, and the
catalog's `add_model`, `remove_model`, `scale_model`; the router calls
`ensure_started(model)` when a model has no replica.
"""

from __future__ import annotations

import functools
import logging
import re
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from aiohttp import web

from llmgw.adapters import loading as adapters_loading
from llmgw.config.server import ServerConfig
from llmgw.config.validate import split_address
from llmgw.control.catalog import Catalog, CatalogModel
from llmgw.control.engine_keys import load_engine_keys
from llmgw.control.explain import explain, explain_text
from llmgw.control.facility import (
    HOLDS_SETTING,
    Hold,
    PowerBook,
    card_of,
    domains_of,
    holds_from_setting,
    node_hold,
    parse_domain,
)
from llmgw.control.inventory import Inventory
from llmgw.control.jobs import Job, Jobs
from llmgw.control.join_codes import JoinCodes
from llmgw.control.join_endpoint import JoinEndpoint
from llmgw.control.node_leave import NodeLeave
from llmgw.control.leader import Leadership, default_holder, instance_id, release_instance_id
from llmgw.store.state_dir import state_dir_of
from llmgw.control.node_logs import LOG_TIMEOUT, LogRequests, NodeNotConnected, UnknownNode, valid_replica_id
from llmgw.control.reconciler import NodeUnreachable, Reconciler
from llmgw.control.state import ModelUnavailable
from llmgw.mirror.updates import watcher_for
from llmgw.obs import logs
from llmgw.pki.certs import PkiError
from llmgw.plugins.types import Engine
from llmgw.router.replicas import ReplicaSet
from llmgw.store import Store
from llmgw.wire.channel import AgentEndpoint, AgentSession, ConnectionClosed, Peer
from llmgw.wire.messages import CommandResult, ControlPlanes, LogChunk, Refused, Register, ShardStatus

log = logs.get("llmgw.control")

ACTOR = "control-plane"
CORDONS_SETTING = "control.cordons"
LABELS_SETTING = "control.labels"
MEMBERS_PREFIX = "control.members."
#: How long a standby holds an agent's registration waiting to lead, below the agent's 10 s welcome timeout.
STANDBY_HOLD = 7.0
HEARTBEAT_INTERVAL = 5.0


class EndpointLink:
    """Sends to agents through the endpoint's sessions."""

    def __init__(self, endpoint: AgentEndpoint) -> None:
        self.endpoint = endpoint

    async def send(self, node_id: str, message: Any) -> None:
        session = self.endpoint.sessions.get(node_id)
        if session is None:
            raise NodeUnreachable(f"{node_id} has no agent connected")
        try:
            await session.send(message)
        except ConnectionClosed as exc:
            raise NodeUnreachable(f"{node_id}'s connection closed: {exc}") from None


def _peer_host(peer: Peer) -> str:
    host = peer.address.rpartition(":")[0]
    return host.strip("[]")


def advertised_address(agent_listen: str) -> str:
    """Where agents reach this control plane's agent port: the listen address, or this host's name."""
    host, port = split_address(agent_listen)
    if host in ("", "0.0.0.0", "::"):
        host = socket.getfqdn()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _member_key(holder: str) -> str:
    return MEMBERS_PREFIX + (re.sub(r"[^a-z0-9_-]+", "-", holder.lower()).strip("-")[:80] or "unnamed")


class ControlPlane:
    def __init__(
        self,
        config: ServerConfig,
        store: Store,
        replicas: ReplicaSet,
        *,
        engines: Mapping[str, Engine] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        advertise: str | None = None,
        holder: str | None = None,
        standby_hold: float = STANDBY_HOLD,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        notify: Callable[[Any], object] | None = None,
    ) -> None:
        self.config = config
        #: told of events a person should hear of (llmgw.notify: the notifier's emit); None tells no one
        self.notify = notify
        self.store = store
        self.replicas = replicas
        if engines is None:
            from llmgw.plugins.manager import load_plugins

            engines = load_plugins().engines()
        self.engines = engines
        from llmgw.config.advertise import configured_advertise  # agent_advertise, or LLMGW_AGENT_ADVERTISE

        self.advertise = advertise or configured_advertise(config) or advertised_address(config.agent_listen)
        # The same control plane restarted leads under the same name, so it takes its own lease back at once.
        folder = state_dir_of(store) if holder is None else None
        instance = instance_id(folder)
        self._id_folder = folder if instance else None  # released when this control plane stops
        self.holder = holder or default_holder(self.advertise, instance)
        self.standby_hold = standby_hold
        self.inventory = Inventory()
        self.catalog = Catalog(config.models, store, engines, on_change=self._catalog_changed)
        from llmgw.bundle.offline_settings import source_problem

        self.catalog.source_problem = lambda source: source_problem(config.mirror, source)  # mirror.offline
        self.catalog.federation_peers = frozenset(p.name for p in config.federation.peers)  # federation
        if ssl_context is None and not config.agent_insecure:
            from llmgw import pki

            tls = config.agent_tls
            # Asks for a client certificate without requiring one: the join endpoint serves machines
            # that have none yet, and /agent/v1 refuses any connection without one.
            ssl_context = pki.ssl_server_context(tls.cert, tls.key, tls.ca, require_client=False)
        self.join_codes = JoinCodes(store)
        #: nodes leaving (`llmgw wipe` on them): their certificates are revoked for the whole cluster
        self.node_leave = NodeLeave(self)
        join_routes = []
        if ssl_context is not None:
            join_routes = JoinEndpoint(self.join_codes, config.agent_tls.ca, control_planes=self.control_planes,
                                       connected=lambda node: node in self.endpoint.sessions).routes()
            join_routes += self.node_leave.routes()
        self.endpoint = AgentEndpoint(
            self._on_session, ssl_context=ssl_context, insecure=ssl_context is None,
            revocations=self.node_leave.revocations if ssl_context is not None else None,
            on_register=self._admit, heartbeat_interval=heartbeat_interval,
            welcome_extra=self._welcome_extra, extra_routes=join_routes,
        )
        self.leadership = Leadership(store, self.holder, config.control.lease_ttl.total_seconds(),
                                     on_change=self._leadership_changed)
        self.reconciler: Reconciler | None = None
        self.jobs = Jobs()  #: changes to models followed until they serve or fail (llmgw/control/jobs.py)
        from llmgw.control.rollout import ModelRollouts

        #: updates, canaries, promotions and rollbacks, each a job (llmgw/control/rollout.py)
        self.rollouts = ModelRollouts(self)
        from llmgw.control.model_serve import ModelServing
        from llmgw.mirror.updates import mirror_api_context

        #: `ctl model serve` jobs: fetch, plan, add, start, hello (llmgw/control/model_serve.py)
        self.serving = ModelServing(self, ssl_context=mirror_api_context(config))
        from llmgw.control.upgrade import ClusterUpgrades

        #: `ctl upgrade` jobs: every node's agent moved to a signed release, one at a time (llmgw/control/upgrade.py)
        self.upgrades = ClusterUpgrades(self)
        from llmgw.obs.control_metrics import ControlMetrics

        self.metrics = ControlMetrics(self)  #: its metrics, on the server's /metrics (llmgw/obs/control_metrics.py)
        self.log_requests = LogRequests()
        self.updates = watcher_for(config, self._served_sources)
        self.updates.notify = notify
        self.agent_port = 0
        self._started = False

    # ---------------------------------------------------------------- life

    async def start(self) -> None:
        from llmgw.obs.control_metrics import ObserverFanOut

        keys = await load_engine_keys(self.store, actor=ACTOR)
        await self.catalog.load()
        self.reconciler = Reconciler(
            self.config.control, self.catalog, self.inventory, EndpointLink(self.endpoint), self.replicas, keys,
            engines=self.engines, observer=ObserverFanOut(self.jobs, self.metrics), notify=self.notify,
            facility=self.config.facility,
        )
        self.reconciler.active = False
        self.reconciler.inactive_reason = "this control plane is a standby"
        host, port = split_address(self.config.agent_listen)
        self.agent_port = await self.endpoint.start(host or "0.0.0.0", port)
        try:
            await self.store.set_setting(_member_key(self.holder), {
                "holder": self.holder, "agent_address": self.advertise,
                "version": self.upgrades.version,  # ctl upgrade waits for a control plane back on the release
            }, actor=ACTOR)
        except Exception as exc:  # noqa: BLE001 - optional: only ControlPlanes messages need it
            log.warning("could not record this control plane among the members: %s", exc)
        self.leadership.start()
        self.upgrades.watch()  # ctl upgrade: the leader's asks to this control plane, through the store
        self._started = True
        logs.event(log, "control plane started", agent_port=self.agent_port, holder=self.holder,
                   tls=self.endpoint.ssl_context is not None)

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        await self.rollouts.stop()
        await self.serving.stop()
        await self.upgrades.stop()
        await self.leadership.stop(release=True)
        await self.updates.stop()
        if self.reconciler is not None:
            await self.reconciler.stop()
        await self.endpoint.stop()
        try:
            await self.store.unset_setting(_member_key(self.holder), actor=ACTOR)
        except Exception as exc:  # noqa: BLE001 - stopping goes on whatever the store says
            log.warning("could not remove this control plane from the members: %s", exc)
        release_instance_id(self._id_folder)
        logs.event(log, "control plane stopped", holder=self.holder)

    @property
    def leading(self) -> bool:
        return self.leadership.leading

    async def _leadership_changed(self, leading: bool) -> None:
        rec = self.reconciler
        if rec is None:
            return
        if leading:
            self.endpoint.epoch = self.leadership.epoch
            try:
                cordons = await self.store.get_setting(CORDONS_SETTING)
                if cordons is not None and isinstance(cordons.value, dict):
                    self.inventory.set_cordons({str(k): str(v) for k, v in cordons.value.items()})
                labels = await self.store.get_setting(LABELS_SETTING)
                if labels is not None and isinstance(labels.value, dict):
                    self.inventory.set_label_overrides({
                        str(node): {str(k): str(v) for k, v in values.items()}
                        for node, values in labels.value.items() if isinstance(values, dict)
                    })
                holds = await self.store.get_setting(HOLDS_SETTING)
                rec.holds = holds_from_setting(holds.value) if holds is not None else {}
            except Exception as exc:  # noqa: BLE001 - leading matters more than cordons and labels
                log.warning("cordons, labels and facility holds not read back: %s", exc)
            rec.active = True
            rec.inactive_reason = ""
            await self._take_over_jobs()  # job_drivers: the jobs a former leader left running, carried on
            previous = self.leadership.previous_holder
            if previous is not None and previous != self.holder:
                # A take-over: give the agents a moment to register again before
                # placing anything, or replicas still running would be doubled.
                rec.hold_starts_until = rec.clock() + 2 * self.endpoint.heartbeat_interval
            rec.start()
            self.updates.start()
            await self._send_control_planes()
            self.upgrades.leading_changed(True)  # an upgrade job the leader before left running is carried on
        else:
            rec.active = False
            await self._hand_over_jobs()  # job_drivers: before the reset, their jobs stay in the store
            await self.updates.stop()
            leader = self.leadership.leader
            rec.inactive_reason = f"this control plane is a standby; the leader is {leader or 'not known'}"
            await rec.stop()
            rec.reset(rec.inactive_reason)
            for session in list(self.endpoint.sessions.values()):
                await session.close("this control plane no longer leads")

    @property
    def job_drivers(self) -> list:
        """What runs jobs of its own that a new leader carries on (llmgw/control/job_driver.py): each has
        `take_over()`, called on gaining the lease, and `hand_over()`, on losing it."""
        return [self.rollouts, self.serving]

    async def _take_over_jobs(self) -> None:
        for driver in self.job_drivers:
            try:
                await driver.take_over()
            except Exception as exc:  # noqa: BLE001 - leading matters more; the records stay for the next leader
                logs.event(log, "jobs left by the former leader not taken over", logging.ERROR,
                           driver=type(driver).__name__, error=str(exc))

    async def _hand_over_jobs(self) -> None:
        for driver in self.job_drivers:
            await driver.hand_over()

    def _served_sources(self) -> list[tuple[str, str]]:
        """(name, source) of every catalog model with weights, for the update checks."""
        return [(m.name, m.config.source) for m in self.catalog.models() if m.config.source]

    def _catalog_changed(self) -> None:
        if self.reconciler is not None:
            self.reconciler.kick()

    # ---------------------------------------------------------------- agents

    async def _admit(self, reg: Register, peer: Peer) -> Refused | None:
        if self.leading or await self.leadership.wait_leading(self.standby_hold):
            return None
        leader = self.leadership.leader
        return Refused(reason=(f"this control plane is a standby; the leader is {leader}" if leader
                               else "this control plane is a standby and no control plane leads yet; try again"))

    async def _welcome_extra(self, reg: Register) -> dict[str, Any]:
        """What a Welcome tells every agent besides its id: the mirror and every control plane."""
        try:
            addresses = await self.control_planes()
        except Exception as exc:  # noqa: BLE001 - the agent keeps its own list
            log.warning("control planes not listed: %s", exc)
            addresses = []
        return {"mirror": self.config.mirror.url, "control_planes": tuple(addresses),
                "offline": self.config.mirror.offline}

    async def _on_session(self, session: AgentSession) -> None:
        rec = self.reconciler
        if rec is None or not self.leading:
            await session.close("this control plane no longer leads")
            return
        node_id = session.node_id
        rec.node_registered(session.register, peer_host=_peer_host(session.peer), cert_serial=session.peer.serial)
        await self._send_control_planes(session)
        try:
            async for message in session:
                if isinstance(message, LogChunk):
                    self.log_requests.take(node_id, message)
                elif isinstance(message, CommandResult) and message.command_id.startswith("upgrade:"):
                    self.upgrades.command_result(node_id, message)
                elif isinstance(message, ShardStatus):
                    self.upgrades.shard_status(node_id, message)  # ctl upgrade: the engines' pids, to compare
                if rec.active:
                    rec.handle(node_id, message)
        finally:
            self.log_requests.session_closed(session, session.close_reason or "")
            current = self.endpoint.sessions.get(node_id)
            if rec.active and (current is None or current is session):
                rec.node_disconnected(node_id, session.close_reason or "")

    async def control_planes(self) -> list[str]:
        """Every control plane's agent address, as recorded in the store."""
        settings = await self.store.get_settings()
        out = []
        for key, setting in settings.items():
            if key.startswith(MEMBERS_PREFIX) and isinstance(setting.value, dict):
                address = setting.value.get("agent_address")
                if isinstance(address, str) and address and address not in out:
                    out.append(address)
        return sorted(out)

    async def _send_control_planes(self, session: AgentSession | None = None) -> None:
        """Tell agents every control plane; only with two or more, so one plane never narrows an agent's own list."""
        try:
            addresses = await self.control_planes()
        except Exception as exc:  # noqa: BLE001 - the list is a convenience; the agent keeps its own
            log.warning("control planes not listed: %s", exc)
            return
        if len(addresses) < 2:
            return
        message = ControlPlanes(addresses=tuple(addresses), epoch=self.leadership.epoch)
        if session is None:
            await self.endpoint.broadcast(message)
            return
        try:
            await session.send(message)
        except ConnectionClosed:
            pass

    # ---------------------------------------------------------------- for the router

    async def ensure_started(self, model: str, timeout: float | None = None) -> None:
        """Wait until `model` has a ready replica, starting one when none runs. ModelUnavailable says why not."""
        if self.reconciler is None:
            raise ModelUnavailable("the control plane is not running")
        if not self.leading:
            view = getattr(self, "replica_view", None)  # active-active: the leader starts it (replica_view.py)
            cm = self.catalog.get(model)
            if view is not None and cm is not None and cm.runs_on_cluster and not cm.problems and cm.scaling.max:
                return await view.wait_started(cm.name, timeout)
            leader = self.leadership.leader
            raise ModelUnavailable(f"this control plane is a standby; the leader is {leader or 'not known yet'}")
        if (adapter := adapters_loading.split(self.catalog, model)) is not None:  # adapters: loaded on demand
            return await self._adapter_loader().ensure(*adapter, timeout)
        await self.reconciler.ensure_started(model, timeout)

    def _adapter_loader(self) -> adapters_loading.AdapterLoader:
        loader = getattr(self, "_adapters", None)
        if loader is None or loader.reconciler is not self.reconciler:
            loader = self._adapters = adapters_loading.AdapterLoader(self.reconciler)
        return loader

    def touch(self, model: str) -> None:
        if self.reconciler is not None:
            adapter = adapters_loading.split(self.catalog, model)  # adapters: a request for one uses its base
            self.reconciler.touch(adapter[0] if adapter is not None else model)

    def knows(self, model: str) -> bool:
        """Whether the catalog has this model (or alias, or adapter), running or not."""
        return model in self.catalog or adapters_loading.split(self.catalog, model) is not None

    # ---------------------------------------------------------------- for the admin API

    def _rec(self) -> Reconciler:
        if self.reconciler is None:
            raise ModelUnavailable("the control plane is not running")
        return self.reconciler

    def explain(self, model: str) -> dict[str, Any]:
        """KeyError when the model is not in the catalog."""
        return explain(self._rec(), model)

    def one_view(self):
        """Explains inside the block (every model's, for a listing) share one look at the cluster (one_view)."""
        return self._rec().one_view()

    def explain_text(self, model: str) -> str:
        return explain_text(self.explain(model))

    def nodes(self) -> list[dict[str, Any]]:
        rec = self._rec()
        now = rec.clock()
        out = []
        for node in self.inventory.nodes():
            info = node.describe(now)
            info["replicas"] = sorted(r.id for r in rec.records.values() if r.node == node.id)
            out.append(info)
        return out

    def replicas_info(self) -> list[dict[str, Any]]:
        rec = self._rec()
        now = rec.clock()
        return [r.describe(now) for r in sorted(rec.records.values(), key=lambda r: (r.model, r.created))]

    async def node_logs(self, node_id: str, *, replica: str = "", lines: int = 200,
                        timeout: float = LOG_TIMEOUT) -> list[str]:
        """The last `lines` lines of the node's agent log, or of `replica`'s engine log there, oldest first.

        UnknownNode: no such node, or the replica is on another; NodeNotConnected: its
        agent is not connected here now; NodeNotAnswering: it did not answer in `timeout`.
        """
        rec = self._rec()
        if not self.leading:
            leader = self.leadership.leader
            raise NodeNotConnected(f"this control plane is a standby: agents connect to the leader, "
                                   f"{leader or 'which is not known yet'}; ask it for {node_id}'s log")
        if replica and not valid_replica_id(replica):
            raise ValueError(f"replica: {replica!r} is not a replica id (`llmgw ctl replicas` lists them)")
        node = self.inventory.get(node_id)
        if node is None:
            raise UnknownNode(f"no node called {node_id!r} is known to the leader")
        record = rec.records.get(replica) if replica else None
        if record is not None and record.node != node_id:
            raise UnknownNode(f"replica {replica} runs on {record.node}, not {node_id}; ask {record.node} for its log")
        session = self.endpoint.sessions.get(node_id)
        if session is None:
            state = node.state() + (f": {node.disconnect_reason}" if node.disconnect_reason else "")
            raise NodeNotConnected(f"{node_id}'s agent is not connected to the leader now ({state}); its log can "
                                   "be read once it connects again")
        return await self.log_requests.ask(session, shard_id=replica, lines=lines, timeout=timeout)

    def status(self) -> dict[str, Any]:
        rec = self._rec()
        return {
            "leadership": self.leadership.describe(),
            "nodes": len(self.inventory),
            "replicas": len(rec.records),
            "models": self._statuses(rec),
        }

    def _statuses(self, rec: Reconciler) -> dict[str, str]:
        with rec.one_view():  # every model's next placement from one look at the cluster
            return {m.name: explain(rec, m.name)["status"] for m in self.catalog.models()}

    # Each change below writes an audit event unless `audit` is False: the admin API records its own.

    async def cordon(self, node_id: str, reason: str = "", *, actor: str, audit: bool = True) -> None:
        self._rec().cordon(node_id, reason)
        await self._save_nodes(actor, "nodes.cordon", node_id, {"reason": reason}, audit)

    async def uncordon(self, node_id: str, *, actor: str, audit: bool = True) -> None:
        self._rec().uncordon(node_id)
        await self._save_nodes(actor, "nodes.uncordon", node_id, None, audit)

    async def drain(self, node_id: str, reason: str = "", *, actor: str, audit: bool = True) -> None:
        """KeyError when the node is not connected to this (leading) control plane."""
        self._rec().drain(node_id, reason)
        await self._save_nodes(actor, "nodes.drain", node_id, {"reason": reason}, audit)

    async def set_labels(self, node_id: str, labels: Mapping[str, str | None], *, actor: str,
                         audit: bool = True) -> None:
        """Labels that win over the node's agent.yaml (None takes one off), kept in the store."""
        self._rec()
        self.inventory.set_labels(node_id, dict(labels))
        self._rec().kick()
        await self._save_nodes(actor, "nodes.label", node_id, {"labels": dict(labels)}, audit)

    # ---------------------------------------------------------------- the facility (facility.py)

    async def hold(self, domain: str, reason: str, *, until: float | None = None, drain: bool = False,
                   actor: str, audit: bool = True) -> Hold:
        """Keep a domain (node:, rack:, pdu:, row:, room:, site: or card:NODE:INDEX) free of new replicas until
        released or `until` (epoch seconds); `drain` moves what runs there too. ValueError names the field."""
        rec = self._rec()
        try:
            domain = parse_domain(domain)
        except ValueError as exc:
            raise ValueError(f"domain: {exc}") from None
        reason = " ".join(str(reason).split())
        if not reason:
            raise ValueError("reason: say why it is held (it is shown wherever the hold keeps work out)")
        now = rec.wall_clock()
        if until is not None and until <= now:
            raise ValueError("until: that time has passed; give a time to come")
        if drain and card_of(domain) is not None:
            raise ValueError("drain: a card's hold cannot drain (drain its node: node:NAME)")
        hold = Hold(domain, reason, until, drain, actor, now)
        holds = {**rec.holds, domain: hold}
        await self.store.set_setting(HOLDS_SETTING, [h.to_json() for h in holds.values()], actor=actor)
        rec.holds = holds
        if drain:
            for node in self.inventory.nodes():
                if node.connected and node_hold({domain: hold}, node.id, node.labels, now) is not None:
                    rec.drain(node.id, hold.words())
        rec.kick()
        if audit:
            await self.store.append_audit(actor, "facility.hold", f"domain:{domain}", hold.to_json())
        return hold

    async def release(self, domain: str, *, actor: str, audit: bool = True) -> Hold:
        """Take a hold off (KeyError: none); a drain it began stops, what has moved stays moved."""
        rec = self._rec()
        hold = rec.holds.get(domain)
        if hold is None:
            raise KeyError(domain)
        holds = {d: h for d, h in rec.holds.items() if d != domain}
        await self.store.set_setting(HOLDS_SETTING, [h.to_json() for h in holds.values()], actor=actor)
        rec.holds = holds
        for node in self.inventory.nodes():
            if node.draining and node.cordon_reason == hold.words():
                rec.uncordon(node.id)
        rec.kick()
        if audit:
            await self.store.append_audit(actor, "facility.release", f"domain:{domain}", {"reason": hold.reason})
        return hold

    def facility(self) -> dict[str, Any]:
        """Every domain the nodes' labels name or a budget gives, with its nodes, hold and power, and the holds."""
        rec = self._rec()
        now = rec.wall_clock()
        nodes = self.inventory.nodes()
        book = PowerBook(rec.facility, nodes, rec._holdings())
        members: dict[str, list[str]] = {d: [] for d in book.budgets}
        for node in nodes:
            for domain in domains_of(node.id, node.labels)[:-1]:
                members.setdefault(domain, []).append(node.id)
        domains = []
        for domain in sorted(members):
            hold = rec.holds.get(domain)
            entry: dict[str, Any] = {"domain": domain, "nodes": sorted(members[domain]),
                                     "held": hold.words() if hold is not None and hold.active(now) else ""}
            if domain in book.budgets:
                use = book.use(domain)
                entry.update(cap_watts=use.cap, limit_watts=round(use.limit), in_use_watts=round(use.placed),
                             measured_watts=round(use.measured))
            domains.append(entry)
        holds = [{**h.to_json(), "active": h.active(now)} for h in sorted(rec.holds.values(), key=lambda h: h.domain)]
        return {"domains": domains, "holds": holds}

    async def remove_node(self, node_id: str, *, actor: str, audit: bool = True) -> None:
        """Forget a node with no replicas and revoke its agent's certificate, as when it leaves by itself, so
        it cannot register again until it joins again (KeyError: unknown; ValueError: replicas run there)."""
        rec = self._rec()
        node = self.inventory.get(node_id)
        if node is None or any(r.node == node_id for r in rec.records.values()):
            rec.remove_node(node_id)  # refuses, saying why
        assert node is not None
        serial = f"{node.cert_serial:x}" if node.cert_serial is not None else None
        if serial is not None:  # revoked first: nothing is forgotten unless the certificate stays out
            await self.node_leave.revoke(serial, node_id, actor=actor, why="removed by an operator")
        session = self.endpoint.sessions.get(node_id)
        if session is not None:
            await session.close("the node was removed from the cluster (llmgw ctl node remove)")
        rec.remove_node(node_id)
        await self._save_nodes(actor, "nodes.remove", node_id, {"serial": serial} if serial else None, audit)

    def _job(self, model: str, kind: str, actor: str, **options: Any) -> Job | None:
        """Follow a change as a job, on the leader (a standby changes the catalog, but the leader acts on it)."""
        if self.reconciler is None or not self.leading:
            return None
        cm = self.catalog.get(model)
        return self.jobs.start(cm.name if cm is not None else model, kind, actor, **options)

    async def _save_nodes(self, actor: str, action: str, node_id: str, detail: dict | None, audit: bool) -> None:
        await self.store.set_setting(CORDONS_SETTING, self.inventory.cordons, actor=actor)
        await self.store.set_setting(LABELS_SETTING, self.inventory.label_overrides, actor=actor)
        if audit:
            await self.store.append_audit(actor, action, f"node:{node_id}", detail)

    async def retry(self, model: str, *, actor: str, audit: bool = True) -> None:
        self._rec().retry(model)
        await self._rec().save_parked()  # at once: a leader that follows must not park it again
        self._job(model, "retry", actor)
        if audit:
            await self.store.append_audit(actor, "models.retry", f"model:{model}")

    async def restart_model(self, model: str, *, in_place: bool = False, actor: str,
                            audit: bool = True) -> list[str]:
        replica_ids = self._rec().restart(model, in_place=in_place)
        self._job(model, "restart", actor, old=replica_ids)
        if audit:
            await self.store.append_audit(actor, "models.restart", f"model:{model}",
                                          {"in_place": in_place, "replicas": replica_ids})
        return replica_ids

    async def restart_replica(self, replica_id: str, *, in_place: bool = False, actor: str,
                              audit: bool = True) -> str:
        """Restart one replica; returns its model's name (KeyError: not running here; ValueError: its model's
        replicas are being restarted the other way)."""
        model = self._rec().restart_replica(replica_id, in_place=in_place)
        self._job(model, "restart", actor, old=[replica_id])
        if audit:
            await self.store.append_audit(actor, "replicas.restart", f"replica:{replica_id}",
                                          {"in_place": in_place, "model": model})
        return model

    async def add_model(self, spec: Mapping[str, Any], *, actor: str, replace: bool = False,
                        audit: bool = True) -> CatalogModel:
        existed = replace and isinstance(spec.get("name"), str) and spec["name"] in self.catalog
        model = await self.catalog.add(spec, actor=actor, replace=replace, audit=audit)
        self._job(model.name, "change" if existed else "add", actor)
        self._catalog_changed()
        return model

    async def remove_model(self, name: str, *, actor: str, audit: bool = True) -> CatalogModel:
        model = await self.catalog.remove(name, actor=actor, audit=audit)
        self._catalog_changed()
        return model

    async def scale_model(self, name: str, *, actor: str, audit: bool = True, **changes: Any) -> CatalogModel:
        model = await self.catalog.scale(name, actor=actor, audit=audit, **changes)
        self._job(model.name, "scale", actor)
        self._catalog_changed()
        return model

    # ---------------------------------------------------------------- HTTP

    async def handle_leader(self, request: web.Request) -> web.Response:
        info = self.leadership.describe()
        return web.json_response(info, status=200 if info["leader"] else 503)


# ---------------------------------------------------------------- in the server's application


class ControlPlaneSlot:
    """Where the app's running control plane is found (set once its cleanup context starts)."""

    def __init__(self) -> None:
        self.plane: ControlPlane | None = None
        self.disabled_reason = ""
        self.config_path: str | None = None  #: the server.yaml read (release keys named in it are relative to it)
        #: set by `llmgw server` (llmgw/server/run.py): ends the server, which then starts itself again when
        #: `start_again` says why (ctl upgrade replaced its program)
        self.stop_server: Callable[[], None] | None = None
        self.start_again = ""

    def restart(self, why: str) -> None:
        """Stop the server and start it again from the program now in place (ctl upgrade)."""
        if self.stop_server is None:
            raise RuntimeError("this control plane was not started by `llmgw server`; it cannot start itself again")
        self.start_again = why
        self.stop_server()


CONTROL_PLANE = web.AppKey("control_plane", ControlPlaneSlot)


async def handle_leader(request: web.Request) -> web.Response:
    """GET /leader: 200 while this control plane leads, 503 otherwise; JSON with the holder and epoch."""
    slot = request.app[CONTROL_PLANE]
    if slot.plane is None:
        return web.json_response({"leader": False, "holder": None, "epoch": 0,
                                  "error": slot.disabled_reason or "the control plane is not running"}, status=503)
    return await slot.plane.handle_leader(request)


async def handle_health(request: web.Request) -> web.Response:
    """GET /health: the process is alive (leading or not)."""
    return web.json_response({"status": "alive"})


def install_control_plane(app: web.Application, config: ServerConfig, replicas: ReplicaSet, *,
                          store: Store | None = None, **options: Any) -> ControlPlaneSlot:
    """Run a control plane inside `app` and serve GET /leader there.

    The store is `store`, else the server's (`llmgw.server.app.STORE`, set by
    an earlier cleanup context). With `control.enabled: false` nothing runs and
    /leader answers 503.
    """
    slot = ControlPlaneSlot()
    app[CONTROL_PLANE] = slot
    app.router.add_get("/leader", handle_leader)
    app.cleanup_ctx.append(functools.partial(_control_plane_ctx, config, replicas, store, options))
    return slot


async def _control_plane_ctx(config: ServerConfig, replicas: ReplicaSet, store: Store | None,
                             options: dict[str, Any], app: web.Application) -> AsyncIterator[None]:
    slot = app[CONTROL_PLANE]
    if not config.control.enabled:
        slot.disabled_reason = "control.enabled is false: this control plane is a gateway only"
        logs.event(log, "scheduler off (control.enabled: false)", logging.WARNING)
        yield
        return
    own_store = None
    if store is None:
        from llmgw.server.app import STORE

        store = app.get(STORE)
        if store is None:  # the gateway needed none of its own
            from llmgw.store import open_store

            store = own_store = await open_store(config.store.dsn.reveal())
    try:
        try:
            plane = ControlPlane(config, store, replicas, **options)
            if slot.stop_server is not None:  # ctl upgrade: it can start itself again from a new program
                plane.upgrades.restart = slot.restart
            plane.upgrades.config_path = slot.config_path
            await plane.start()
        except (OSError, ValueError, ssl.SSLError, PkiError) as exc:
            # The gateway still serves its providers; /leader answers 503 with this, and the log says it.
            slot.disabled_reason = f"the control plane cannot start: {_start_problem(config, exc)}"
            logs.event(log, slot.disabled_reason, logging.ERROR)
            yield
            return
        slot.plane = plane
        try:
            yield
        finally:
            slot.plane = None
            await plane.stop()
    finally:
        if own_store is not None:
            await own_store.close()


def _start_problem(config: ServerConfig, exc: BaseException) -> str:
    if isinstance(exc, PkiError):
        return (f"agent_tls: {exc}; or set agent_insecure: true on one machine, or control.enabled: false "
                "for a gateway only")
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"agent_listen {config.agent_listen}: {exc.strerror or exc}"
    return str(exc)


def make_control_app(plane: ControlPlane) -> web.Application:
    """A small app of its own (GET /health, GET /leader), for a control plane run without the gateway."""
    app = web.Application()
    slot = ControlPlaneSlot()
    slot.plane = plane
    app[CONTROL_PLANE] = slot
    app.router.add_routes([web.get("/health", handle_health), web.get("/leader", handle_leader)])
    return app


__all__ = [
    "CONTROL_PLANE",
    "ControlPlane",
    "ControlPlaneSlot",
    "EndpointLink",
    "ModelUnavailable",
    "advertised_address",
    "handle_health",
    "handle_leader",
    "install_control_plane",
    "make_control_app",
]
