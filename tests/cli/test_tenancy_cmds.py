"""`llmgw org`, `llmgw users` and `llmgw keys`, through the command line."""

from __future__ import annotations

import asyncio
import json

import pytest
from ctl_live import run
from ctl_live import run_ok as ok
from ctl_live import run_refused as refused

from llmgw.auth.keys import KeyResolver
from llmgw.cli import store_access
from llmgw.store import open_store


@pytest.fixture
def store_args(tmp_path) -> list[str]:
    return ["--store", f"sqlite:///{tmp_path}/store.db"]


def ok_json(capsys, *argv: str):
    return json.loads(ok(capsys, *argv, "--json"))


def resolve(dsn: str, secret: str):
    async def go():
        store = await open_store(dsn)
        try:
            return await KeyResolver(store).resolve(secret)
        finally:
            await store.close()

    return asyncio.run(go())


def test_a_tree_people_and_a_key_from_the_command_line(capsys, store_args) -> None:
    S = store_args
    assert ok_json(capsys, "org", "create", "acme", *S)["kind"] == "org"
    ok(capsys, "org", "create", "acme/search", *S)
    project = ok_json(capsys, "org", "create", "acme/search/indexer", *S)
    assert (project["kind"], project["path"]) == ("project", "acme/search/indexer")
    assert "created project acme/billing" in ok(capsys, "org", "create", "acme/billing", "--project", *S)
    assert [n["path"] for n in ok_json(capsys, "org", "list", *S)] == [
        "acme", "acme/search", "acme/search/indexer", "acme/billing"]

    ann = ok_json(capsys, "users", "create", "ann@example.com", "--name", "Ann", *S)
    assert (ann["email"], ann["state"], ann["has_password"]) == ("ann@example.com", "active", False)
    assert "password_hash" not in ann
    ok(capsys, "users", "add-member", "ann@example.com", "acme/search", *S)
    ok(capsys, "users", "role", "ann@example.com", "viewer", *S)
    listed = ok_json(capsys, "users", "list", *S)
    assert [(u["email"], u["role"]) for u in listed] == [("ann@example.com", "viewer")]
    shown = ok_json(capsys, "org", "show", "acme/search", *S)
    assert shown["members"] == [{"email": "ann@example.com", "user_id": ann["id"], "role": "member"}]
    assert [c["path"] for c in shown["children"]] == ["acme/search/indexer"]

    # A key: the secret once, in the object with --json ...
    key = ok_json(capsys, "keys", "create", "--project", "acme/search/indexer", "--user", "ann@example.com",
                  "--name", "laptop", "--ttl", "720h", "--band", "gold", "--models", "a,b", *S)
    secret = key["secret"]
    assert secret.startswith("llmgw-") and key["prefix"] == secret[:12] and "not be shown again" in key["note"]
    assert (key["kind"], key["name"], key["priority_band"], key["allowed_models"]) == ("member", "laptop", "gold", ["a", "b"])
    assert "key_hash" not in key
    p = resolve(S[1], secret)
    assert (p.key_id, p.kind, p.band, p.allowed_models) == (key["id"], "member", "gold", {"a", "b"})

    # ... and never again.
    for argv in (("keys", "list"), ("keys", "list", "--all"), ("keys", "show", key["id"]),
                 ("keys", "list", "--json"), ("keys", "show", key["prefix"], "--json")):
        assert secret not in ok(capsys, *argv, *S)
    listed = ok_json(capsys, "keys", "list", "--project", "acme/search/indexer", *S)
    assert [(k["id"], k["state"]) for k in listed] == [(key["id"], "active")]

    # Without --json: the secret on its own line, and the warning.
    out = ok(capsys, "keys", "create", "--project", "acme/billing", *S)
    secret_line = [line.strip() for line in out.splitlines() if line.strip().startswith("llmgw-")]
    assert len(secret_line) == 1 and len(secret_line[0]) == 46
    assert "will not be shown again" in out

    ok(capsys, "users", "suspend", "ann@example.com", *S)
    assert ok_json(capsys, "users", "list", "--state", "suspended", *S)[0]["email"] == "ann@example.com"
    ok(capsys, "users", "activate", "ann@example.com", *S)
    ok(capsys, "users", "remove-member", "ann@example.com", "acme/search", *S)


