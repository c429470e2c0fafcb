"""Putting the guardrails into a gateway: the layer, its metrics, and how judges are reached.

`build_guard(config, gateway, metrics)` makes the `GuardLayer` a gateway
uses, or None when `guard.mode` is off. Judges are asked through
`RouterTransport`: straight to a replica of the judge model, taking room in
the highest admission band, past the limits, accounting and the guardrails
themselves, so a tenant's queue never holds a judgement up.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from llmgw.guard.gateway import GuardLayer
from llmgw.guard.judge import Judge, JudgeUnavailable, judge_models
from llmgw.guard.metrics import GuardMetrics
from llmgw.guard.policy import PolicyBook
from llmgw.guard.scan import Scanner
from llmgw.obs import logs

__all__ = ["RouterTransport", "build_guard"]

log = logs.get("llmgw.guard")


class RouterTransport:
    """Judges asked at their replicas, through the gateway's admission and engine client."""

    def __init__(self, gateway: Any, *, cluster_only: bool = False) -> None:
        self.gateway = gateway
        bands = gateway.config.admission.bands
        self.band = bands[0].name if bands else gateway.admission.band_name(None)
        #: residency: only judges the cluster's own scheduler runs (a key kept in the cluster, or no_store)
        self.cluster_only = cluster_only
        self._within: RouterTransport | None = None

    def within_cluster(self) -> RouterTransport:
        """The same transport asking only judges on the cluster's own engines."""
        if self.cluster_only:
            return self
        if self._within is None:
            self._within = RouterTransport(self.gateway, cluster_only=True)
        return self._within

    def ready(self, model: str) -> str | None:
        from llmgw.router.residency import in_cluster

        gw = self.gateway
        replicas = gw.replicas.replicas_for(model)
        if self.cluster_only:
            replicas = [r for r in replicas if in_cluster(r)]
        if not replicas:
            return "unavailable"
        return None if gw.admission.healthy(model) else "unavailable"

    async def ask(self, model: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        from llmgw.router.choose import Want
        from llmgw.router.errors import GatewayError, dumps, loads
        from llmgw.router.proxy import UpstreamFailure, read_whole

        gw = self.gateway
        try:
            grant = await gw.admission.acquire(model, self.band, Want(cluster_only=self.cluster_only))
        except GatewayError as exc:
            raise JudgeUnavailable("unavailable", f"{model!r}: {exc.message}") from None
        try:
            replica = grant.replica
            data = dumps({**body, "model": replica.name_at_engine, "stream": False})
            try:
                resp = await gw.upstream.open(replica, path, data, request_id="guard_" + secrets.token_hex(8),
                                              stream=False, deadline=None)
            except UpstreamFailure as failure:
                raise JudgeUnavailable("unavailable", f"{model!r}: {failure.message}") from None
            try:
                raw = await read_whole(resp, None)
            finally:
                resp.release()
            if resp.status >= 400:
                raise JudgeUnavailable("error", f"{model!r} answered {resp.status}")
            replica.succeeded()
            return loads(raw)
        finally:
            gw.admission.release(grant)


def build_guard(config: Any, gateway: Any, registry: Any = None, *, plugins: Any = None) -> GuardLayer | None:
    """The gateway's guardrails from server.yaml, or None when `guard.mode` is off.

    Raises PolicyError (a policy that cannot be used) and PluginError (a
    plugin that does not load): a gateway that cannot check what it was told
    to check does not start.
    """
    if config.guard.mode == "off":
        return None
    if plugins is None:
        from llmgw.plugins.manager import load_plugins

        plugins = load_plugins()
    metrics = GuardMetrics(registry)
    book = PolicyBook.from_config(config.guard)
    judge = Judge(judge_models(config.models), plugins.judge_formats(), RouterTransport(gateway), metrics=metrics)
    layer = GuardLayer(
        book, Scanner(plugins.detectors()), judge=judge, metrics=metrics,
        capabilities={m.name: (m.capabilities.tools, m.capabilities.vision) for m in config.models},
    )
    for problem in layer.judge_problems():
        logs.event(log, "a judge the guard policies name cannot be asked yet", logging.WARNING, detail=problem)
    return layer
