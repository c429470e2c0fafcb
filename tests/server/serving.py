"""The gateway's aiohttp app served for a test on 127.0.0.1 and a free port, the way `llmgw server` serves it
(handler_cancellation: a client that goes away cancels its request); the sim engine it routes to; a project
with a key."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from llmgw.auth.keys import hash_secret, new_secret, visible_prefix
from llmgw.simengine import SimOptions, start


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    """Its runner (`cleanup()` stops it, writing what is buffered) and the base URL the openai SDK takes (…/v1)."""
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/v1"


@contextlib.asynccontextmanager
async def sim_engine(*models: str, ttft: float = 0.0) -> AsyncIterator:
    """The sim engine on a free port of 127.0.0.1 serving MODELS, taking `ttft` seconds to a first token and no
    time for the others."""
    running = await start(SimOptions(models=list(models), ttft=ttft, prefill_per_token=0.0, tpot=0.0, port=0),
                          shutdown_timeout=0.5)
    try:
        yield running
    finally:
        await running.close()


async def project_key(store, project: str, key: str, **key_fields):
    """Org acme's project PROJECT and a key named KEY for it (`key_fields`: allowed_models=…): (project, key,
    its secret)."""
    org = await store.create_org("acme")
    made = await store.create_project(org.id, project)
    secret = new_secret()
    row = await store.create_key(key_hash=hash_secret(secret), prefix=visible_prefix(secret), name=key,
                                 project_id=made.id, **key_fields)
    return made, row, secret