def test_limits_revoke_and_rotate(capsys, store_args) -> None:
    S = store_args
    ok(capsys, "org", "create", "acme", *S)
    ok(capsys, "org", "create", "acme/app", "--project", *S)
    key = ok_json(capsys, "keys", "create", "--project", "acme/app", *S)

    shown = ok_json(capsys, "keys", "limits", "project:acme/app", "--rpm", "60", "--budget", "12.50",
                    "--period", "day", *S)
    assert shown["limits"]["rpm"] == 60 and shown["limits"]["budget_micros"] == 12_500_000
    out = ok(capsys, "keys", "limits", "acme/app", "--tpm", "5000", *S)
    assert "rpm: 60 requests a minute" in out and "tpm: 5000 tokens a minute" in out
    assert "budget: 12.50 a day (UTC)" in out
    assert ok_json(capsys, "keys", "limits", "acme/app", "--rpm", "off", *S)["limits"]["rpm"] is None
    ok(capsys, "keys", "limits", f"key:{key['id']}", "--models", "a", *S)
    assert "(none)" in ok(capsys, "keys", "limits", "acme", *S)
    detail = ok_json(capsys, "keys", "show", key["id"], *S)
    assert [(lim["scope_kind"], lim["label"]) for lim in detail["limits"]] == [
        ("project", "acme/app"), ("key", key["id"])]
    assert ok_json(capsys, "keys", "limits", "acme/app", "--clear", *S)["limits"] is None

    rotated = ok_json(capsys, "keys", "rotate", key["id"], "--overlap", "48h", *S)
    assert rotated["secret"] != key["secret"] and rotated["replaces"]["id"] == key["id"]
    assert rotated["replaces"]["expires_at"] is not None
    assert resolve(S[1], key["secret"]).key_id == key["id"]  # still works during the overlap
    assert resolve(S[1], rotated["secret"]).allowed_models == {"a"}  # the key's limits came along
    revoked = ok_json(capsys, "keys", "revoke", rotated["prefix"], *S)
    assert revoked["state"] == "revoked"
    assert [k["id"] for k in ok_json(capsys, "keys", "list", *S)] == [key["id"]]
    assert len(ok_json(capsys, "keys", "list", "--all", *S)) == 2


def test_bad_input_is_one_line_and_exit_2(capsys, store_args, tmp_path) -> None:
    S = store_args
    ok(capsys, "org", "create", "acme", *S)
    assert "no project named 'nope'" in refused(capsys, "keys", "create", "--project", "acme/nope", *S)
    assert "needs a project" in refused(capsys, "keys", "create", *S)
    assert "--ttl: expected a duration" in refused(capsys, "keys", "create", "--user", "x@y.z", "--ttl", "soon", *S)
    assert "--rpm: expected a whole number" in refused(capsys, "keys", "limits", "acme", "--rpm", "many", *S)
    assert "--budget: expected an amount" in refused(capsys, "keys", "limits", "acme", "--budget", "lots", *S)
    assert "'acme'" in refused(capsys, "org", "create", "acme", *S)
    assert "email" in refused(capsys, "users", "create", "not-an-email", *S)
    assert "no key with id or prefix" in refused(capsys, "keys", "revoke", "key-nope", *S)
    code, _, err = run(capsys, "keys")
    assert code == 2 and "name a subcommand" in err
    code, _, err = run(capsys, "keys", "list", "--store", "mysql://db/llmgw")
    assert code == 2 and "unknown kind 'mysql'" in err


def test_where_the_store_comes_from(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("LLMGW_STORE", raising=False)
    a, c = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/c.db"
    config = tmp_path / "server.yaml"
    config.write_text(f"store:\n  dsn: {tmp_path}/b.db\nauth:\n  max_key_ttl: 24h\n")
    ok(capsys, "org", "create", "from-flag", "--store", a)
    ok(capsys, "org", "create", "from-config", "--config", str(config))
    monkeypatch.setenv("LLMGW_STORE", c)
    ok(capsys, "org", "create", "from-env")
    assert [n["path"] for n in ok_json(capsys, "org", "list", "--store", a, "--config", str(config))] == ["from-flag"]
    assert [n["path"] for n in ok_json(capsys, "org", "list", "--config", str(config))] == ["from-config"]
    assert [n["path"] for n in ok_json(capsys, "org", "list")] == ["from-env"]
    # The config's limits apply: auth.max_key_ttl caps --ttl.
    ok(capsys, "org", "create", "from-config/app", "--project", "--config", str(config))
    assert "auth.max_key_ttl" in refused(capsys, "keys", "create", "--project", "from-config/app",
                                         "--ttl", "48h", "--config", str(config))
    monkeypatch.delenv("LLMGW_STORE")
    monkeypatch.setattr(store_access, "default_dsn", lambda: str(tmp_path / "missing.db"))
    assert "no store: give --store DSN" in refused(capsys, "org", "list")
    assert not (tmp_path / "missing.db").exists()


def test_the_actor_is_in_the_audit_log(capsys, store_args) -> None:
    ok(capsys, "org", "create", "acme", "--actor", "alice", *store_args)

    async def audit():
        store = await open_store(store_args[1])
        try:
            return await store.list_audit()
        finally:
            await store.close()

    [event] = asyncio.run(audit())
    assert (event.actor, event.action, event.detail["path"]) == ("alice", "org.create", "acme")


def test_approve_lets_a_waiting_person_in_and_refuses_anyone_else(capsys, store_args) -> None:
    ok(capsys, "users", "create", "ayse@example.com", "--pending", *store_args)
    assert ok_json(capsys, "users", "approve", "ayse@example.com", *store_args)["state"] == "active"
    message = refused(capsys, "users", "approve", "ayse@example.com", *store_args)
    assert "not waiting for approval" in message and "nothing changed" in message
