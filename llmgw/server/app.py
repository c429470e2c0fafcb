"""Putting the gateway together: its parts, its resources, its two applications.

`make_gateway_app` takes the parts a test wants to choose (a store, a key
resolver, an accountant, a replica set, metrics) and builds the rest from
the configuration. Parts it builds itself it also starts and stops, in the
app's cleanup context, in this order (and the reverse at shutdown):

    store → key resolver → accountant (and its usage writer) → gateway (engine client, scraper)
    → client data (batch worker, janitor)

so at shutdown the gateway stops first, then usage rows are written, then
the store closes.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from llmgw.accounting.api import AccountantProtocol
from llmgw.admin.in_force import ConfigInForce
from llmgw.auth.principal import KeyResolverProtocol
from llmgw.config.server import ServerConfig
from llmgw.guard.wiring import build_guard
from llmgw.obs import logs
from llmgw.obs.metrics import GatewayMetrics
from llmgw.router.app import make_router_app
from llmgw.router.gateway import GATEWAY
from llmgw.router.replicas import ReplicaSet, static_replicas
from llmgw.store import Store, open_store

log = logs.get("llmgw.server")

STORE = web.AppKey("store", Store)
METRICS = web.AppKey("metrics", GatewayMetrics)
#: server.yaml's configuration, the store's cluster settings and what runs (llmgw.admin.in_force)
IN_FORCE = web.AppKey("config_in_force", ConfigInForce)


def make_gateway_app(config: ServerConfig, store: Store | None = None,
                     resolver: KeyResolverProtocol | None = None,
                     accountant: AccountantProtocol | None = None,
                     replicas: ReplicaSet | None = None,
                     metrics: GatewayMetrics | None = None,
                     guard=None) -> web.Application:
    """The client API application. Parts given are used as they are (their owner starts and
    stops them); parts left out are built from `config` and owned by the app: the store is
    opened from `store.dsn` only when a resolver or an accountant has to be built on it."""
    from llmgw.router.gateway import Gateway

    replicas = replicas if replicas is not None else static_replicas(config)
    metrics = metrics if metrics is not None else GatewayMetrics(tag_labels=config.router.tag_labels,
                                                                 tag_label_values=config.router.tag_label_values)
    gateway = Gateway(config, replicas=replicas, accountant=accountant, resolver=resolver, metrics=metrics)
    # guard: the guardrails (None when guard.mode is off), their metrics in the gateway's registry
    gateway.guard = guard if guard is not None else build_guard(config, gateway, metrics.registry)
    if config.tracing.endpoint:  # tracing: the SDK is imported, and spans made, only then
        from llmgw.obs.tracing import Tracing

        gateway.tracing = Tracing(config.tracing)
    app = make_router_app(gateway)
    app[METRICS] = metrics
    metrics.bind(slos=lambda: ((m.name, m.slo) for m in gateway.catalog.configs))  # llmgw_model_slo_seconds
    if accountant is None or (resolver is None and config.auth.keys_required):
        # Before the gateway's own context, so they outlive it at shutdown.
        app.cleanup_ctx.insert(0, functools.partial(_owned_parts, config, store))
    elif store is not None:
        app[STORE] = store
    if gateway.guard is not None:
        app.cleanup_ctx.append(_guard_settings)  # guard: attachments and on/off, read from the store
    app.cleanup_ctx.append(_client_data)  # client data: after the gateway starts, stopped before it
    if gateway.tracing is not None:
        app.cleanup_ctx.insert(0, _tracing)  # tracing: stopped last, so the last requests' spans go out
    # ---- web portal (llmgw.web): landing, accounts, chat, /admin and /docs on this listener
    from llmgw.web import install_portal

    install_portal(app, config, store_key=STORE)
    # ---- end of web portal
    # ---- SCIM 2.0 provisioning (llmgw.scim) at /scim/v2 on this listener
    from llmgw.scim import install_scim

    install_scim(app, config, store_key=STORE)
    return app


async def _tracing(app: web.Application) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await app[GATEWAY].tracing.close()


def watch_cluster_settings(app: web.Application, in_force: ConfigInForce) -> None:
    """Keep the gateway running the cluster settings the store has, read every few seconds.

    `in_force` was made from the configuration the app was built with (llmgw.server.run reads the settings
    before it builds the app); its changes are put into the gateway, its portal and the control plane."""
    from llmgw.server.live import GatewayLive
    from llmgw.web.portal import PORTAL

    in_force.live = GatewayLive(app[GATEWAY], portal=app.get(PORTAL))
    app[IN_FORCE] = in_force
    app.cleanup_ctx.append(_cluster_settings)


async def _cluster_settings(app: web.Application) -> AsyncIterator[None]:
    from llmgw.admin.in_force import watch
    from llmgw.tasks import cancel_and_wait

    store = app.get(STORE)
    if store is None:
        yield
        return
    task = asyncio.get_running_loop().create_task(watch(app[IN_FORCE], store), name="llmgw-cluster-settings")
    try:
        yield
    finally:
        await cancel_and_wait(task)


async def _guard_settings(app: web.Application) -> AsyncIterator[None]:
    """Keep the guardrails' attachments and on/off switch as the store has them (`llmgw ctl guard`)."""
    from llmgw.guard.attach import AttachmentWatcher

    store = app.get(STORE)
    if store is None:
        yield
        return
    watcher = AttachmentWatcher(app[GATEWAY].guard, store)
    try:
        await watcher.refresh()
    except Exception as exc:  # the policies in server.yaml still apply; the watcher tries again
        logs.event(log, "guard settings not read at start", logging.WARNING, error=str(exc))
    watcher.start()
    try:
        yield
    finally:
        await watcher.stop()


