"""Fixtures for the adapters' tests: sim engines in process, adapter files, the agent tests' helpers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llmgw.simengine import SimOptions, start

# The slow tests run a real agent the way tests/agent's do (make_agent, kill_shards).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))

FAST = dict(ttft=0.002, prefill_per_token=0.0, tpot=0.0, port=0)


@pytest.fixture
async def sim():
    """A factory: `await sim(**options)` starts an engine, closed after the test."""
    running = []

    async def make(**overrides):
        engine = await start(SimOptions(**{**FAST, **overrides}), shutdown_timeout=0.5)
        running.append(engine)
        return engine

    yield make
    for engine in running:
        await engine.close()

