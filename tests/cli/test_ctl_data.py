"""`llmgw ctl users forget`, `ctl residency` and `ctl key-lifetime` against a live in-process admin API."""

from __future__ import annotations

import pytest
from ctl_live import ctl_against, ok, ok_json, refused


@pytest.fixture
def live(tmp_path, monkeypatch):
    with ctl_against(tmp_path, monkeypatch) as server:
        yield server


def _tree(capsys) -> None:
    for path in ("acme", "acme/ml", "acme/ml/train"):
        ok(capsys, "orgs", "create", path)


def test_forget_through_ctl(capsys, live):
    _tree(capsys)
    ok(capsys, "users", "create", "finn@example.com", "--name", "Finn Roe")
    ok(capsys, "users", "add-member", "finn@example.com", "acme/ml")
    assert "give --yes" in refused(capsys, "users", "forget", "finn@example.com")
    out = ok(capsys, "users", "forget", "finn@example.com", "--yes")
    assert out.startswith("forgot finn@example.com; their usage is kept as forgotten-")
    assert "  memberships: 1" in out
    again = ok_json(capsys, "users", "forget", "finn@example.com", "--yes")
    assert (again["forgotten"], again["nothing_left"]) == (False, True)
    events = ok_json(capsys, "audit", "--action", "users.forget")["events"]
    assert len(events) == 2 and all("finn" not in str(e) for e in events)


def test_residency_and_key_lifetime_through_ctl(capsys, live):
    _tree(capsys)
    assert ok(capsys, "residency", "project:acme/ml/train") == "project:acme/ml/train: anywhere its models are served\n"
    assert "in the cluster only" in ok(capsys, "residency", "org:acme", "--in-cluster")
    key = ok_json(capsys, "keys", "create", "--project", "acme/ml/train")
    assert "by a rule above it" in ok(capsys, "residency", f"key:{key['key']['id']}")
    assert "anywhere" in ok(capsys, "residency", "org:acme", "--anywhere")

    assert ok(capsys, "key-lifetime", "acme", "30d") == (
        "org:acme: cap 720h; keys made here live at most 720h (set by org acme)\n")
    assert "longer than org acme allows" in refused(capsys, "key-lifetime", "acme/ml", "40d")
    shown = ok_json(capsys, "key-lifetime", "acme/ml/train")
    assert (shown["max_key_ttl_s"], shown["in_force_s"]) == (None, 30 * 86400)
    assert "set by org acme" in refused(capsys, "keys", "create", "--project", "acme/ml/train", "--ttl", "31d")
    assert "until revoked" in ok(capsys, "key-lifetime", "acme", "off")
