"""The mirror's metrics, on its files listener at /metrics: bytes sent, file requests, fetches, verify problems."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import Counter

from llmgw.obs.exposition import metrics_handler, role_registry
from llmgw.obs.metric_defs import defn


class MirrorMetrics:
    def __init__(self) -> None:
        self.registry = role_registry("mirror")

        def counter(name: str) -> Counter:
            d = defn(name)
            return Counter(d.family, d.help, list(d.labels), registry=self.registry)

        self.bytes_served = counter("llmgw_mirror_bytes_served_total")
        self.file_requests = counter("llmgw_mirror_file_requests_total")
        self.fetches = counter("llmgw_mirror_fetches_total")
        self.verify_failures = counter("llmgw_mirror_verify_failures_total")

    def handler(self):
        return metrics_handler(self.registry)

    def middleware(self):
        """Counts every answer of the files listener by status (its own /metrics aside)."""

        @web.middleware
        async def count(request: web.Request, handler) -> web.StreamResponse:
            if request.path == "/metrics":
                return await handler(request)
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                self.file_requests.labels(str(exc.status)).inc()
                raise
            except Exception:
                self.file_requests.labels("500").inc()
                raise
            self.file_requests.labels(str(response.status)).inc()
            return response

        return count
