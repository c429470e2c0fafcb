"""Running the server: open the store, listen, wait for a signal, shut down in order.

The store is opened first, and the cluster settings it keeps are laid over
server.yaml's values before anything is built (llmgw.admin.in_force), so
each of them is in force from the start, those read only at start too;
while the server runs, a change to them is taken up every few seconds.

On SIGTERM or SIGINT the client API stops accepting connections, requests
in flight get up to `DRAIN_SECONDS` to finish (then they are cancelled and
recorded as such), the app's cleanup context writes the usage rows still
buffered, the metrics listener stops, and the store closes last.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

from aiohttp import web

from llmgw.admin.in_force import ConfigInForce, read_settings
from llmgw.config.server import ServerConfig
from llmgw.config.validate import split_address
from llmgw.obs import logs
from llmgw.server.app import (
    METRICS,
    make_gateway_app,
    make_metrics_app,
    watch_cluster_settings,
)
from llmgw.router.gateway import GATEWAY
from llmgw.server.limits import ClientRunner
from llmgw.store import Store, open_store

log = logs.get("llmgw.server")

#: Longest wait for requests in flight at shutdown; less than the 30 s most supervisors allow.
DRAIN_SECONDS = 25.0


#: run_server's answer when the server is to start itself again from the program now in place (ctl upgrade
#: replaced it): `llmgw server` then execs itself (llmgw.agent.self_upgrade.exec_again)
START_AGAIN = 75


def _host(host: str) -> str | None:
    return host or None  # empty: every interface


async def run_server(config: ServerConfig, *, stop: asyncio.Event | None = None,
                     drain_seconds: float = DRAIN_SECONDS, config_path: str | None = None) -> int:
    """Serve the client API (and metrics) until `stop` is set or a signal comes; 0 on a clean stop.

    `config_path`: the server.yaml `config` was read from, which the admin API may then edit."""
    stop = stop or asyncio.Event()
    # The store first: the cluster settings it keeps win over server.yaml, in everything built from here on.
    store = await open_store(config.store.dsn.reveal())
    logs.event(log, "store open", backend=store.dialect, schema_version=store.schema_version)
    try:
        in_force = await _config_in_force(config, store)
        return await _serve(in_force, store, stop, drain_seconds, config_path)
    finally:
        await store.close()
        logs.event(log, "store closed")


async def _config_in_force(config: ServerConfig, store: Store) -> ConfigInForce:
    """server.yaml's configuration with the store's cluster settings over it."""
    try:
        kept = await read_settings(store)
    except Exception as exc:  # noqa: BLE001 - the file's values serve until the settings can be read
        logs.event(log, "cluster settings not read at start; server.yaml's values apply until they are",
                   logging.WARNING, error=str(exc))
        kept = {}
    return ConfigInForce(config, settings={k: s.value for k, s in kept.items()})


async def _serve(in_force: ConfigInForce, store: Store, stop: asyncio.Event, drain_seconds: float,
                 config_path: str | None) -> int:
    config = in_force.running
    loop = asyncio.get_running_loop()
    handled = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass
    app = make_gateway_app(config, store=store)
    watch_cluster_settings(app, in_force)
    # ---- notifications (llmgw.notify): events that need a person, sent to notify.sinks; before the control plane
    from llmgw.notify.wiring import install_notifier
    install_notifier(app, config)
    # ---- workers (llmgw.server.workers): a worker past the first serves the client API only, fed by worker 0
    from llmgw.server.workers import worker_index
    worker = worker_index()
    # ---- the control plane (issue 4): scheduler, agent port, GET /leader, admin API on admin_listen
    from llmgw.control.wiring import attach_control_plane
    slot = None
    if not worker:
        slot = attach_control_plane(app, config, config_path=config_path)
        slot.stop_server = stop.set  # ctl upgrade: stop, then start again from the new program (START_AGAIN)
    else:  # workers: GET /leader answers what worker 0's does
        from llmgw.server.workers import serve_leader
        serve_leader(app)
    # ---- end of the control plane
    # router.clients: header and idle timeouts, connection caps (llmgw.server.limits)
    runner = ClientRunner(app, config.router.clients, handler_cancellation=True, shutdown_timeout=drain_seconds,
                          access_log=None)
    metrics_runner: web.AppRunner | None = None
    pool = None  # workers: worker 0's other workers
    try:
        await runner.setup()  # the key resolver, the accountant and the rest (cleanup context)
        # What start-up made (modules, config, the app) lives as long as the process: kept out of the cycle
        # collector's passes, whose full ones walked all of it on the event loop (the saturation tail).
        gc.freeze()
        if worker:  # workers: worker 0's replicas and models before the first client
            from llmgw.server.workers import start_following
            await start_following(app, stop)
        host, port = split_address(config.listen)
        await web.TCPSite(runner, _host(host), port, backlog=2048, reuse_port=config.workers > 1 or None).start()
        logs.event(log, "client API listening", address=config.listen, worker=worker)
        if config.workers > 1 and not worker:
            from llmgw.server.workers import WorkerPool
            pool = WorkerPool(app[GATEWAY], count=config.workers, config_path=config_path, drain_seconds=drain_seconds)
            await pool.start()
        if config.metrics_listen:
            metrics_runner = web.AppRunner(make_metrics_app(app[METRICS]), access_log=None, shutdown_timeout=2)
            await metrics_runner.setup()
            m_host, m_port = split_address(config.metrics_listen)
            m_port += worker  # workers: worker I's own metrics on metrics_listen's port + I
            await web.TCPSite(metrics_runner, _host(m_host), m_port).start()
            logs.event(log, "metrics listening", address=f"{m_host}:{m_port}", worker=worker)
        await stop.wait()
        logs.event(log, "stopping: no new connections, finishing requests in flight", drain_s=drain_seconds)
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        if pool is not None:  # workers: theirs drain while this one's do
            await asyncio.gather(pool.stop(), runner.cleanup())
        else:
            await runner.cleanup()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
    if slot is not None and slot.start_again:
        logs.event(log, "stopped; starting again", logging.INFO, reason=slot.start_again)
        return START_AGAIN
    logs.event(log, "stopped", logging.INFO)
    return 0
