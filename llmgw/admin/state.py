"""What the admin application keeps: its configuration, store, cluster and token (one `web.AppKey`)."""

from __future__ import annotations

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

    def need_cluster(self) -> Cluster:
        if self.cluster is None:
            raise ApiError(501, f"{self.no_cluster_reason}: nodes, models, replicas and placement are not here")
        return self.cluster

    def now(self) -> dt.datetime:
        return self.clock().astimezone(dt.UTC)


ADMIN = web.AppKey("admin", Admin)
