"""The admin API: how operators, `llmgw ctl`, the console and automation steer a cluster.

- `app`: `make_admin_app(config, store, cluster=…)`, `admin_address(config)`, `serve_admin(...)`.
- `routes`: the one route table; it serves the API and generates its OpenAPI 3.1 document.
- `security`: Host, cross-site, token, content-type and actor checks before any handler.
- `cluster_api`: the `Cluster` protocol the control plane implements for it.
- `audit`: every change recorded with who, through what, the fields given and how it ended.
- `settings`: the cluster settings that may be changed at run time, and their checks.

docs/admin-api.md is the operator's side; docs/admin-api.openapi.json the document.
"""

from llmgw.admin.app import (
    AdminListenError,
    admin_address,
    default_tenancy,
    make_admin_app,
    serve_admin,
)
from llmgw.admin.cluster_api import (
    Cluster,
    ClusterConflict,
    ClusterError,
    ClusterInvalid,
    ClusterNotFound,
    ClusterUnavailable,
    ClusterUnsupported,
)
from llmgw.admin.token import TokenFileError, ensure_token, read_token

__all__ = [
    "AdminListenError",
    "Cluster",
    "ClusterConflict",
    "ClusterError",
    "ClusterInvalid",
    "ClusterNotFound",
    "ClusterUnavailable",
    "ClusterUnsupported",
    "TokenFileError",
    "admin_address",
    "default_tenancy",
    "ensure_token",
    "make_admin_app",
    "read_token",
    "serve_admin",
]
