"""`llmgw keys routing`: a routing profile set on a key, a project or an organization, the narrowest winning."""

from __future__ import annotations

import asyncio
import json

import pytest
from ctl_live import run_ok as ok
from ctl_live import run_refused as refused

from llmgw.auth.keys import KeyResolver
from llmgw.store import open_store


def principal_of(dsn: str, secret: str):
    async def go():
        store = await open_store(dsn)
        try:
            return await KeyResolver(store).resolve(secret)
        finally:
            await store.close()

    return asyncio.run(go())


@pytest.fixture
def S(tmp_path) -> list[str]:
    return ["--store", f"sqlite:///{tmp_path}/store.db"]


def test_routing_is_set_per_scope_the_narrowest_reaches_the_key_and_keys_show_says_it(capsys, S) -> None:
    for path in ("acme", "acme/ml", "acme/ml/train"):
        ok(capsys, "org", "create", path, *S)
    key = json.loads(ok(capsys, "keys", "create", "--project", "acme/ml/train", "--json", *S))
    assert principal_of(S[1], key["secret"]).routing is None
    assert "default routing" in ok(capsys, "keys", "routing", key["id"], *S)

    ok(capsys, "keys", "routing", "org:acme", "cost-first", *S)
    assert principal_of(S[1], key["secret"]).routing == "cost-first"
    assert "cost-first, set on its organization" in ok(capsys, "keys", "routing", key["id"], *S)
    ok(capsys, "keys", "routing", "project:acme/ml/train", "pinned:eu", *S)
    shown = json.loads(ok(capsys, "keys", "routing", key["id"], "--json", *S))
    assert shown == {"scope": "key", "id": key["id"], "label": shown["label"], "routing": None,
                     "in_force": "pinned:eu", "in_force_set_by": "project"}
    ok(capsys, "keys", "routing", key["id"], "latency-first", *S)
    assert principal_of(S[1], key["secret"]).routing == "latency-first"
    assert "routing: latency-first (set on its key)" in ok(capsys, "keys", "show", key["id"], *S)

    ok(capsys, "keys", "routing", key["id"], "--clear", *S)
    assert principal_of(S[1], key["secret"]).routing == "pinned:eu"
    ok(capsys, "keys", "routing", "project:acme/ml/train", "--clear", *S)
    ok(capsys, "keys", "routing", "org:acme", "--clear", *S)
    assert principal_of(S[1], key["secret"]).routing is None
    assert "routing: (default)" in ok(capsys, "keys", "show", key["id"], *S)


def test_a_profile_the_config_lacks_or_a_team_scope_is_refused_and_changes_nothing(capsys, S, tmp_path) -> None:
    for path in ("acme", "acme/ml", "acme/ml/train"):
        ok(capsys, "org", "create", path, *S)
    config = tmp_path / "server.yaml"
    config.write_text(f"store: {{dsn: 'sqlite:///{tmp_path}/store.db'}}\n"
                      "router: {profiles: [{name: eu-cheap, prefer: cost, labels: {pool: eu}}]}\n")
    said = refused(capsys, "keys", "routing", "org:acme", "fastest", "--config", str(config))
    assert "'fastest' is not a routing profile" in said and "eu-cheap" in said and "latency-first" in said
    ok(capsys, "keys", "routing", "org:acme", "eu-cheap", "--config", str(config))
    assert "team" in refused(capsys, "keys", "routing", "acme/ml", "cost-first", *S)
    assert "not a routing profile's name" in refused(capsys, "keys", "routing", "org:acme", "Bad Name!", *S)
    assert "routing profile eu-cheap" in ok(capsys, "keys", "routing", "org:acme", *S)


def test_routing_through_ctl_and_the_admin_api(capsys, tmp_path, monkeypatch) -> None:
    from ctl_live import ctl_against
    from ctl_live import ok as ctl_ok
    from ctl_live import ok_json as ctl_json
    from ctl_live import refused as ctl_refused

    with ctl_against(tmp_path, monkeypatch):
        for path in ("acme", "acme/ml", "acme/ml/train"):
            ctl_ok(capsys, "orgs", "create", path)
        key = ctl_json(capsys, "keys", "create", "--project", "acme/ml/train")["key"]
        assert "default routing" in ctl_ok(capsys, "routing", f"key:{key['id']}")
        assert ctl_ok(capsys, "routing", "project:acme/ml/train", "pinned:gpu-eu") == (
            "project:acme/ml/train: routing profile pinned:gpu-eu\n")
        shown = ctl_json(capsys, "routing", f"key:{key['id']}")
        assert (shown["routing"], shown["in_force"], shown["in_force_set_by"]) == (None, "pinned:gpu-eu", "project")
        said = ctl_refused(capsys, "routing", "org:acme", "fastest")
        assert "'fastest' is not a routing profile" in said and "cost-first" in said
        assert ctl_ok(capsys, "routing", "project:acme/ml/train", "--clear") == (
            "project:acme/ml/train: default routing (no routing profile of its own)\n")
        events = ctl_json(capsys, "audit", "--action", "keys.routing")["events"]
        assert sorted(e["outcome"] for e in events) == ["ok", "ok", "refused"]  # set, refused, cleared
        assert ctl_json(capsys, "routing", "org:acme")["routing"] is None  # the refusal changed nothing
