"""What the admin application keeps: its configuration, store, cluster and token (one `web.AppKey`)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

import attrs
from aiohttp import web

from llmgw.admin.cluster_api import Cluster
from llmgw.admin.errors import ApiError
from llmgw.auth.tenancy import Tenancy
from llmgw.config.server import ServerConfig
from llmgw.store import Store

#: Builds the Tenancy a request's changes go through: (store, actor) -> Tenancy.
TenancyFactory = Callable[[Any, str], Tenancy]

NO_SCHEDULER = (
    "this control plane runs no scheduler (control.enabled is false, or none was given to the admin API)"
)


@attrs.define(kw_only=True)
class Admin:
    config: ServerConfig
    store: Store
    tenancy: TenancyFactory
    cluster: Cluster | None = None
    #: what the cluster endpoints say (501) when there is no cluster
    no_cluster_reason: str = NO_SCHEDULER
    #: the bearer token; set at start-up when read from admin_token_file
    token: str = ""
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    #: the server.yaml this server was started from (None: not from a file, so it cannot be edited here)
    config_path: str | None = None
    #: takes up the keys that apply without a restart (llmgw.server.live.GatewayLive); None: none do here
    live: Any = None
    #: server.yaml's configuration, the store's cluster settings and what runs (llmgw.admin.in_force.ConfigInForce);
    #: `config` above is kept equal to what runs
    in_force: Any = None
    #: one change to server.yaml at a time
    config_lock: asyncio.Lock = attrs.Factory(asyncio.Lock)
    #: (mtime, size, inode) of server.yaml when last read or written here, to notice a change made by hand
    config_seen: Any = None
    #: one backup at a time (POST /backups)
    backup_lock: asyncio.Lock = attrs.Factory(asyncio.Lock)
    #: backup.schedule's job (llmgw.backup.schedule.BackupJob): its last outcome for GET /backups; None without one
    backup_job: Any = None
    #: sends events to server.yaml's notify.sinks (llmgw.notify.notifier.Notifier); None: one is built for a test
    notifier: Any = None

    def need_cluster(self) -> Cluster:
        if self.cluster is None:
            raise ApiError(501, f"{self.no_cluster_reason}: nodes, models, replicas and placement are not here")
        return self.cluster

    def now(self) -> dt.datetime:
        return self.clock().astimezone(dt.UTC)


ADMIN = web.AppKey("admin", Admin)
