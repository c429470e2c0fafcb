"""Putting the notifier into `llmgw server`: one call on the gateway's application.

`install_notifier(app, config)` builds the notifier from server.yaml's
`notify` section (refusing a sink whose kind no plugin gives, with a
ConfigError naming `notify.sinks[N].kind`), counts its deliveries in the
gateway's metrics, and, when there are sinks:

- starts it before every other part of the app and stops it after them, so
  what the control plane and the accountant say while stopping still goes out;
- once the app has started, tells the accountant's budgets about it (a
  budget spent is said once per scope and period).

The control plane and the admin API are given it by `attach_control_plane`
(llmgw.control.wiring), which finds it under `NOTIFIER`. A gateway without
sinks has a notifier that sends nothing and needs no plugin.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from llmgw.config.server import ServerConfig
from llmgw.notify.notifier import Notifier, build_notifier

__all__ = ["NOTIFIER", "install_notifier"]

NOTIFIER = web.AppKey("notifier", Notifier)


def install_notifier(app: web.Application, config: ServerConfig, *, plugins=None) -> Notifier:
    """Build the notifier for `config` and run it with `app` (see the module's text)."""
    from llmgw.server.app import METRICS

    metrics = app.get(METRICS)
    notifier = build_notifier(config, plugins, registry=metrics.registry if metrics is not None else None)
    app[NOTIFIER] = notifier
    if notifier.enabled:
        app.cleanup_ctx.insert(0, _running)
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
    if budgets is not None and hasattr(budgets, "notify"):
        budgets.notify = app[NOTIFIER].emit
