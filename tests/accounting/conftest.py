"""Fixtures for the accounting tests: the store suite's ``store`` (SQLite and
PostgreSQL), and hand-moved clocks."""

from __future__ import annotations

import pytest
from store.conftest import FakeClock, clock, store, store_dsn  # noqa: F401


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
