"""GET /nodes/{node}/logs: the last lines of a node's log, each with its level; what is refused, and why."""

from __future__ import annotations

import attrs

from llmgw.admin.testing import FakeCluster, gpu_node

LOG = [
    'ts=2025-03-10T12:00:00.000Z level=info logger=llmgw.agent msg="agent started"',
    "2025-03-10 12:00:01,002 WARNING llmgw.agent: gpu 1 runs hot",
    '{"ts": "2025-03-10T12:00:02Z", "level": "error", "msg": "shard s1 failed"}',
    "a line that says nothing of its level",
]


async def test_a_nodes_agent_log_comes_with_each_lines_level(make_admin):
    cluster = FakeCluster(nodes=[gpu_node("gpu-a-01")])
    cluster.logs[("gpu-a-01", "")] = list(LOG)
    cluster.logs[("gpu-a-01", "qwen-0001")] = ["INFO 03-10 12:00:00 [api_server.py:1] up", "ERROR 03-10 oom",
                                                "  File \"x.py\", line 1"]
    admin = await make_admin(cluster)

    answer = await admin.call("GET", "/nodes/gpu-a-01/logs")
    assert answer["node"] == "gpu-a-01" and answer["replica"] == ""
    assert [(line["level"], line["text"]) for line in answer["lines"]] == [
        ("info", LOG[0]), ("warning", LOG[1]), ("error", LOG[2]), ("", LOG[3])]

    last = await admin.call("GET", "/nodes/gpu-a-01/logs", params={"lines": "2"})
    assert [line["text"] for line in last["lines"]] == LOG[-2:]

    engine = await admin.call("GET", "/nodes/gpu-a-01/logs", params={"replica": "qwen-0001", "lines": "5000"})
    assert engine["replica"] == "qwen-0001"
    assert [line["level"] for line in engine["lines"]] == ["info", "error", "error"]  # the frame is the error's


async def test_refusals_name_the_node_or_the_field(make_admin):
    cluster = FakeCluster(nodes=[gpu_node("gpu-a-01"), attrs.evolve(gpu_node("gpu-b-01"), state="disconnected")])
    admin = await make_admin(cluster)

    assert "gpu-z" in await admin.refused("GET", "/nodes/gpu-z/logs", status=404)
    for lines in ("0", "5001", "-3"):
        error = await admin.refused("GET", "/nodes/gpu-a-01/logs", params={"lines": lines}, status=400)
        assert error == f"lines: between 1 and 5000, got {lines}"
    error = await admin.refused("GET", "/nodes/gpu-a-01/logs", params={"lines": "many"}, status=400)
    assert error.startswith("query: lines: expected a whole number")
    error = await admin.refused("GET", "/nodes/gpu-a-01/logs", params={"replica": "../../etc/passwd"}, status=400)
    assert error.startswith("replica: '../../etc/passwd' is not a replica id")
    error = await admin.refused("GET", "/nodes/gpu-a-01/logs", params={"since": "1h"}, status=400)
    assert "unknown parameter 'since'" in error
    error = await admin.refused("GET", "/nodes/gpu-b-01/logs", status=409)
    assert "gpu-b-01's agent is not connected" in error


async def test_reading_a_log_is_no_change_and_writes_no_audit_event(make_admin, store):
    admin = await make_admin(FakeCluster())
    await admin.call("GET", "/nodes/gpu-a-01/logs")
    assert await store.list_audit() == []
