"""Every store test runs against both backends: ``store`` is parametrized
over SQLite (a file in tmp_path) and PostgreSQL (a fresh database on the
session's server)."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Iterator

import attrs
import pytest

from llmgw.store import Organization, Project, Store, Team, User, open_store

UTC = dt.UTC
START = dt.datetime(2025, 3, 10, 10, 30, tzinfo=UTC)


class FakeClock:
    """The store's clock, moved by hand."""

    def __init__(self, now: dt.datetime = START) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> dt.datetime:
        self.now += dt.timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["sqlite", "postgres"])
def store_dsn(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/store.db"
        return
    server = request.getfixturevalue("postgres_server")
    name = server.create_database()
    try:
        yield server.dsn(name)
    finally:
        server.drop_database(name)


@pytest.fixture
async def store(store_dsn: str, clock: FakeClock) -> AsyncIterator[Store]:
    s = await open_store(store_dsn, clock=clock)
    try:
        yield s
    finally:
        await s.close()


@attrs.frozen
class Tree:
    org: Organization
    team: Team
    project: Project
    user: User


@pytest.fixture
async def tree(store: Store) -> Tree:
    """Acme / ml / train, and Ann, a member of the project."""
    org = await store.create_org("Acme")
    team = await store.create_team(org.id, "ml")
    project = await store.create_project(org.id, "train", team.id)
    user = await store.create_user("ann@example.com", "Ann")
    await store.add_membership(user.id, "project", project.id)
    return Tree(org, team, project, user)
