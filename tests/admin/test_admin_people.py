"""People, keys, limits and capacity quotas over the admin API (through Tenancy)."""

from __future__ import annotations

from llmgw.auth.keys import KeyResolver


async def test_the_tree_people_and_keys(bare):
    await bare.call("POST", "/orgs", {"path": "acme"}, status=201)
    await bare.call("POST", "/orgs", {"path": "acme/search"}, status=201)
    project = await bare.call("POST", "/orgs", {"path": "acme/search/indexer"}, status=201)
    assert project == {"kind": "project", "id": project["id"], "path": "acme/search/indexer"}
    assert [n["path"] for n in (await bare.call("GET", "/orgs"))["nodes"]] == [
        "acme", "acme/search", "acme/search/indexer"]
    assert "already" in await bare.refused("POST", "/orgs", {"path": "acme"}, status=409)

    user = await bare.call("POST", "/users", {"email": "Ann@Example.com", "role": "operator"}, status=201)
    assert (user["email"], user["role"], user["state"]) == ("ann@example.com", "operator", "active")
    await bare.call("POST", "/users/ann@example.com/memberships", {"path": "acme/search"}, status=201)
    detail = await bare.call("GET", "/users/ann@example.com")
    assert [(m["path"], m["role"]) for m in detail["memberships"]] == [("acme/search", "member")]
    assert (await bare.call("POST", f"/users/{user['id']}/role", {"role": "viewer"}))["role"] == "viewer"

    issued = await bare.call("POST", "/keys", {"project": "acme/search/indexer", "user": "ann@example.com",
                                               "name": "ci", "ttl": "30d"}, status=201)
    assert issued["key"]["kind"] == "member" and issued["secret"].startswith(issued["key"]["prefix"])
    resolved = await KeyResolver(bare.store).resolve(issued["secret"])
    assert resolved.key_id == issued["key"]["id"]
    rotated = await bare.call("POST", f"/keys/{issued['key']['id']}/rotate", {"overlap": "0s"})
    assert rotated["old"]["state"] == "revoked" and rotated["new"]["key"]["state"] == "active"
    keys = (await bare.call("GET", "/keys?project=acme/search/indexer"))["keys"]
    assert [k["id"] for k in keys] == [rotated["new"]["key"]["id"]]
    assert len((await bare.call("GET", "/keys?project=acme/search/indexer&all=true"))["keys"]) == 2
    revoked = await bare.call("POST", f"/keys/{rotated['new']['key']['prefix']}/revoke")
    assert revoked["state"] == "revoked"

    suspended = await bare.call("POST", "/users/ann@example.com/state", {"state": "suspended"})
    assert suspended["state"] == "suspended"
    assert [u["email"] for u in (await bare.call("GET", "/users?state=suspended"))["users"]] == ["ann@example.com"]
    await bare.call("DELETE", "/users/ann@example.com/memberships?path=acme/search")
    assert "not a member" in await bare.refused("DELETE", "/users/ann@example.com/memberships?path=acme/search",
                                                status=404)
    assert "is not one of" in await bare.refused("POST", "/users/ann@example.com/role", {"role": "god"}, status=400)
    # A team with a project in it is not removed; a project whose keys are all revoked is.
    await bare.refused("DELETE", "/orgs?path=acme/search", status=409)
    assert (await bare.call("DELETE", "/orgs?path=acme/search/indexer"))["kind"] == "project"


async def test_limits_change_some_fields_and_keep_the_rest(bare):
    await bare.call("POST", "/orgs", {"path": "acme"}, status=201)
    got = await bare.call("PUT", "/limits", {"scope": "org:acme", "rpm": 60, "budget_micros": 5_000_000})
    assert got["limits"]["rpm"] == 60 and got["limits"]["budget_period"] == "month"
    got = await bare.call("PUT", "/limits", {"scope": "org:acme", "tpm": 1000, "rpm": None})
    assert (got["limits"]["rpm"], got["limits"]["tpm"], got["limits"]["budget_micros"]) == (None, 1000, 5_000_000)
    assert (await bare.call("GET", "/limits?scope=org:acme"))["limits"]["tpm"] == 1000
    assert (await bare.call("DELETE", "/limits?scope=org:acme"))["limits"] is None
    assert "no limits" in await bare.refused("DELETE", "/limits?scope=org:acme", status=404)
    assert "no organization" in await bare.refused("GET", "/limits?scope=org:nope", status=404)


async def test_capacity_quotas_and_what_is_held(admin):
    await admin.call("POST", "/orgs", {"path": "acme"}, status=201)
    await admin.call("POST", "/orgs", {"path": "acme/ml"}, status=201)
    quota = await admin.call("PUT", "/quotas", {"scope": "team:acme/ml", "limit": {"gpus": 8, "memory": "512GiB"},
                                                 "guaranteed": {"gpus": 2}})
    assert quota["scope"] == "team:acme/ml" and quota["limit"]["memory"] == "512GiB"
    [listed] = (await admin.call("GET", "/quotas"))["quotas"]
    # qwen-small is owned by team:acme/ml and runs one replica on one GPU.
    assert listed["held"] == {"gpus": 1, "cores": 0, "memory_bytes": 0}
    assert listed["guaranteed"]["gpus"] == 2
    error = await admin.refused("PUT", "/quotas", {"scope": "team:acme/ml", "limit": {"gpus": 1},
                                                   "guaranteed": {"gpus": 2}}, status=400)
    assert error == "guaranteed.gpus: 2 is more than the limit, 1"
    assert "expected a size" in await admin.refused("PUT", "/quotas", {"scope": "org:acme",
                                                                       "limit": {"memory": "lots"}}, status=400)
    await admin.call("POST", "/users", {"email": "x@example.com"}, status=201)
    error = await admin.refused("PUT", "/quotas", {"scope": "user:x@example.com"}, status=400)
    assert error.startswith("scope: 'user:x@example.com' is not a scope: org:NAME, team:ORG/TEAM or project:PATH")
    await admin.call("DELETE", "/quotas?scope=team:acme/ml")
    assert (await admin.call("GET", "/quotas"))["quotas"] == []
    assert "has no capacity quota" in await admin.refused("DELETE", "/quotas?scope=team:acme/ml", status=404)
