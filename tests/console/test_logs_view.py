"""Logs: the nodes to choose from, one node's agent log newest at the bottom, errors and warnings coloured."""

from __future__ import annotations

import asyncio

import attrs
import pytest
from console_screen import attr_of, keys, open_view, screen

from llmgw.admin.testing import FakeCluster, LiveAdmin, gpu_node
from llmgw.console.app import ConsoleApp
from llmgw.console.model import AdminApi

AGENT_LOG = [
    'ts=2025-03-10T12:00:00.000Z level=info logger=llmgw.agent msg="agent started"',
    'ts=2025-03-10T12:00:01.000Z level=warning logger=llmgw.agent msg="gpu 1 runs hot"',
    'ts=2025-03-10T12:00:02.000Z level=error logger=llmgw.agent msg="shard s1 failed to start"',
    *(f'ts=2025-03-10T12:01:{i:02d}.000Z level=info logger=llmgw.agent msg="heartbeat {i}"' for i in range(60)),
    'ts=2025-03-10T12:02:00.000Z level=info logger=llmgw.agent msg="the newest line"',
]


@pytest.fixture
def live(tmp_path):
    cluster = FakeCluster(nodes=[gpu_node("gpu-a-01"), gpu_node("gpu-a-02"),
                                 attrs.evolve(gpu_node("gpu-b-01"), state="disconnected")])
    cluster.logs[("gpu-a-01", "")] = list(AGENT_LOG)
    with LiveAdmin(tmp_path, cluster=cluster) as server:
        yield server


@pytest.fixture
async def app(live):
    console = ConsoleApp(AdminApi(live.url, live.TOKEN, "ann"), machine="cp-test")
    await console.model.refresh_now()
    await console.settle()
    yield console
    await console.settle()
    await console.api.close()


async def test_the_nodes_are_listed_and_enter_shows_one_agent_log_newest_at_the_bottom(app):
    await open_view(app, "Logs")
    text = screen(app)
    assert "Logs: each node's agent log" in text and "llmgw ctl node logs NODE" in text
    assert "gpu-a-01  ready" in text and "gpu-a-02  ready" in text and "gpu-b-01  disconnected" in text
    assert text.splitlines()[-1].startswith(" Enter its agent's log  ↑↓ row  ←/Esc back")

    await keys(app, "enter")
    text = screen(app)
    body = [line[25:] for line in text.splitlines()[1:-2]]
    assert "gpu-a-01's agent log · ready · 64 lines, newest last · 1 error · 1 warning" in text
    # Scrolled to the end: the newest line is the panel's last, the oldest is off the screen.
    assert 'msg="the newest line"' in [line for line in body if line.strip()][-1]
    assert "agent started" not in text
    assert text.splitlines()[-1] == (" ↑↓ PgUp/PgDn scroll  g/G oldest/newest  R read again  ←/Esc the nodes"
                                     "  ? help  Q leave")

    await keys(app, "g")
    text = screen(app)
    assert "agent started" in text and "the newest line" not in text
    assert attr_of(app, "shard s1 failed to start") == "error"
    assert attr_of(app, "gpu 1 runs hot") == "warn"
    assert attr_of(app, "agent started") is None
    await keys(app, "G")
    assert "the newest line" in screen(app)

    await keys(app, "left")
    text = screen(app)
    assert "Logs: each node's agent log" in text and "gpu-a-02  ready" in text
    assert app.in_panel and app.model.logs_of is None
    await keys(app, "left")
    assert not app.in_panel


async def test_the_log_is_read_again_while_shown_and_follows_the_end(app, live):
    await open_view(app, "Logs")
    await keys(app, "enter")
    assert "heartbeat 59" in screen(app)
    live.cluster.logs[("gpu-a-01", "")] = [*AGENT_LOG[1:], 'level=error msg="a new failure"']
    app._refresh_watched()  # what the watch loop does every 3 seconds
    await app.settle()
    text = screen(app)
    assert 'level=error msg="a new failure"' in text and "2 errors" in text
    assert attr_of(app, "a new failure") == "error"

    # Scrolled back to the start, a new read does not pull the reader to the end.
    await keys(app, "g")
    live.cluster.logs[("gpu-a-01", "")].append("WARNING 03-10 12:03:00 [engine.py:1] slow")
    await keys(app, "r")
    text = screen(app)
    assert "gpu 1 runs hot" in text and "slow" not in text and "2 warnings" in text


async def test_a_node_whose_agent_is_not_connected_says_why(app):
    await open_view(app, "Logs")
    assert app.view.table.focus_key("gpu-b-01")
    await keys(app, "enter")
    text = screen(app)
    assert "Could not read gpu-b-01's log: gpu-b-01's agent is not connected to the leader now" in text
    assert attr_of(app, "Could not read gpu-b-01's log") == "error"
    assert "logs: gpu-b-01's agent is not connected" in text.splitlines()[-2]
    # Another node's log shows none of it.
    await keys(app, "left")
    assert app.view.table.focus_key("gpu-a-02")
    await keys(app, "enter")
    text = screen(app)
    assert "gpu-a-02's agent log · ready · 2 lines" in text and "registered with the control" in text
    assert "not connected" not in text


async def test_reading_the_log_never_blocks_the_screen(app, live):
    real = live.cluster.node_logs

    async def slow(node_id, **kw):
        await asyncio.sleep(0.5)
        return await real(node_id, **kw)

    live.cluster.node_logs = slow
    await open_view(app, "Logs")
    app.press("enter")  # returns at once: the read runs as a task
    assert "Reading gpu-a-01's agent log…" in screen(app)
    await app.settle()
    assert "the newest line" in screen(app)