async def _client_data(app: web.Application) -> AsyncIterator[None]:
    """Threads, memory notes, files, batches (and their worker) and the answer cache, on the store."""
    from llmgw.router.client_data import CLIENT_DATA

    data = app[CLIENT_DATA]
    await data.start(app.get(STORE), app)
    try:
        yield
    finally:
        await data.close()


async def _owned_parts(config: ServerConfig, given_store: Store | None, app: web.Application) -> AsyncIterator[None]:
    gateway = app[GATEWAY]
    store = given_store
    started: list = []
    try:
        if store is None:
            store = await open_store(config.store.dsn.reveal())
            logs.event(log, "store open", backend=store.dialect, schema_version=store.schema_version)
        app[STORE] = store
        if gateway.resolver is None:
            gateway.resolver = await _make_resolver(config, store)
            await _call(gateway.resolver, "start")
            started.append(gateway.resolver)
        if gateway.accountant is None:
            gateway.accountant = _make_accountant(config, store)
            await _call(gateway.accountant, "start")
            started.append(gateway.accountant)
            if gateway.metrics is not None:
                from llmgw.accounting.store_metrics import StoreWriteCollector

                gateway.metrics.registry.register(StoreWriteCollector(store, gateway.accountant))
                from llmgw.obs.store_metrics import StoreCollector

                store_collector = StoreCollector(store)  # transaction times, the pool, the replication
                gateway.metrics.registry.register(store_collector)
                gateway.metrics.before_scrape.append(store_collector.refresh)
                from llmgw.obs.budget_metrics import BudgetCollector

                budget_collector = BudgetCollector(store, gateway.accountant)  # llmgw_budget_spent_ratio
                gateway.metrics.registry.register(budget_collector)
                gateway.metrics.before_scrape.append(budget_collector.refresh)
                if getattr(gateway.accountant, "shared", None) is not None:  # shared limits: the Redis up or not
                    from llmgw.accounting.limits_redis import SharedLimitsCollector

                    gateway.metrics.registry.register(SharedLimitsCollector(gateway.accountant.shared))
        yield
    finally:
        for part in reversed(started):
            for name in ("close", "stop"):
                if hasattr(part, name):
                    try:
                        await _call(part, name)
                    except Exception:
                        log.exception("stopping a part failed", extra={"fields": {"part": type(part).__name__}})
                    break
        if given_store is None and store is not None:
            await store.close()
            logs.event(log, "store closed")


async def _call(obj, name: str) -> None:
    method = getattr(obj, name, None)
    if method is not None:
        result = method()
        if inspect.isawaitable(result):
            await result


async def _make_resolver(config: ServerConfig, store: Store) -> KeyResolverProtocol:
    from llmgw.auth.key_hash import ensure_key_hasher
    from llmgw.auth.keys import KeyResolver, model_aliases

    return KeyResolver(store, aliases=model_aliases(config), hasher=await ensure_key_hasher(config, store))


def _make_accountant(config: ServerConfig, store: Store) -> AccountantProtocol:
    from llmgw.accounting.accountant import make_accountant

    return make_accountant(config, store)


# ---------------------------------------------------------------- metrics listener


def make_metrics_app(metrics: GatewayMetrics) -> web.Application:
    """`GET /metrics` and nothing else, for metrics_listen."""

    async def exposition(request: web.Request) -> web.Response:
        await metrics.refresh()  # what is read asynchronously (the store's replication), a few seconds old at most
        body, content_type = metrics.render(request.headers.get("Accept"))  # OpenMetrics when asked for
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app[METRICS] = metrics
    app.router.add_get("/metrics", exposition)
    return app
