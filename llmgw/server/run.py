"""Running the server: listen, wait for a signal, shut down in order.

On SIGTERM or SIGINT the client API stops accepting connections, requests
in flight get up to `DRAIN_SECONDS` to finish (then they are cancelled and
recorded as such), the app's cleanup context writes the usage rows still
buffered and closes the store, and the metrics listener goes last.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from aiohttp import web

from llmgw.config.server import ServerConfig
from llmgw.config.validate import split_address
from llmgw.obs import logs
from llmgw.server.app import METRICS, make_gateway_app, make_metrics_app

log = logs.get("llmgw.server")

#: Longest wait for requests in flight at shutdown; less than the 30 s most supervisors allow.
DRAIN_SECONDS = 25.0


def _host(host: str) -> str | None:
    return host or None  # empty: every interface


async def run_server(config: ServerConfig, *, stop: asyncio.Event | None = None,
                     drain_seconds: float = DRAIN_SECONDS) -> int:
    """Serve the client API (and metrics) until `stop` is set or a signal comes; 0 on a clean stop."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass
    app = make_gateway_app(config)
    # ---- the control plane (issue 4): scheduler, agent port, GET /leader, admin API on admin_listen
    from llmgw.control.wiring import attach_control_plane
    attach_control_plane(app, config)
    # ---- end of the control plane
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=drain_seconds, access_log=None)
    metrics_runner: web.AppRunner | None = None
    try:
        await runner.setup()  # opens the store and the rest (cleanup context)
        host, port = split_address(config.listen)
        await web.TCPSite(runner, _host(host), port, backlog=2048).start()
        logs.event(log, "client API listening", address=config.listen)
        if config.metrics_listen:
            metrics_runner = web.AppRunner(make_metrics_app(app[METRICS]), access_log=None, shutdown_timeout=2)
            await metrics_runner.setup()
            m_host, m_port = split_address(config.metrics_listen)
            await web.TCPSite(metrics_runner, _host(m_host), m_port).start()
            logs.event(log, "metrics listening", address=config.metrics_listen)
        await stop.wait()
        logs.event(log, "stopping: no new connections, finishing requests in flight", drain_s=drain_seconds)
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        await runner.cleanup()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
    logs.event(log, "stopped", logging.INFO)
    return 0
