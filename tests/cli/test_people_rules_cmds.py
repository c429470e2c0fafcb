"""`llmgw users forget`, `llmgw keys residency` and `llmgw keys lifetime`, through the command line."""

from __future__ import annotations

import asyncio
import json

import pytest
from ctl_live import run_ok as ok
from ctl_live import run_refused as refused

from llmgw.auth.keys import KeyResolver
from llmgw.auth.principal import AuthError
from llmgw.compat import fromisoformat
from llmgw.store import open_store


@pytest.fixture
def S(tmp_path) -> list[str]:
    return ["--store", f"sqlite:///{tmp_path}/store.db"]


def ok_json(capsys, *argv: str):
    return json.loads(ok(capsys, *argv, "--json"))


def principal_of(dsn: str, secret: str):
    async def go():
        store = await open_store(dsn)
        try:
            return await KeyResolver(store).resolve(secret)
        finally:
            await store.close()

    return asyncio.run(go())


def _tree(capsys, S) -> None:
    for path in ("acme", "acme/ml", "acme/ml/train"):
        ok(capsys, "org", "create", path, *S)


def test_forget_asks_for_yes_reports_what_went_and_then_that_nothing_is_left(capsys, S) -> None:
    _tree(capsys, S)
    ok(capsys, "users", "create", "dana@example.com", "--name", "Dana Vale", *S)
    ok(capsys, "users", "add-member", "dana@example.com", "acme/ml/train", *S)
    key = ok_json(capsys, "keys", "create", "--user", "dana@example.com", *S)

    assert "give --yes" in refused(capsys, "users", "forget", "dana@example.com", *S)
    assert [u["email"] for u in ok_json(capsys, "users", "list", *S)] == ["dana@example.com"]

    out = ok(capsys, "users", "forget", "dana@example.com", "--yes", *S)
    assert out.startswith("forgot dana@example.com; their usage is kept as forgotten-")
    assert "  keys revoked: 1" in out and "  memberships: 1" in out
    with pytest.raises(AuthError, match="revoked"):
        principal_of(S[1], key["secret"])
    (listed,) = ok_json(capsys, "users", "list", *S)
    assert listed["email"].endswith("@forgotten.invalid") and listed["name"].startswith("forgotten-")

    again = ok(capsys, "users", "forget", "dana@example.com", "--yes", *S)
    assert "nothing is kept about dana@example.com" in again
    by_id = ok_json(capsys, "users", "forget", listed["id"], "--yes", *S)
    assert by_id == {"forgotten": False, "nothing_left": True, "pseudonym": listed["name"]}


def test_residency_is_shown_set_and_lifted_and_reaches_the_key(capsys, S) -> None:
    _tree(capsys, S)
    key = ok_json(capsys, "keys", "create", "--project", "acme/ml/train", *S)
    assert principal_of(S[1], key["secret"]).in_cluster == ""
    assert "anywhere" in ok(capsys, "keys", "residency", key["id"], *S)

    shown = ok_json(capsys, "keys", "residency", "project:acme/ml/train", "--in-cluster", *S)
    assert (shown["scope"], shown["in_cluster"]) == ("project", True)
    assert principal_of(S[1], key["secret"]).in_cluster == "project"
    assert "by a rule above it" in ok(capsys, "keys", "residency", key["id"], *S)
    ok(capsys, "keys", "residency", "org:acme", "--in-cluster", *S)
    assert principal_of(S[1], key["secret"]).in_cluster == "org"

    ok(capsys, "keys", "residency", "acme", "--anywhere", *S)
    ok(capsys, "keys", "residency", "project:acme/ml/train", "--anywhere", *S)
    assert principal_of(S[1], key["secret"]).in_cluster == ""
    assert "not a team" in refused(capsys, "keys", "residency", "team:acme/ml", "--in-cluster", *S)


def test_lifetimes_narrow_down_the_tree_and_refuse_a_longer_key_naming_the_cap(capsys, S, tmp_path) -> None:
    _tree(capsys, S)
    ok(capsys, "org", "create", "acme/ops", "--project", *S)
    org = ok_json(capsys, "keys", "lifetime", "acme", "90d", *S)
    assert (org["max_key_ttl_s"], org["in_force_s"]) == (90 * 86400, 90 * 86400)
    assert "longer than org acme allows (2160h)" in refused(capsys, "keys", "lifetime", "acme/ml", "120d", *S)
    ok(capsys, "keys", "lifetime", "acme/ml", "30d", *S)
    shown = ok(capsys, "keys", "lifetime", "acme/ml/train", *S)
    assert "cap none of its own" in shown and "at most 720h (set by team acme/ml)" in shown

    refusal = refused(capsys, "keys", "create", "--project", "acme/ml/train", "--ttl", "40d", *S)
    assert refusal.endswith("960h is longer than a key may live here: at most 720h, set by team acme/ml")
    capped = ok_json(capsys, "keys", "create", "--project", "acme/ml/train", *S)  # no ttl: the narrowest cap
    other = ok_json(capsys, "keys", "create", "--project", "acme/ops", "--ttl", "60d", *S)
    assert capped["expires_at"] and other["expires_at"]
    span = fromisoformat(capped["expires_at"]) - fromisoformat(capped["created_at"])
    assert 29.9 < span.total_seconds() / 86400 <= 30

    # the server's own cap is above them all, with --config
    config = tmp_path / "server.yaml"
    config.write_text(f"store:\n  dsn: {S[1]}\nauth:\n  max_key_ttl: 7d\n")
    refusal = refused(capsys, "keys", "create", "--project", "acme/ops", "--ttl", "8d", "--config", str(config))
    assert "at most 168h, set by auth.max_key_ttl in server.yaml" in refusal
    ok(capsys, "keys", "lifetime", "acme/ml", "off", *S)
    assert "at most 2160h (set by org acme)" in ok(capsys, "keys", "lifetime", "acme/ml/train", *S)
