"""Forgetting a person, residency and key lifetime caps over the admin API: answered, audited, refused when bad."""

from __future__ import annotations

import json

from llmgw.auth.keys import KeyResolver


async def test_forget_over_the_api_reports_audits_by_pseudonym_and_then_says_nothing_is_left(bare):
    await bare.call("POST", "/orgs", {"path": "acme"}, status=201)
    await bare.call("POST", "/users", {"email": "erin@example.com", "name": "Erin Mota"}, status=201)
    await bare.call("POST", "/users/erin@example.com/memberships", {"path": "acme"}, status=201)
    key = await bare.call("POST", "/keys", {"user": "erin@example.com"}, status=201)

    done = await bare.call("POST", "/users/forget", {"user": "erin@example.com"})
    assert done["forgotten"] is True and done["nothing_left"] is False
    assert done["pseudonym"].startswith("forgotten-")
    assert done["removed"]["keys_revoked"] == 1 and done["removed"]["memberships"] == 1
    assert "their usage is kept as" in done["message"]
    again = await bare.call("POST", "/users/forget", {"user": "erin@example.com"})
    assert (again["forgotten"], again["nothing_left"], again["removed"]) == (False, True, None)
    assert "nothing is kept about" in again["message"] and "erin" not in again["message"]

    events = (await bare.call("GET", "/audit?limit=100"))["events"]
    assert "erin@example.com" not in json.dumps(events) and "Erin Mota" not in json.dumps(events)
    forgets = [e for e in events if e["action"] == "users.forget"]
    assert [e["target"] for e in forgets] == ["user:forgotten", f"user:{done['pseudonym']}"]
    assert all(e["outcome"] == "ok" for e in forgets)
    revoked = await bare.store.get_key(key["key"]["id"])
    assert revoked.revoked_at is not None and revoked.name == ""
    assert "user" in await bare.refused("POST", "/users/forget", {}, status=400)


async def test_residency_over_the_api(bare):
    await bare.call("POST", "/orgs", {"path": "acme"}, status=201)
    await bare.call("POST", "/orgs", {"path": "acme/ml"}, status=201)
    await bare.call("POST", "/orgs", {"path": "acme/ml/train"}, status=201)
    key = await bare.call("POST", "/keys", {"project": "acme/ml/train"}, status=201)
    got = await bare.call("GET", f"/residency?scope=key:{key['key']['id']}")
    assert (got["in_cluster"], got["held_in_cluster"]) == (False, False)
    got = await bare.call("PUT", "/residency", {"scope": "project:acme/ml/train", "in_cluster": True})
    assert got == {"scope": "project:acme/ml/train", "in_cluster": True, "held_in_cluster": True}
    got = await bare.call("GET", f"/residency?scope=key:{key['key']['id']}")
    assert (got["in_cluster"], got["held_in_cluster"]) == (False, True)
    assert (await KeyResolver(bare.store).resolve(key["secret"])).in_cluster == "project"
    assert "no project named" in await bare.refused(
        "PUT", "/residency", {"scope": "project:acme/ml", "in_cluster": True}, status=404)
    await bare.refused("PUT", "/residency", {"scope": "team:acme/ml", "in_cluster": True}, status=400)
    assert "org:NAME, project:PATH or key:ID" in await bare.refused(
        "PUT", "/residency", {"scope": "acme/ml", "in_cluster": True}, status=400)
    await bare.refused("PUT", "/residency", {"scope": "project:acme/ml/train", "in_cluster": "yes"}, status=400)
    events = [e for e in (await bare.call("GET", "/audit"))["events"] if e["action"] == "keys.residency"]
    assert [e["outcome"] for e in events].count("ok") == 1


async def test_key_lifetimes_over_the_api_narrow_and_refuse_a_longer_key(bare):
    await bare.call("POST", "/orgs", {"path": "acme"}, status=201)
    await bare.call("POST", "/orgs", {"path": "acme/ml"}, status=201)
    await bare.call("POST", "/orgs", {"path": "acme/ml/train"}, status=201)
    got = await bare.call("PUT", "/key-lifetime", {"path": "acme", "max_key_ttl": "30d"})
    assert (got["max_key_ttl_s"], got["in_force_s"], got["in_force_set_by"]) == (30 * 86400, 30 * 86400, "org acme")
    said = await bare.refused("PUT", "/key-lifetime", {"path": "acme/ml", "max_key_ttl": "60d"}, status=400)
    assert "longer than org acme allows" in said
    await bare.call("PUT", "/key-lifetime", {"path": "acme/ml/train", "max_key_ttl": "7d"})
    got = await bare.call("GET", "/key-lifetime?path=acme/ml/train")
    assert (got["in_force_s"], got["in_force_set_by"]) == (7 * 86400, "project acme/ml/train")
    said = await bare.refused("POST", "/keys", {"project": "acme/ml/train", "ttl": "8d"}, status=400)
    assert "at most 168h, set by project acme/ml/train" in said
    made = await bare.call("POST", "/keys", {"project": "acme/ml/train"}, status=201)
    assert made["key"]["expires_at"] is not None
    got = await bare.call("PUT", "/key-lifetime", {"path": "acme/ml/train", "max_key_ttl": None})
    assert (got["max_key_ttl_s"], got["in_force_set_by"]) == (None, "org acme")
    await bare.refused("PUT", "/key-lifetime", {"path": "acme", "max_key_ttl": "soon"}, status=400)
