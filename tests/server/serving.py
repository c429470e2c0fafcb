"""The gateway's aiohttp app served for a test on 127.0.0.1 and a free port, the way `llmgw server` serves it
(handler_cancellation: a client that goes away cancels its request)."""

from __future__ import annotations

from aiohttp import web


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    """Its runner (`cleanup()` stops it, writing what is buffered) and the base URL the openai SDK takes (…/v1)."""
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
