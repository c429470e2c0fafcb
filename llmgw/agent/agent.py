"""The node agent: registers with a control plane, runs what it is told, reports what happens.

    agent = Agent(load_agent_config("agent.yaml"))
    why = await agent.run()          # until agent.stop(), or "restart" when the control plane asks

At start it adopts the engines an earlier agent left running (their
records are in the state directory), discovers the hardware and dials the
control planes in turn. On each connection: `Register` (inventory, shards,
engine versions, weights held), then heartbeats, a `ShardStatus` for every
change of every shard, and answers to commands. Stopping the agent leaves
every engine serving; the next agent takes them over.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import ssl
from pathlib import Path
from typing import Any, Awaitable, Callable

import aiohttp
import attrs

from llmgw import __version__
from llmgw.agent import discovery
from llmgw.agent.engine_install import INSTALLABLE, EngineInstaller, InstallError
from llmgw.agent.engine_user import (
    ENGINE_USER, EngineUserError, engine_user, listen_address, make_reachable, runnable_argv,
)
from llmgw.agent.engines import NodeEngines
from llmgw.agent.llamacpp_output import describe_placement, gpu_placement_problem, read_llama_placement
from llmgw.agent import procs
from llmgw.agent.gpu_devices import card_of, device_numbers, visible_devices
from llmgw.agent.procs import LogRing, read_last_lines
from llmgw.agent.report import (
    CpuMeter, busy_requests, engine_addresses, free_port, parse_port_range, wire_gpu_sensors, wire_inventory,
)
from llmgw.agent.supervisor import (
    EXITED, FAILED, READY, STARTING, STOPPED, Shard, Supervisor, SupervisorError, valid_shard_id,
    write_atomic,
)
from llmgw.adapters.fetching import AdapterFetchError, fetch_adapters, held_meta, held_of
from llmgw.agent.weights import WeightsError, WeightsFetcher
from llmgw.config.agent import AgentConfig
from llmgw.obs.logs import LogfmtFormatter
from llmgw.plugins.manager import Plugins, load_plugins
from llmgw.plugins.types import LaunchSpec
from llmgw.wire import messages as wire
from llmgw.wire.channel import AgentConnection, ConnectionClosed, ControlPlaneSession

__all__ = ["Agent", "RESTART", "STOPPED_RUN"]

#: What a node says when it refuses to fetch from outside because the control plane's server.yaml says the site is
#: offline (its Welcome carries mirror.offline).
OFFLINE = "the cluster is offline (server.yaml's mirror.offline): nothing is fetched from outside"

log = logging.getLogger("llmgw.agent")

RESTART, STOPPED_RUN = "restart", "stopped"
CONTROL_PLANES_FILE = "control_planes.json"
REGISTERED_FILE = "registered.json"  #: written at each Welcome: `llmgw join` waits for it
LOG_CHUNK_LINES = 500
LOG_CHUNK_BYTES = 1 << 20  # well under a frame's 16 MiB, however long the lines
TAIL_LINES = 20  # the engine's last lines sent with failed and exited

DiscoverFn = Callable[..., Awaitable[discovery.Inventory]]
SensorsFn = Callable[..., Awaitable[discovery.Sensors]]


class Agent:
    """One node's agent. Engines outlive it; `run()` returns when it is stopped or asked to restart."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        plugins: Plugins | None = None,
        ssl_context: ssl.SSLContext | None = None,
        discover_fn: DiscoverFn | None = None,
        sensors_fn: SensorsFn | None = None,
        host_sensors: Callable[[], dict[str, Any]] | None = None,
        ping_interval: float | None = None,
        pong_timeout: float | None = None,
    ) -> None:
        self.config = config
        self.node_id = config.node_id or socket.gethostname().split(".")[0]
        self.state_dir = Path(config.state_dir)
        self.ports = parse_port_range(config.engine_ports)
        # One address, never every one: the configured one, else where the control plane is reached from.
        self.engine_host = listen_address(config.engine_host, config.control_planes)
        self.start_timeout = config.engine_start_timeout.total_seconds()
        if ssl_context is None and not config.insecure:
            from llmgw.pki.tls import ssl_client_context

            ssl_context = ssl_client_context(config.tls.cert, config.tls.key, config.tls.ca)
        self._ssl = ssl_context
        self._discover = discover_fn or (
            lambda **kw: discovery.discover(hot_c=config.gpu_degraded_temperature_c, **kw))
        # The kernel log's XID lines are matched to cards by the PCI addresses discovery found.
        self._sensors = sensors_fn or (lambda: discovery.sample_sensors(
            hot_c=config.gpu_degraded_temperature_c,
            bus_ids={g.index: g.pci_bus_id for g in (self.inventory.gpus if self.inventory else ())}))
        self._link_options = {k: v for k, v in (("ping_interval", ping_interval), ("pong_timeout", pong_timeout))
                              if v is not None}
        plugins = plugins or load_plugins()
        self.engines = NodeEngines(plugins.engines(), config.engines_dir)
        self.installer = EngineInstaller(config.engines_dir, index_url=config.engine_index_url,
                                         pip_args=config.engine_pip_args,
                                         has_gpu=lambda: bool(self.inventory and self.inventory.gpus),
                                         mirror=lambda: self.weights.mirror_url, offline=lambda: self.weights.offline)
        self.supervisor = Supervisor(self.state_dir, ring_size=config.log_ring_size, on_change=self._on_shard_change)
        self.weights = WeightsFetcher(config.weights_dir, mirror_url=config.mirror)
        self.connection: AgentConnection | None = None
        self.inventory: discovery.Inventory | None = None
        self._own_log = _RingHandler(config.log_ring_size)
        self._session: ControlPlaneSession | None = None
        self._outbox: asyncio.Queue[Any] | None = None
        self._registered: dict[str, str] = {}  # shard -> the state the last Register carried
        self._commands: dict[str, str] = {}  # shard -> the command its statuses answer
        self._pending: dict[str, tuple[wire.StartShard, asyncio.Task, int]] = {}  # starts before their launch
        #: rank 0 of a replica over several nodes: the port its other ranks meet it at, held while it runs
        self._dist_ports: dict[str, int] = {}
        self._tasks: set[asyncio.Task] = set()
        self._cpu = CpuMeter()
        #: engines that exited or failed unasked since the agent started (llmgw_node_engine_exits_total)
        self.engine_exits = 0
        self._exits_counted: set[str] = set()
        self.last_heartbeat: wire.Heartbeat | None = None
        self.last_heartbeat_at = 0.0
        from llmgw.agent.discovery.thermal import HostSensors

        #: the host's heat and CPU power (hwmon, RAPL), read in the executor with each heartbeat
        self._host_sensors: Callable[[], dict[str, Any]] = host_sensors or HostSensors()
        self._next_port = self.ports.start
        self._restart = False
        self._stopping = False
        #: agent.yaml's path, when known: release key files named in its `releases` are relative to its folder
        self.config_path: str | None = None

    # ------------------------------------------------------------------ life

    async def run(self) -> str:
        """Adopt, register, serve commands; returns "restart" or "stopped"."""
        logging.getLogger("llmgw").addHandler(self._own_log)
        try:
            for d in (self.state_dir, Path(self.config.weights_dir), Path(self.config.engines_dir)):
                d.mkdir(parents=True, exist_ok=True)
            await self._choose_engine_user()
            adopted = await self.supervisor.adopt(check_for=lambda s: self._ready_check(s.engine, s.gpus))
            if adopted:
                log.info("took over %d shard(s) from the agent before", len(adopted))
            if self._stopping:  # stopped while adopting
                return STOPPED_RUN
            self.connection = AgentConnection(
                self._control_plane_urls(), self._build_register, ssl_context=self._ssl,
                on_control_planes=self._save_control_planes, **self._link_options,
            )
            async with contextlib.AsyncExitStack() as listeners:
                if self.config.metrics_listen:  # this node's metrics, scraped directly (llmgw/obs/agent_metrics.py)
                    from llmgw.obs.agent_metrics import serving

                    await listeners.enter_async_context(serving(self, self.config.metrics_listen))
                await self.connection.run(self._on_session)
        finally:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.supervisor.close()
            await self.weights.close()
            logging.getLogger("llmgw").removeHandler(self._own_log)
        return RESTART if self._restart else STOPPED_RUN

    async def _choose_engine_user(self) -> None:
        """Who engines run as: llmgw's own unprivileged user when the agent is root; said in the log either way."""
        if os.geteuid() == 0 and not self.config.engine_user:
            log.warning("engine_user is empty: engines run as root, as the agent, and a model's engine can do "
                        "anything root can; engines listen on %s", self.engine_host)
            self.supervisor.run_as = None
            return
        home = self.state_dir / "engine-home"
        user = await asyncio.get_running_loop().run_in_executor(
            None, lambda: engine_user(self.config.engine_user or ENGINE_USER, home=home))
        if user.is_self:
            log.info("the agent is not root: engines run as its own user, %s; engines listen on %s",
                     user.name, self.engine_host)
            self.supervisor.run_as = None
            return
        home.mkdir(exist_ok=True)
        os.chown(home, user.uid, user.gid)
        os.chmod(home, 0o700)
        for problem in make_reachable((self.config.weights_dir, self.config.engines_dir), user):
            log.warning("%s", problem)
        self.supervisor.run_as = user
        log.info("engines run as %s (uid %d), not root; engines listen on %s", user.name, user.uid, self.engine_host)

    async def stop(self, *, stop_engines: bool = False) -> None:
        """End `run()`. Engines keep serving unless `stop_engines` (what `llmgw up` wants on Ctrl-C)."""
        self._stopping = True
        if stop_engines:
            for _, task, _ in list(self._pending.values()):
                task.cancel()
            await self.supervisor.stop_all()
            await self._drain_outbox()
        if self.connection is not None:
            await self.connection.stop()

    # ------------------------------------------------------------------ the connection

    async def discover_now(self) -> None:
        """Read the hardware again into `inventory`; a failed rescan keeps the last one."""
        try:
            self.inventory = await self._discover(paths={"state": str(self.state_dir),
                                                         "weights": self.config.weights_dir})
        except Exception as exc:  # a failed rescan keeps the last inventory rather than no connection
            log.error("hardware discovery failed: %s", exc)

    async def _build_register(self) -> wire.Register:
        await self.discover_now()
        shards = [_running(s) for s in self.supervisor.shards()]
        shards += [wire.RunningShard(shard_id=m.shard_id, model=m.model, engine=m.engine, state=STARTING, port=port,
                                     gpus=tuple(m.gpus)) for m, _, port in self._pending.values()]
        self._registered = {s.shard_id: s.state for s in shards}
        inv = self.inventory
        return wire.Register(
            node_id=self.node_id, agent_version=__version__, hostname=inv.hostname if inv else socket.gethostname(),
            addresses=engine_addresses(self.engine_host, inv),
            inventory=wire_inventory(inv) if inv else wire.Inventory(),
            labels=dict(self.config.labels), engines=await self.engines.versions(), shards=tuple(shards),
            weights=tuple(e.to_wire() for e in self.weights.present()),
            engine_installs=await self._engine_installs(),
            installable=tuple(e for e in INSTALLABLE if e in self.engines.engines),
        )

    async def _engine_installs(self, *, refresh: bool = False) -> tuple[wire.EngineInstalled, ...]:
        return tuple(wire.EngineInstalled(engine=e.name, version=e.version or "", path=e.binary or "")
                     for e in await self.engines.scan(refresh=refresh))

    async def _on_session(self, session: ControlPlaneSession) -> None:
        await self._learn(session)
        outbox: asyncio.Queue[Any] = asyncio.Queue()
        self._session, self._outbox = session, outbox
        sender = asyncio.create_task(self._send_loop(session, outbox), name="agent-send")
        beats = asyncio.create_task(self._heartbeats(session), name="agent-heartbeats")
        # What changed between the Register and now was told to nobody: tell it now.
        for shard in self.supervisor.shards():
            if shard.state != self._registered.get(shard.shard_id):
                self._on_shard_change(shard)
            elif shard.terminal:
                self.supervisor.forget(shard.shard_id)  # the Register told it
        try:
            async for msg in session:
                self._dispatch(msg)
        finally:
            self._session = self._outbox = None
            beats.cancel()
            sender.cancel()
            await asyncio.gather(beats, sender, return_exceptions=True)

    async def _send_loop(self, session: ControlPlaneSession, outbox: asyncio.Queue[Any]) -> None:
        while True:
            msg = await outbox.get()
            try:
                await session.send(msg)
            except ConnectionClosed:
                return
            finally:
                outbox.task_done()
            if isinstance(msg, wire.ShardStatus) and msg.state in (FAILED, STOPPED, EXITED):
                shard = self.supervisor.get(msg.shard_id)
                if shard is not None and shard.terminal:
                    self.supervisor.forget(msg.shard_id)
                    self._commands.pop(msg.shard_id, None)

    async def _drain_outbox(self, timeout: float = 5.0) -> None:
        if self._outbox is not None:
            try:
                await asyncio.wait_for(self._outbox.join(), timeout)
            except asyncio.TimeoutError:
                pass

    def _send(self, msg: Any) -> None:
        """Queue a message for the control plane; without a connection it is dropped (Register says it all)."""
        if self._outbox is not None:
            self._outbox.put_nowait(msg)

    async def _heartbeats(self, session: ControlPlaneSession) -> None:
        interval = session.welcome.heartbeat_interval or self.config.heartbeat_interval.total_seconds()
        seq = 0
        while True:
            await asyncio.sleep(interval)
            seq += 1
            self._send(await self.read_heartbeat(seq))

    async def read_heartbeat(self, seq: int = 0) -> wire.Heartbeat:
        """What this node reads now, as a heartbeat; kept as `last_heartbeat` (the agent's own metrics)."""
        try:
            sensors = await self._sensors()
        except Exception as exc:  # one failed reading must not end the heartbeats
            log.warning("reading sensors failed: %s", exc)
            sensors = None
        summaries = []
        for shard in self.supervisor.shards():
            cpu, rss = self.supervisor.usage(shard)
            summaries.append(wire.ShardSummary(shard_id=shard.shard_id, state=shard.state, cpu_percent=cpu,
                                               memory_bytes=rss))
        node = await asyncio.get_running_loop().run_in_executor(None, self._node_readings)
        self.last_heartbeat = wire.Heartbeat(
            seq=seq,
            load_1m=sensors.load_average[0] if sensors and sensors.load_average else None,
            cpu_percent=self._cpu.percent(),
            memory_available_bytes=sensors.memory_available_bytes if sensors else None,
            gpus=wire_gpu_sensors(sensors, *self._engines_on_gpus(),
                                  foreign_limit=self.config.gpu_foreign_memory_limit) if sensors else (),
            shards=tuple(summaries),
            engine_exits=self.engine_exits,
            **node,
        )
        self.last_heartbeat_at = asyncio.get_running_loop().time()
        return self.last_heartbeat

    def _node_readings(self) -> dict[str, Any]:
        """The host's disks (the directories discovery measured), heat and CPU power, for the heartbeat."""
        from llmgw.agent.discovery.disk import read_disk

        disks = []
        for d in (self.inventory.disks if self.inventory else ()):
            now = read_disk(d.role, d.path)
            if now.total_bytes:
                disks.append(wire.DiskFree(path=d.path, free_bytes=now.free_bytes or 0, total_bytes=now.total_bytes))
        return {"disks": tuple(disks), **self._host_sensors()}

    def _engines_on_gpus(self) -> tuple[set[int], set[int]]:
        """Every process of this node's engines (each engine's process group) and the cards they were given,
        so memory they hold on a card is not counted as someone else's."""
        pids: set[int] = set()
        cards: set[int] = set()
        for shard in self.supervisor.shards():
            if shard.pid is None:
                continue
            pids.add(shard.pid)
            pids.update(m.pid for m in procs.group_members(shard.pid))
            cards.update(card_of(g) for g in shard.gpus)
        return pids, cards

    def _dispatch(self, msg: Any) -> None:
        handlers = {
            wire.StartShard: self._start_shard, wire.StopShard: self._stop_shard, wire.DrainShard: self._drain_shard,
            wire.RemoveWeights: self._remove_weights, wire.RequestLogs: self._send_logs, wire.Restart: self._restart_me,
            wire.Provision: self._provision, wire.Upgrade: self._upgrade_me,
        }
        handler = handlers.get(type(msg))
        if handler is not None:
            self._spawn(handler(msg), f"{msg.type} {getattr(msg, 'shard_id', '')}")
        elif not isinstance(msg, (wire.ControlPlanes, wire.Welcome)):
            log.warning("ignored a %s message", msg.type)

    # ------------------------------------------------------------------ shards

    def _on_shard_change(self, shard: Shard) -> None:
        if shard.state in (FAILED, EXITED):
            if shard.shard_id not in self._exits_counted:
                self._exits_counted.add(shard.shard_id)
                self.engine_exits += 1
        else:
            self._exits_counted.discard(shard.shard_id)
        message = shard.message
        if shard.state == READY and shard.engine == "llamacpp":
            placement = read_llama_placement(shard.logs())
            if placement is not None:
                message = "; ".join(filter(None, (message, describe_placement(placement))))
        tail = tuple(shard.logs(TAIL_LINES)) if shard.state in (FAILED, EXITED) else ()
        dist_port = self._dist_ports.get(shard.shard_id, 0)
        if shard.terminal:
            self._dist_ports.pop(shard.shard_id, None)
        self._send(wire.ShardStatus(
            shard_id=shard.shard_id, state=shard.state, model=shard.model, port=shard.port, pid=shard.pid,
            exit_code=shard.exit_code, message=message, log_tail=tail,
            command_id=self._commands.get(shard.shard_id, ""), dist_port=dist_port,
            adapters=held_of(shard.meta),  # adapters: what it holds
        ))

    def _ready_check(self, engine: str, gpus: tuple[int, ...]) -> Callable[[list[str]], str | None] | None:
        if engine == "llamacpp" and gpus:
            return lambda lines: gpu_placement_problem(gpus, lines)
        return None

    async def _start_shard(self, msg: wire.StartShard) -> None:
        sid, cid = msg.shard_id, msg.command_id
        existing = self.supervisor.get(sid)
        if sid in self._pending or (existing is not None and not existing.terminal):
            state = existing.state if existing is not None else STARTING
            self._send(wire.ShardStatus(shard_id=sid, state=state, model=msg.model, command_id=cid,
                                        message="already on this node; not started twice"))
            return
        self._commands[sid] = cid
        port = msg.port or self._take_port()
        task = asyncio.current_task()
        assert task is not None
        self._pending[sid] = (msg, task, port or 0)
        if msg.nnodes > 1 and msg.node_rank == 0 and not msg.dist_port and port:
            # Rank 0 of a replica over several nodes: a second port, where the other ranks meet it; the
            # control plane sends their starts once it hears it.
            dist = self._take_port()
            if dist is None:
                self._pending.pop(sid, None)
                self._refuse_start(msg, f"no second free port left in engine_ports {self.config.engine_ports} "
                                        "for the other ranks to meet rank 0 at", port)
                return
            self._dist_ports[sid] = dist
            msg = attrs.evolve(msg, dist_port=dist)
            self._pending[sid] = (msg, task, port)
            self._send(wire.ShardStatus(shard_id=sid, state=STARTING, model=msg.model, port=port, dist_port=dist,
                                        command_id=cid))
        try:
            prepared = await self._prepare(msg, port)
        except asyncio.CancelledError:
            self._pending.pop(sid, None)
            self._dist_ports.pop(sid, None)
            self._send(wire.ShardStatus(shard_id=sid, state=STOPPED, model=msg.model, command_id=cid,
                                        message="stopped before its engine was started"))
            raise
        except Exception as exc:  # _StartRefused says why in words; anything else is a bug, said as it is
            self._pending.pop(sid, None)
            reason = str(exc) if isinstance(exc, _StartRefused) else f"could not start it: {type(exc).__name__}: {exc}"
            if not isinstance(exc, _StartRefused):
                log.exception("starting shard %s failed", sid)
            self._refuse_start(msg, reason, port or 0)
            return
        self._pending.pop(sid, None)
        plan, weights_path, port, adapters = prepared
        try:
            shard = await self.supervisor.start(
                sid, plan, port=port, api_key=msg.api_key, host=self.engine_host, model=msg.model, engine=msg.engine,
                gpus=msg.gpus, weights=weights_path, start_timeout=self.start_timeout,
                check_ready=self._ready_check(msg.engine, tuple(msg.gpus)),
                meta={"engine_version": msg.engine_version, "adapters": adapters}, cwd=self.state_dir,
            )
        except SupervisorError as exc:
            self._refuse_start(msg, str(exc), port)
            return
        self._result(cid, shard.state == READY, "" if shard.state == READY else shard.message)

    def _refuse_start(self, msg: wire.StartShard, reason: str, port: int) -> None:
        log.error("shard %s not started: %s", msg.shard_id, reason)
        self._dist_ports.pop(msg.shard_id, None)
        self._send(wire.ShardStatus(shard_id=msg.shard_id, state=FAILED, model=msg.model, port=port, message=reason,
                                    command_id=msg.command_id))
        self._result(msg.command_id, False, reason)

    async def _prepare(self, msg: wire.StartShard, port: int | None) -> tuple[Any, str, int, list]:
        """Check, fetch and plan: (launch plan, weights path, port, adapters), or _StartRefused saying why."""
        engine = self.engines.get(msg.engine)
        if engine is None:
            have = ", ".join(sorted(self.engines.engines)) or "none"
            raise _StartRefused(f"no engine {msg.engine!r} on this node (it has: {have})")
        problems = engine.validate(list(msg.args), dict(msg.env))
        if problems:
            raise _StartRefused(f"{msg.engine}: " + "; ".join(problems))
        if msg.gpus and "gpu" not in engine.devices:
            raise _StartRefused(f"{msg.engine} runs on CPUs only, but the shard was given GPU {list(msg.gpus)}")
        if not msg.gpus and "cpu" not in engine.devices:
            raise _StartRefused(f"{msg.engine} needs GPUs, and the shard was given none")
        have_gpus = set(device_numbers(self.inventory))
        missing = sorted(set(msg.gpus) - have_gpus)
        if missing:
            in_mig = sorted({g.index for g in (self.inventory.gpus if self.inventory else ()) if g.mig_enabled}
                            & set(missing))
            if in_mig:
                raise _StartRefused(f"GPU {in_mig} is in MIG mode: only its MIG instances can be given to an engine")
            raise _StartRefused(f"GPU {missing} is not on this node (it has {sorted(have_gpus) or 'no GPUs'})")
        if not msg.api_key:
            why = "api_key_ref is not something this agent can resolve" if msg.api_key_ref else "it has no api_key"
            raise _StartRefused(f"{why}: every engine demands the key the router presents; send api_key")
        if not port:
            raise _StartRefused(f"no free port left in engine_ports {self.config.engine_ports}")
        if msg.engine_version:  # a version named: that one's program, never another's
            found = [e for e in await self.engines.scan() if e.name == msg.engine]
            if found and not any(e.version == msg.engine_version for e in found):
                have = ", ".join(e.version or "?" for e in found)
                raise _StartRefused(f"{msg.engine} {msg.engine_version} is not installed on this node (it has: "
                                    f"{have}); `llmgw ctl engine install NODE {msg.engine}=={msg.engine_version}`")
        weights_path = ""
        if msg.weights is not None and msg.weights.source:
            try:
                path = await self.weights.ensure(msg.weights.source, sha256=msg.weights.sha256,
                                                 size=msg.weights.size_bytes, model=msg.model, progress=self._send)
            except WeightsError as exc:
                raise _StartRefused(f"weights: {exc}") from None
            weights_path = str(path)
        try:  # adapters: fetched like the weights, before the engine that loads them starts
            adapter_files = await fetch_adapters(self.weights, msg, self._send)
        except AdapterFetchError as exc:
            raise _StartRefused(str(exc)) from None
        spec = LaunchSpec(
            model=msg.model, weights=weights_path, host=self.engine_host, port=port, api_key=msg.api_key,
            gpus=tuple(msg.gpus), args=tuple(msg.args), env=dict(msg.env), cores=msg.cores,
            context_length=msg.context_length, binary=self.engines.binary(msg.engine, msg.engine_version),
            devices=visible_devices(self.inventory, msg.gpus),
            nnodes=msg.nnodes, node_rank=msg.node_rank, head_address=msg.head_address, dist_port=msg.dist_port,
            tensor_parallel=msg.tensor_parallel, pipeline_parallel=msg.pipeline_parallel,
            adapters=adapter_files, max_adapters=msg.max_adapters,
        )
        try:
            plan = engine.plan(spec)
        except Exception as exc:  # a plugin that cannot plan this spec
            raise _StartRefused(f"{msg.engine} could not plan the launch: {exc}") from exc
        if any(msg.api_key in arg for arg in plan.argv):
            raise _StartRefused(f"the {msg.engine} plugin put the engine's key on its command line, which every "
                                "user of the node can read; refused (it belongs in the environment)")
        user = self.supervisor.run_as
        if user is not None and not user.is_self:
            try:
                argv = runnable_argv(plan.argv, weights_path, user, self.config.engines_dir, msg.engine)
            except EngineUserError as exc:
                raise _StartRefused(str(exc)) from None
            plan = attrs.evolve(plan, argv=argv)
        return plan, weights_path, port, held_meta(adapter_files, msg.max_adapters,
                                                   getattr(engine, "adapter_loading", ""))  # adapters

    def _take_port(self) -> int | None:
        taken = self.supervisor.ports() | {p for _, _, p in self._pending.values()} | set(self._dist_ports.values())
        port = free_port(self.ports, taken, self.engine_host, start=self._next_port)
        if port is not None:
            self._next_port = port + 1 if port + 1 in self.ports else self.ports.start
        return port

    async def _stop_shard(self, msg: wire.StopShard) -> None:
        sid = msg.shard_id
        pending = self._pending.get(sid)
        if pending is not None:
            self._commands[sid] = msg.command_id
            pending[1].cancel()
        elif self.supervisor.get(sid) is not None:
            self._commands[sid] = msg.command_id
            await self.supervisor.stop(sid, grace=msg.grace_seconds)
        else:
            self._send(wire.ShardStatus(shard_id=sid, state=STOPPED, command_id=msg.command_id,
                                        message="no such shard on this node"))
        self._result(msg.command_id, True)

    async def _drain_shard(self, msg: wire.DrainShard) -> None:
        """Wait until the engine has no request running or waiting (or the grace is over), then stop it."""
        shard = self.supervisor.get(msg.shard_id)
        if shard is None or shard.terminal:
            self._result(msg.command_id, True)
            return
        self._commands[msg.shard_id] = msg.command_id
        engine = self.engines.get(shard.engine)
        deadline = asyncio.get_running_loop().time() + msg.grace_seconds
        if engine is not None and shard.plan.metrics_path and shard.state == READY:
            url = f"http://{_loopback(shard.host)}:{shard.port}{shard.plan.metrics_path}"
            headers = {"Authorization": f"Bearer {shard.api_key}"}
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
                while asyncio.get_running_loop().time() < deadline and not shard.terminal:
                    busy = None
                    try:
                        async with http.get(url, headers=headers) as response:
                            if response.status == 200:
                                busy = busy_requests(await response.text(), engine.metrics)
                    except (aiohttp.ClientError, asyncio.TimeoutError):
                        pass
                    if busy == 0:
                        break
                    await asyncio.sleep(1.0)
        else:
            await asyncio.sleep(max(0.0, min(msg.grace_seconds, 5.0)))
        await self.supervisor.stop(msg.shard_id, grace=30.0, reason="drained")
        self._result(msg.command_id, True)

    # ------------------------------------------------------------------ engines

    async def _provision(self, msg: wire.Provision) -> None:
        """Install each engine asked for that this node lacks (at that version), saying how it goes."""
        results = await asyncio.gather(*(self._install(want) for want in msg.engines))
        failed = [f"{w.engine}: {why}" for w, why in zip(msg.engines, results) if why]
        self._result(msg.command_id, not failed, "; ".join(failed))

    async def _install(self, want: wire.EngineWant) -> str:
        """Install one engine; returns "" when it is there, else why not."""
        def status(state: str, step: str = "", error: str = "", version: str = want.version,
                   done: dict | None = None, installs: tuple = ()) -> None:
            self._send(wire.EngineStatus(engine=want.engine, version=version, state=state, step=step, error=error,
                                         request_id=want.request_id, engines=done, engine_installs=installs))

        have = [e for e in await self.engines.scan() if e.name == want.engine]
        held = next((e for e in have if not want.version or e.version == want.version), None)
        if held is not None:
            status("installed", f"already installed: {held.version} at {held.binary}", version=held.version or "",
                   done=await self.engines.versions(), installs=await self._engine_installs())
            return ""
        if want.engine not in self.engines.engines:
            why = f"no engine plugin {want.engine!r} in this agent (it has {', '.join(sorted(self.engines.engines))})"
            status("failed", error=why, done=await self.engines.versions(), installs=await self._engine_installs())
            return why
        last = [0.0]

        def progress(step: str) -> None:  # each of the installer's steps
            last[0] = asyncio.get_running_loop().time()
            status("installing", step)

        def output(line: str) -> None:  # pip's lines: at most one a second reaches the control plane
            now = asyncio.get_running_loop().time()
            if now - last[0] >= 1.0:
                last[0] = now
                status("installing", line)

        status("queued", "waiting for any other installation of it to end")
        log.info("installing engine %s%s", want.engine, f" {want.version}" if want.version else "")
        try:
            version, path = await self.installer.install(want.engine, want.version, progress, output)
        except InstallError as exc:
            log.error("engine %s not installed: %s", want.engine, str(exc).splitlines()[-1:] or exc)
            status("failed", error=str(exc), done=await self.engines.versions(refresh=True),
                   installs=await self._engine_installs())
            return str(exc)
        installs = await self._engine_installs(refresh=True)
        log.info("engine %s %s installed at %s", want.engine, version, path)
        status("installed", f"installed at {path}", version=version, done=await self.engines.versions(),
               installs=installs)
        return ""

    # ------------------------------------------------------------------ other commands

    async def _remove_weights(self, msg: wire.RemoveWeights) -> None:
        try:
            removed = await self.weights.remove(model=msg.model, source=msg.source, sha256=msg.sha256,
                                                in_use=self.supervisor.in_use())
        except WeightsError as exc:
            log.warning("weights not removed: %s", exc)
            self._result(msg.command_id, False, str(exc))
            return
        log.info("removed weights of %s: %s", msg.model or msg.source, ", ".join(removed) or "nothing on disk")
        self._result(msg.command_id, True)

    async def _send_logs(self, msg: wire.RequestLogs) -> None:
        n = max(1, min(msg.lines, 100_000))
        if not msg.shard_id:
            lines = self._own_log.ring.last(n)
        elif (shard := self.supervisor.get(msg.shard_id)) is not None:
            lines = shard.logs(n)
            if len(lines) < n:  # more than the ring holds: the file has it
                lines = read_last_lines(shard.log_path, n)
        elif valid_shard_id(msg.shard_id) and (path := self.supervisor.logs_dir / f"{msg.shard_id}.log").is_file():
            lines = read_last_lines(path, n)
        else:
            lines = [f"no shard {msg.shard_id} on this node, and no log of one"]
        chunks = _chunks(lines)
        for i, chunk in enumerate(chunks):
            self._send(wire.LogChunk(request_id=msg.request_id, lines=tuple(chunk), last=i == len(chunks) - 1))

    async def _restart_me(self, msg: wire.Restart) -> None:
        log.info("restarting, as the control plane asks%s; the engines keep serving",
                 f" ({msg.reason})" if msg.reason else "")
        self._result(msg.command_id, True)
        await self._drain_outbox(2.0)
        self._restart = True
        if self.connection is not None:
            await self.connection.stop()

    async def _upgrade_me(self, msg: wire.Upgrade) -> None:
        """Put release `msg.version` (or, `back`, the file before) in place of this agent's program and start it
        again: the same process (os.execv in `llmgw agent`), so the engines stay its children and are taken over."""
        from llmgw.agent.self_upgrade import UpgradeRefused, running_program, upgrade_self
        from llmgw.release.keys import KeyError_
        from llmgw.release.trust import TrustSet, trust_from

        try:
            program = running_program()
            trust = TrustSet() if msg.back else trust_from(
                config_path=self.config_path, config_trusted=self.config.releases.trusted_keys,
                config_revoked=self.config.releases.revoked_keys)
            done = await upgrade_self(program, version=msg.version, back=msg.back, trust=trust,
                                      mirror=msg.mirror or self.weights.mirror_url)  # as a control plane does
        except (UpgradeRefused, KeyError_, OSError) as exc:  # KeyError_: a bad key in agent.yaml's releases
            log.error("not upgraded: %s", exc)
            self._result(msg.command_id, False, f"not upgraded: {exc}")
            return
        log.info("llmgw %s is in place at %s (the file before kept as %s); starting it, the engines keep serving",
                 done.version, done.program, done.previous.name)
        await self._restart_me(wire.Restart(reason=f"upgrade to llmgw {done.version}", command_id=msg.command_id))

    def _result(self, command_id: str, ok: bool, error: str = "") -> None:
        if command_id:
            self._send(wire.CommandResult(command_id=command_id, ok=ok, error=error))

    # ------------------------------------------------------------------ control planes

    def _control_plane_urls(self) -> list[str]:
        """The list the control plane gave last (kept on disk), then any in agent.yaml it lacks."""
        saved: list[str] = []
        try:
            data = json.loads((self.state_dir / CONTROL_PLANES_FILE).read_text())
            saved = [str(a) for a in data.get("addresses", [])]
        except (OSError, ValueError, AttributeError, TypeError):
            pass
        return list(dict.fromkeys([*saved, *self.config.control_planes]))

    async def _learn(self, session: ControlPlaneSession) -> None:
        """Take up what the Welcome says of the cluster: the mirror, every control plane; note the registration."""
        welcome = session.welcome
        self.weights.offline = OFFLINE if welcome.offline else ""
        if welcome.mirror and not self.config.mirror and self.weights.mirror_url != welcome.mirror.rstrip("/"):
            await self.weights.use_mirror(welcome.mirror)
            log.info("fetching weights from the mirror the control plane names, %s", welcome.mirror)
        if welcome.control_planes and self.connection is not None:
            known = list(dict.fromkeys([*welcome.control_planes, *self.config.control_planes]))
            before = self.connection.urls
            self.connection.set_urls(known)
            if self.connection.urls != before or not (self.state_dir / CONTROL_PLANES_FILE).exists():
                self._save_control_planes(self.connection.urls)
        body = json.dumps({"node_id": welcome.node_id, "control_plane": session.url}, indent=1).encode()
        try:
            write_atomic(self.state_dir / REGISTERED_FILE, body)
        except OSError as exc:
            log.warning("could not note the registration: %s", exc)

    def _save_control_planes(self, urls: tuple[str, ...]) -> None:
        body = json.dumps({"addresses": list(urls)}, indent=1).encode()
        try:
            write_atomic(self.state_dir / CONTROL_PLANES_FILE, body)
        except OSError as exc:
            log.error("could not keep the list of control planes: %s", exc)
        log.info("control planes are now %s", ", ".join(urls))

    def _spawn(self, coro: Any, name: str) -> asyncio.Task:
        task = asyncio.create_task(_logged(coro, name), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


class _StartRefused(Exception):
    """A shard that cannot be started here; the message goes to the control plane."""


class _RingHandler(logging.Handler):
    """The agent's own log lines, kept for RequestLogs with an empty shard id.

    Written as `llmgw agent` writes its log (key=value, secrets redacted), so
    what the console shows is what the node's journal holds.
    """

    def __init__(self, size: int) -> None:
        super().__init__(logging.INFO)
        self.ring = LogRing(size)
        self.setFormatter(LogfmtFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.ring.extend(self.format(record).splitlines() or [""])
        except Exception:  # logging must never raise
            self.handleError(record)


def _chunks(lines: list[str]) -> list[list[str]]:
    """Lines in chunks of at most LOG_CHUNK_LINES lines and LOG_CHUNK_BYTES bytes (one frame each); at least one."""
    out: list[list[str]] = [[]]
    size = 0
    for line in lines:
        line = line[:LOG_CHUNK_BYTES // 2]
        if out[-1] and (len(out[-1]) >= LOG_CHUNK_LINES or size + len(line) > LOG_CHUNK_BYTES):
            out.append([])
            size = 0
        out[-1].append(line)
        size += len(line) + 8
    return out


def _running(shard: Shard) -> wire.RunningShard:
    return wire.RunningShard(shard_id=shard.shard_id, model=shard.model, engine=shard.engine, state=shard.state,
                             port=shard.port, pid=shard.pid, gpus=tuple(shard.gpus),
                             adapters=held_of(shard.meta))  # adapters: an adopted replica's too


def _loopback(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host


async def _logged(coro: Any, name: str) -> None:
    try:
        await coro
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("%s failed", name)
