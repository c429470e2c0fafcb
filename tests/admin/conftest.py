"""Fixtures for the admin API's tests: an app on a SQLite store, with or without a fake cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
import pytest

from llmgw.admin import make_admin_app
from llmgw.admin.testing import FakeCluster
from llmgw.config.server import ServerConfig
from llmgw.store import Store, open_store

TOKEN = "s3cret-admin-token-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {**AUTH, "Content-Type": "application/json"}
QWEN = {"name": "qwen-small", "owner": "team:acme/ml",
        "profiles": [{"name": "gpu", "engine": "sim", "gpus": 1}], "scaling": {"min": 1, "max": 2}}


@attrs.define
class Admin:
    client: Any
    store: Store
    cluster: FakeCluster | None

    async def call(self, method: str, path: str, body: Any = None, *, headers: dict | None = None,
                   status: int | None = 200, **kw: Any) -> Any:
        hdrs = dict(JSON if headers is None else headers)
        if body is not None:
            kw["json"] = body
        elif method != "GET" and "data" not in kw:
            kw["data"] = b"{}"
        resp = await self.client.request(method, "/api/v1" + path, headers=hdrs, **kw)
        text = await resp.text()
        if status is not None:
            assert resp.status == status, f"{method} {path}: {resp.status} {text}"
        return (await resp.json()) if resp.content_type == "application/json" else text

    async def refused(self, method: str, path: str, body: Any = None, *, status: int, **kw: Any) -> str:
        answer = await self.call(method, path, body, status=status, **kw)
        assert set(answer) <= {"error", "problems"}, answer
        return answer["error"]


@pytest.fixture
async def store(tmp_path) -> AsyncIterator[Store]:
    s = await open_store(f"sqlite:///{tmp_path}/admin.db")
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def make_admin(aiohttp_client, store) -> Callable[..., Awaitable[Admin]]:
    async def make(cluster: FakeCluster | None = None, config: ServerConfig | None = None, **kw: Any) -> Admin:
        app = make_admin_app(config or ServerConfig(), store, cluster=cluster, token=TOKEN, **kw)
        return Admin(await aiohttp_client(app), store, cluster)

    return make


@pytest.fixture
async def admin(make_admin) -> Admin:
    """An admin API steering a fake cluster of one node and one model."""
    return await make_admin(FakeCluster(models=[QWEN]))


@pytest.fixture
async def bare(make_admin) -> Admin:
    """An admin API with no cluster."""
    return await make_admin(None)
