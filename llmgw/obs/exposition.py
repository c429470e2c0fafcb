"""What every role's /metrics has in common: build info, process metrics, no `_created`, OpenMetrics on request.

`role_registry(role)` is a registry holding `llmgw_build_info` and prometheus_client's process collector;
each role adds its own collectors to it. `render(registry, accept)` answers a scrape in the format its
Accept header asks for; `metrics_handler(registry)` is the aiohttp handler for `GET /metrics`.
"""

from __future__ import annotations

from collections.abc import Callable

import prometheus_client
from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder

from llmgw.obs.metric_defs import defn

# A `_created` series beside every counter and histogram doubles what Prometheus stores and nobody queries
# it; prometheus_client's switch is for the whole process, which is what llmgw wants in every role.
prometheus_client.disable_created_metrics()


class BuildInfoCollector:
    """`llmgw_build_info{version,commit,python,role} 1`."""

    def __init__(self, role: str) -> None:
        self.role = role

    def describe(self):
        return []

    def collect(self):
        from llmgw.buildinfo import build_info

        info = build_info()
        d = defn("llmgw_build_info")
        family = GaugeMetricFamily(d.family, d.help, labels=list(d.labels))
        family.add_metric([info["version"], info["commit"], info["python"], self.role], 1)
        yield family


def role_registry(role: str) -> CollectorRegistry:
    """A registry for one role's endpoint, with build info and the process's own metrics in it."""
    registry = CollectorRegistry(auto_describe=True)
    add_common(registry, role)
    return registry


def add_common(registry: CollectorRegistry, role: str) -> None:
    """Build info and process metrics into an existing registry."""
    registry.register(BuildInfoCollector(role))
    ProcessCollector(registry=registry)


def render(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """The exposition and its content type: OpenMetrics when `accept` asks for it, else Prometheus text."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


def metrics_handler(registry: CollectorRegistry | Callable[[], CollectorRegistry]
                    ) -> Callable[[web.Request], object]:
    """`GET /metrics` for `registry` (or the registry a function gives at each scrape)."""

    async def handle(request: web.Request) -> web.Response:
        reg = registry() if callable(registry) and not isinstance(registry, CollectorRegistry) else registry
        body, content_type = render(reg, request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    return handle


def make_metrics_app(registry: CollectorRegistry) -> web.Application:
    """An application serving `GET /metrics` and nothing else."""
    app = web.Application()
    app.router.add_get("/metrics", metrics_handler(registry))
    return app
