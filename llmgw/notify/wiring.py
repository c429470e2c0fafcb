"""Putting the notifier into `llmgw server`: one call on the gateway's application.

`install_notifier(app, config)` builds the notifier from server.yaml's
`notify` section (refusing a sink whose kind no plugin gives, with a
ConfigError naming `notify.sinks[N].kind`), counts its deliveries in the
gateway's metrics, and, when there are sinks:

- starts it before every other part of the app and stops it after them, so
  what the control plane and the accountant say while stopping still goes out;
- once the app has started, tells the accountant's budgets about it (a
  budget's refusal, and each share of `budgets.notify_at` crossed, is said
  once per scope, period and threshold).

With sinks or without, the budgets count what they tell in
`llmgw_budget_events_total{scope,threshold}` on the gateway's metrics.

The control plane and the admin API are given it by `attach_control_plane`
(llmgw.control.wiring), which finds it under `NOTIFIER`. A gateway without
sinks has a notifier that sends nothing and needs no plugin.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web
from prometheus_client import Counter

from llmgw.config.server import ServerConfig
from llmgw.notify.notifier import Notifier, build_notifier
from llmgw.obs.metric_defs import defn

__all__ = ["NOTIFIER", "install_notifier"]

NOTIFIER = web.AppKey("notifier", Notifier)
#: llmgw_budget_events_total{scope,threshold}: the budget events told (a share crossed, or "refused")
BUDGET_EVENTS = web.AppKey("budget_events", Counter)


def install_notifier(app: web.Application, config: ServerConfig, *, plugins=None) -> Notifier:
    """Build the notifier for `config` and run it with `app` (see the module's text)."""
    from llmgw.server.app import METRICS

    metrics = app.get(METRICS)
    notifier = build_notifier(config, plugins, registry=metrics.registry if metrics is not None else None)
    app[NOTIFIER] = notifier
    if notifier.enabled:
        app.cleanup_ctx.insert(0, _running)
    if metrics is not None:  # budget events are counted with sinks or without, so alerts can follow them
        app[BUDGET_EVENTS] = Counter("llmgw_budget_events_total", defn("llmgw_budget_events_total").help,
                                     ("scope", "threshold"), registry=metrics.registry)
    app.on_startup.append(_tell_budgets)
    return notifier


async def _running(app: web.Application) -> AsyncIterator[None]:
    notifier = app[NOTIFIER]
    await notifier.start()
    try:
        yield
    finally:
        await notifier.stop()


async def _tell_budgets(app: web.Application) -> None:
    """After the cleanup contexts have built the accountant: its budgets say when one is spent."""
    from llmgw.router.gateway import GATEWAY

    budgets = getattr(getattr(app[GATEWAY], "accountant", None), "budgets", None)
    if budgets is None or not hasattr(budgets, "notify"):
        return
    if app[NOTIFIER].enabled:
        budgets.notify = app[NOTIFIER].emit
    counter = app.get(BUDGET_EVENTS)
    if counter is not None:
        budgets.count_event = lambda scope, threshold: counter.labels(scope, threshold).inc()
