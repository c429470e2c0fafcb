"""Putting the control plane into `llmgw server`: one call on the gateway's application.

`attach_control_plane(app, config)` adds, to the client API's application:

- the control plane (scheduler, agent port, leadership), fed into the
  gateway's own replica set, started after the store is open and stopped
  before it closes;
- `GET /leader` beside the gateway's `GET /health`;
- the router serving the control plane's whole catalog (server.yaml's models
  and those added at run time), re-read from the store every 3 s
  (llmgw/router/catalog_follow.py);
- `llmgw_model_update_available` on the gateway's metrics, from the
  leader's update checks (llmgw/mirror/updates.py);
- the notifier (llmgw.notify.wiring.install_notifier, when it was installed
  first) told of parked models, lost nodes and updates, and given to the
  admin API (`POST /api/v1/notify/test`, failed backups);
- the admin API on `admin_listen`, steering this control plane through
  `AdminCluster` (skipped with `admin=False`, or when admin_listen is empty).

So the server assembly needs two lines:

    from llmgw.control.wiring import attach_control_plane
    attach_control_plane(app, config)
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from llmgw.config.server import ServerConfig
from llmgw.control.service import ControlPlaneSlot, install_control_plane
from llmgw.obs import logs

log = logs.get("llmgw.control")


def attach_control_plane(app: web.Application, config: ServerConfig, *, admin: bool = True,
                         config_path: str | None = None, **options: Any) -> ControlPlaneSlot:
    """Run the control plane (and the admin API) with the gateway application `app`.

    `config_path` is the server.yaml `config` came from: the admin API edits it (/server-config) and the
    keys that apply without a restart are put into the running gateway."""
    from llmgw.adapters import loading as adapters_loading
    from llmgw.router.gateway import GATEWAY

    from llmgw.notify.wiring import NOTIFIER

    if app.get(NOTIFIER) is not None:  # llmgw.notify.wiring.install_notifier, called first
        options.setdefault("notify", app[NOTIFIER].emit)
    slot = install_control_plane(app, config, app[GATEWAY].replicas, **options)
    slot.config_path = config_path  # ctl upgrade reads server.yaml's release keys relative to it
    app[GATEWAY].control = slot  # the router starts on-demand models through it
    app[GATEWAY].upstream.adapter_missing = adapters_loading.reload_forgotten(slot)  # adapters: forgotten, reloaded
    app.cleanup_ctx.append(_router_follows_catalog)  # after the control plane's: it serves its whole catalog
    app.cleanup_ctx.append(_replica_view)  # active-active: a standby serves the leader's replicas too
    app[GATEWAY].metrics.bind(model_updates=lambda: slot.plane.updates.available() if slot.plane else ())
    from llmgw.obs.control_metrics import PlaneCollector

    app[GATEWAY].metrics.registry.register(PlaneCollector(slot))  # the scheduler's, and the agents' relayed
    if admin and config.admin_listen:
        app.cleanup_ctx.append(functools.partial(_admin_listener, config, slot, config_path))
    return slot


async def _router_follows_catalog(app: web.Application) -> AsyncIterator[None]:
    """The router serves the control plane's catalog, re-read from the store every few seconds."""
    from llmgw.control.service import CONTROL_PLANE
    from llmgw.router.catalog_follow import follow, watch
    from llmgw.router.gateway import GATEWAY
    from llmgw.tasks import cancel_and_wait

    plane = app[CONTROL_PLANE].plane
    if plane is None:  # control.enabled is false, or it could not start: server.yaml's models only
        yield
        return
    stop_following = follow(app[GATEWAY], plane.catalog)
    if getattr(plane, "reconciler", None) is not None:  # slo: a model over its ttft_p99 asks for a replica more
        plane.reconciler.slo_pressure = app[GATEWAY].slo.over
    task = asyncio.get_running_loop().create_task(watch(plane.catalog), name="llmgw-catalog-watch")
    try:
        yield
    finally:
        await cancel_and_wait(task)
        stop_following()


async def _replica_view(app: web.Application) -> AsyncIterator[None]:
    """The leader writes its replica set to the store; a standby's router serves from it (replica_view.py)."""
    from llmgw.control.replica_view import ReplicaView, ReplicaViewCollector, feed_reconciler, start_on_demand
    from llmgw.control.service import CONTROL_PLANE
    from llmgw.router.gateway import GATEWAY

    plane = app[CONTROL_PLANE].plane
    if plane is None or plane.reconciler is None:
        yield
        return
    control = plane.config.control
    ttl = control.lease_ttl.total_seconds()
    view = ReplicaView(plane.store, plane.replicas, plane.leadership, plane.reconciler.keys, max_age=2 * ttl,
                       adopt_grace=max(control.heartbeat_window.total_seconds(),
                                       3 * plane.endpoint.heartbeat_interval),
                       used_elsewhere=feed_reconciler(plane.reconciler),
                       wanted_elsewhere=start_on_demand(plane.reconciler))
    plane.replica_view = view
    plane.leadership.describe_more = view.describe
    app[GATEWAY].health_more = view.describe
    collector = ReplicaViewCollector(view)
    app[GATEWAY].metrics.registry.register(collector)
    view.start()
    try:
        yield
    finally:
        await view.stop()
        app[GATEWAY].metrics.registry.unregister(collector)
        plane.leadership.describe_more = None
        app[GATEWAY].health_more = None


async def _admin_listener(config: ServerConfig, slot: ControlPlaneSlot, config_path: str | None,
                          app: web.Application) -> AsyncIterator[None]:
    from llmgw.admin.app import admin_address, make_admin_app, serve_admin
    from llmgw.control.admin_cluster import AdminCluster
    from llmgw.router.gateway import GATEWAY
    from llmgw.server.app import STORE

    store = app.get(STORE)
    if store is None:
        logs.event(log, "admin API not served: the gateway opened no store", logging.WARNING)
        yield
        return
    resolver = app[GATEWAY].resolver
    from llmgw.notify.wiring import NOTIFIER
    from llmgw.server.app import IN_FORCE
    from llmgw.server.live import GatewayLive
    from llmgw.web.portal import PORTAL

    # The server's configuration in force (with the store's cluster settings), which the admin API shows and
    # changes; without one (an app built by hand) the admin API keeps its own.
    in_force = app.get(IN_FORCE)
    live = in_force.live if in_force is not None else GatewayLive(app[GATEWAY], portal=app.get(PORTAL))
    admin_app = make_admin_app(config, store, cluster=AdminCluster(slot),
                               on_tenancy_change=getattr(resolver, "invalidate", None),
                               config_path=config_path, live=live, in_force=in_force,
                               notifier=app.get(NOTIFIER))
    if config.backup.schedule:
        from llmgw.admin.state import ADMIN
        from llmgw.backup.schedule import BackupCollector

        app[GATEWAY].metrics.registry.register(BackupCollector(admin_app[ADMIN]))  # llmgw_backup_*
    from llmgw.router.kept_requests import GATEWAY_APP

    admin_app[GATEWAY_APP] = app  # kept requests: replayed through this gateway
    try:
        host, port = admin_address(config)
        serving = serve_admin(admin_app, host, port)
        await serving.__aenter__()
    except Exception as exc:  # noqa: BLE001 - the client API serves on; the log says what is wrong
        logs.event(log, "admin API not served", logging.ERROR, address=config.admin_listen, error=str(exc))
        yield
        return
    logs.event(log, "admin API listening", address=config.admin_listen)
    try:
        yield
    finally:
        await serving.__aexit__(None, None, None)


__all__ = ["attach_control_plane"]
