"""Engines started in process on a free port, and clients for them."""

from __future__ import annotations

import aiohttp
import pytest

from llmgw.simengine import SimOptions, start

# Fast enough for a quick suite, slow enough to see order and waiting.
FAST = dict(ttft=0.005, prefill_per_token=0.0, tpot=0.0, port=0)


@pytest.fixture
async def sim():
    """A factory: `await sim(**options)` starts an engine, closed after the test."""
    running = []

    async def make(**overrides):
        options = SimOptions(**{**FAST, **overrides})
        engine = await start(options, shutdown_timeout=0.5)
        running.append(engine)
        return engine

    yield make
    for engine in running:
        await engine.close()


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session
