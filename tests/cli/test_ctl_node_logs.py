"""`llmgw ctl node logs`: a node's agent log or a replica's engine log, coloured only on a terminal."""

from __future__ import annotations

import json
import sys

import attrs
import pytest
from ctl_live import ctl, ctl_against

from llmgw.admin.testing import FakeCluster, gpu_node

LOG = [
    'ts=2025-03-10T12:00:00.000Z level=info logger=llmgw.agent msg="agent started"',
    'ts=2025-03-10T12:00:01.000Z level=warning logger=llmgw.agent msg="gpu 1 runs hot"',
    'ts=2025-03-10T12:00:02.000Z level=error logger=llmgw.agent msg="shard s1 failed to start"',
]
RED, YELLOW, RESET = "\x1b[31m", "\x1b[33m", "\x1b[0m"


@pytest.fixture
def live(tmp_path, monkeypatch):
    cluster = FakeCluster(nodes=[gpu_node("gpu-a-01"), attrs.evolve(gpu_node("gpu-b-01"), state="disconnected")])
    cluster.logs[("gpu-a-01", "")] = list(LOG)
    cluster.logs[("gpu-a-01", "qwen-0001")] = ["INFO 03-10 12:00:00 [api_server.py:1] up"]
    with ctl_against(tmp_path, monkeypatch, cluster=cluster) as server:
        monkeypatch.delenv("NO_COLOR", raising=False)
        yield server


def test_the_lines_are_printed_oldest_first_without_colour_when_not_a_terminal(capsys, live):
    code, out, err = ctl(capsys, "node", "logs", "gpu-a-01")
    assert code == 0, err
    assert out.splitlines() == LOG and "\x1b[" not in out
    code, out, _ = ctl(capsys, "node", "logs", "gpu-a-01", "--lines", "1")
    assert out.splitlines() == LOG[-1:]
    code, out, _ = ctl(capsys, "node", "logs", "gpu-a-01", "--replica", "qwen-0001")
    assert out.splitlines() == ["INFO 03-10 12:00:00 [api_server.py:1] up"]


def test_errors_are_red_and_warnings_yellow_on_a_terminal(capsys, live, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, _ = ctl(capsys, "node", "logs", "gpu-a-01")
    assert code == 0
    assert out.splitlines() == [LOG[0], f"{YELLOW}{LOG[1]}{RESET}", f"{RED}{LOG[2]}{RESET}"]
    monkeypatch.setenv("NO_COLOR", "1")
    code, out, _ = ctl(capsys, "node", "logs", "gpu-a-01")
    assert out.splitlines() == LOG


def test_json_has_each_lines_level(capsys, live):
    code, out, _ = ctl(capsys, "node", "logs", "gpu-a-01", "--json")
    assert code == 0
    answer = json.loads(out)
    assert answer["node"] == "gpu-a-01" and answer["replica"] == ""
    assert [line["level"] for line in answer["lines"]] == ["info", "warning", "error"]


def test_refusals_are_printed_word_for_word(capsys, live):
    code, out, err = ctl(capsys, "node", "logs", "gpu-z")
    assert code == 2 and out == "" and "no node called 'gpu-z'" in err
    code, _, err = ctl(capsys, "node", "logs", "gpu-a-01", "--lines", "0")
    assert code == 2 and err.strip() == "lines: between 1 and 5000, got 0"
    code, _, err = ctl(capsys, "node", "logs", "gpu-b-01")
    assert code == 2 and "gpu-b-01's agent is not connected" in err


def test_an_empty_log_says_so_on_stderr(capsys, live):
    live.cluster.logs[("gpu-a-01", "")] = []
    code, out, err = ctl(capsys, "node", "logs", "gpu-a-01")
    assert code == 0 and out == "" and "gpu-a-01: the agent's log is empty" in err
