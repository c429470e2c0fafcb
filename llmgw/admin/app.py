"""The admin API as an aiohttp application of its own, and how a server runs it.

    app = make_admin_app(config, store, cluster=cluster)

serves /api/v1 (routes.py) behind the checks of security.py. The token is
`token=` when given (tests), else read from `admin_token_file` when the app
starts, written there first (0600) when the file does not exist yet.

`admin_address(config)` is where it listens: `admin_listen`, refused on an
address other than loopback unless `admin_remote: true`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from llmgw.admin.cluster_api import Cluster
from llmgw.admin.routes import register
from llmgw.admin.security import admin_middleware
from llmgw.admin.state import ADMIN, NO_SCHEDULER, Admin, TenancyFactory
from llmgw.admin.token import ensure_token
from llmgw.auth.tenancy import Tenancy
from llmgw.config.server import ServerConfig
from llmgw.config.validate import is_loopback, split_address
from llmgw.store import Store

log = logging.getLogger("llmgw.admin")

__all__ = ["AdminListenError", "admin_address", "default_tenancy", "make_admin_app", "serve_admin"]

#: Largest request body: a model definition is a few KiB.
MAX_BODY = 1024 * 1024


class AdminListenError(ValueError):
    """admin_listen cannot be used as it is; the message says why and what to do."""


def admin_address(config: ServerConfig) -> tuple[str, int]:
    """(host, port) to listen on; AdminListenError for a bad address or one off loopback without admin_remote."""
    try:
        host, port = split_address(config.admin_listen)
    except ValueError as exc:
        raise AdminListenError(f"admin_listen: {exc}") from None
    if not config.admin_remote and not is_loopback(host):
        raise AdminListenError(
            f"admin_listen: {config.admin_listen} is not a loopback address, and the admin token would cross "
            "the network in clear; keep 127.0.0.1:9090 and reach it through ssh -L, or set admin_remote: true "
            "on a network you trust")
    return host, port


def default_tenancy(config: ServerConfig, on_change: Callable[[str | None], None] | None = None) -> TenancyFactory:
    """Tenancy as `llmgw org|users|keys --config server.yaml` builds it: the file's key lifetime, bands, models."""
    from llmgw.auth.key_hash import key_hasher_of
    from llmgw.auth.keys import model_aliases
    from llmgw.router.routing_profiles import RoutingProfiles

    def make(store: Any, actor: str) -> Tenancy:
        return Tenancy(store, actor=actor, max_key_ttl=config.auth.max_key_ttl,
                       bands=[b.name for b in config.admission.bands],
                       models=model_aliases(config) or None, on_change=on_change,
                       routing_profiles=RoutingProfiles(config.router.profiles),  # routing profiles
                       hasher=key_hasher_of(config))

    return make


def make_admin_app(
    config: ServerConfig,
    store: Store,
    *,
    cluster: Cluster | None = None,
    no_cluster_reason: str = NO_SCHEDULER,
    tenancy: TenancyFactory | None = None,
    on_tenancy_change: Callable[[str | None], None] | None = None,
    token: str | None = None,
    clock: Callable[[], dt.datetime] | None = None,
    config_path: str | None = None,
    live: Any = None,
    in_force: Any = None,
    notifier: Any = None,
) -> web.Application:
    """The admin API on `store`, steering `cluster` (none: its endpoints answer 501 with `no_cluster_reason`).

    `on_tenancy_change` is told which cached keys to forget after a change to people, keys or limits (a key
    resolver's `invalidate`); `tenancy` replaces how the Tenancy of a request is built. `config_path` is the
    server.yaml `config` was read from (/server-config edits it); `live` takes up the keys that apply without
    a restart (llmgw.server.live.GatewayLive), and with both the file is watched for changes made by hand.
    `in_force` is the server's configuration in force (llmgw.admin.in_force.ConfigInForce: the file's with
    the store's cluster settings over it), shared with the server's own watch of the settings, its live
    applier used; without one the app keeps its own, on `config` and `live`. `notifier` (llmgw.notify) is told
    of failed backups and sends `POST /notify/test`'s event; without one that endpoint builds its own.
    """
    from llmgw.admin.in_force import ConfigInForce

    if in_force is None:
        in_force = ConfigInForce(config, live=live)
    live = in_force.live
    app = web.Application(middlewares=[admin_middleware], client_max_size=MAX_BODY)
    admin = Admin(config=in_force.running, store=store, cluster=cluster, no_cluster_reason=no_cluster_reason,
                  tenancy=tenancy or default_tenancy(config, on_tenancy_change), token=token or "",
                  config_path=str(config_path) if config_path is not None else None, live=live,
                  in_force=in_force, notifier=notifier)
    in_force.on_change.append(functools.partial(setattr, admin, "config"))  # the admin API's view follows
    if clock is not None:
        admin.clock = clock
    app[ADMIN] = admin
    register(app)
    if admin.config_path is not None and live is not None:
        from llmgw.admin.server_config import watch_file

        app.cleanup_ctx.append(watch_file)
    if token is None:
        app.on_startup.append(_load_token)
    app.on_startup.append(_open_audit_journal)
    from llmgw.backup.schedule import scheduled_backups  # backup.schedule's job; archives in clear are said

    app.cleanup_ctx.append(scheduled_backups)
    return app


async def _open_audit_journal(app: web.Application) -> None:
    """The audit journal beside the store, its room reserved now, before a disk can fill (llmgw.admin.audit_journal)."""
    from llmgw.admin import audit_journal

    audit_journal.prepare(app[ADMIN].store)


async def _load_token(app: web.Application) -> None:
    admin = app[ADMIN]
    path = admin.config.admin_token_file
    admin.token = ensure_token(path)  # small files; not worth an executor at start-up
    log.info("admin token read from %s", path)


@contextlib.asynccontextmanager
async def serve_admin(app: web.Application, host: str, port: int) -> AsyncIterator[web.AppRunner]:
    """Listen on host:port until the block ends (a server's admin listener, or a test's)."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=5)
    await runner.setup()
    try:
        await web.TCPSite(runner, host or None, port).start()  # empty: every interface (admin_remote)
        yield runner
    finally:
        await runner.cleanup()
