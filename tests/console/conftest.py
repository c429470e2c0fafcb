"""The console against a live admin API (LiveAdmin, a FakeCluster of two GPU nodes and one model).

The helpers that press keys and read the screen are in console_screen.py.
"""

from __future__ import annotations

import pytest

from llmgw.admin.testing import FakeCluster, LiveAdmin, gpu_node
from llmgw.console.app import ConsoleApp
from llmgw.console.model import AdminApi

QWEN = {"name": "qwen-small", "owner": "team:acme/ml", "profiles": [{"engine": "sim", "gpus": 1}],
        "scaling": {"min": 1, "max": 2}}


@pytest.fixture
def live(tmp_path):
    cluster = FakeCluster(nodes=[gpu_node("gpu-a-01"), gpu_node("gpu-a-02")], models=[QWEN])
    with LiveAdmin(tmp_path, cluster=cluster) as server:
        yield server


@pytest.fixture
async def app(live):
    console = ConsoleApp(AdminApi(live.url, live.TOKEN, "ann"), machine="cp-test")
    await console.model.refresh_now()
    await console.settle()
    console.update_lines()
    yield console
    await console.stop_following()
    await console.settle()
    await console.api.close()
