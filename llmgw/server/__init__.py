"""`llmgw server`: the app assembly, its resources and its listeners.

`make_gateway_app(config, store, resolver, accountant, replicas, metrics)`
builds the client API (tests pass their own parts; the command passes the
store only, and the app builds the rest in its cleanup context);
`run_server(config)` opens the store, lays the cluster settings it keeps over
`config` (llmgw.admin.in_force), listens until SIGTERM and shuts down in order.
"""

from llmgw.server.app import make_gateway_app, make_metrics_app
from llmgw.server.run import run_server

__all__ = ["make_gateway_app", "make_metrics_app", "run_server"]
