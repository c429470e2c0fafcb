"""Fixtures for the key and tenancy tests.

``store`` (and ``store_dsn``, ``clock``) are the store suite's own: each test
that takes ``store`` runs against SQLite and PostgreSQL. ``sqlite_store`` is
for tests whose subject is not the store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

# pytest imports tests/store/conftest.py as `store.conftest` (tests/ has no
# __init__.py); importing it under that name shares its fixtures, not a copy.
from store.conftest import FakeClock, clock, store, store_dsn  # noqa: F401

from llmgw.auth.tenancy import Tenancy
from llmgw.store import Store, open_store


class Ticker:
    """A monotonic clock moved by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def ticker() -> Ticker:
    return Ticker()


@pytest.fixture
async def sqlite_store(tmp_path, clock: FakeClock) -> AsyncIterator[Store]:  # noqa: F811
    s = await open_store(f"sqlite:///{tmp_path}/only.db", clock=clock)
    try:
        yield s
    finally:
        await s.close()


def tenancy_for(on: Store, time: FakeClock, **kw) -> Tenancy:
    """Tenancy on a store, at the store's clock, as "tester" unless ``actor`` says otherwise."""
    return Tenancy(on, actor=kw.pop("actor", "tester"), clock=time, **kw)
