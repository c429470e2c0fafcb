"""Two control planes on one store, in one process: what a new leader does on taking the lease with what its
former leader left behind."""

from __future__ import annotations

import asyncio

import pytest

from llmgw.control.service import ControlPlane
from llmgw.router.replicas import ReplicaSet
from llmgw.store import open_store
from tests.control.conftest import ENGINES
from tests.control.test_service import server_config

CHAT = {"name": "chat", "engine": "sim", "source": "acme/chat@v1", "profiles": [{"name": "cpu"}],
        "scaling": {"min": 0, "max": 1}}


async def _until(check, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not within the time"
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_an_update_canary_no_job_follows_is_taken_out_by_the_next_leader(tmp_path):
    """The former leader stopped between starting an update's canary and writing its job: the next leader
    takes the canary out, so the model does not run two revisions for nothing; a canary of its own, not an
    update's, stays."""
    dsn = f"sqlite:///{tmp_path}/store.db"
    stores = [await open_store(dsn), await open_store(dsn)]
    first = ControlPlane(server_config(), stores[0], ReplicaSet(), engines=ENGINES, holder="cp-1", standby_hold=0.3)
    second = ControlPlane(server_config(), stores[1], ReplicaSet(), engines=ENGINES, holder="cp-2",
                          standby_hold=0.3)
    try:
        await first.start()
        assert await first.leadership.wait_leading(3)
        await second.start()
        await first.add_model(CHAT, actor="ann")
        await first.add_model({**CHAT, "name": "other", "source": "acme/other@v1"}, actor="ann")
        chat, other = first.catalog.get("chat"), first.catalog.get("other")
        await first.rollouts._start_canary(chat, "acme/chat@v2", 0.0, 1, "ann", for_update=True)
        await first.rollouts._start_canary(other, "acme/other@v2", 10.0, 1, "ann", for_update=False)
        assert sorted(first.rollouts.state().canaries) == ["chat", "other"]

        await first.stop()  # no job was written for chat's canary
        assert await second.leadership.wait_leading(5)
        await _until(lambda: "other-canary" in second.catalog and "chat-canary" not in second.catalog)
        assert sorted(second.rollouts.state().canaries) == ["other"]
        assert "other-canary" in second.catalog
        assert second.catalog.get("chat").config.source == "acme/chat@v1"
    finally:
        for plane in (first, second):
            await plane.stop()
        for store in stores:
            await store.close()
