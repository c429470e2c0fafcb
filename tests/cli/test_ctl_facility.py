"""`llmgw ctl facility`: list domains, hold and release them, through the admin API."""

from __future__ import annotations

import attrs
import pytest
from ctl_live import ctl_against, ok, ok_json, refused

from llmgw.admin.testing import FakeCluster, gpu_node


@pytest.fixture
def live(tmp_path, monkeypatch):
    racked = attrs.evolve(gpu_node("gpu01"), labels={"llmgw.io/rack": "r12-07", "llmgw.io/pdu": "r12-07-a"})
    with ctl_against(tmp_path, monkeypatch, cluster=FakeCluster([racked, gpu_node("gpu02")])) as server:
        yield server


def test_hold_list_and_release_a_rack(capsys, live):
    assert ok(capsys, "facility", "hold", "rack:r12-07", "--reason", "PDU swap") == \
        "rack:r12-07: held until released (PDU swap)\n"
    out = ok(capsys, "facility")
    assert "pdu:r12-07-a  gpu01" in out and "rack:r12-07   gpu01" in out
    assert "HOLD" in out and "PDU swap" in out
    hold = ok_json(capsys, "facility", "hold", "card:gpu02:1", "--reason", "fan", "--until", "4h")
    assert hold["domain"] == "card:gpu02:1" and hold["until"].endswith("+00:00")
    assert ok(capsys, "facility", "release", "card:gpu02:1") == "card:gpu02:1: released\n"
    assert refused(capsys, "facility", "release", "card:gpu02:1").startswith("card:gpu02:1 is not held")


def test_a_wrong_domain_or_end_is_refused_naming_it(capsys, live):
    assert "(none)" not in ok(capsys, "facility")
    assert "domain" in refused(capsys, "facility", "hold", "shelf:3", "--reason", "x")
    assert "is not a time" in refused(capsys, "facility", "hold", "rack:r1", "--reason", "x", "--until", "soon")
    assert [c[0] for c in live.cluster.calls] == []
