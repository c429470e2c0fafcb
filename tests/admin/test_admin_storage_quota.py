"""A project's storage quota over the admin API: shown with what it keeps, changed, audited, refused when bad."""

from __future__ import annotations


async def test_a_projects_storage_quota_is_shown_with_what_it_keeps_and_changed_audited(bare):
    await bare.call("POST", "/orgs", {"path": "acme"}, status=201)
    await bare.call("POST", "/orgs", {"path": "acme/indexer", "project": True}, status=201)
    project = (await bare.call("GET", "/storage-quota?project=acme/indexer"))["project_id"]
    await bare.store.create_file(project, purpose="batch", filename="in.jsonl", content=b"x" * 1234)
    got = await bare.call("GET", "/storage-quota?project=acme/indexer")
    assert got == {"project": "acme/indexer", "project_id": project, "storage_quota_bytes": None,
                   "server_quota_bytes": 10 * 1024**3, "effective_bytes": 10 * 1024**3, "used_bytes": 1234}
    got = await bare.call("PUT", "/storage-quota", {"project": "acme/indexer", "storage_quota_bytes": 50_000})
    assert (got["storage_quota_bytes"], got["effective_bytes"], got["used_bytes"]) == (50_000, 50_000, 1234)
    assert (await bare.store.get_project_features(project)).storage_quota_bytes == 50_000
    got = await bare.call("PUT", "/storage-quota", {"project": "acme/indexer", "storage_quota_bytes": 0})
    assert (got["storage_quota_bytes"], got["effective_bytes"]) == (0, 0)  # no limit
    got = await bare.call("PUT", "/storage-quota", {"project": "acme/indexer", "storage_quota_bytes": None})
    assert (got["storage_quota_bytes"], got["effective_bytes"]) == (None, 10 * 1024**3)  # the server's again
    events = [e for e in (await bare.call("GET", "/audit"))["events"] if e["action"] == "keys.quota"]
    assert len(events) == 3 and {e["target"] for e in events} == {f"project:{project}"}
    assert all(e["outcome"] == "ok" for e in events)


async def test_a_bad_storage_quota_is_refused_naming_the_field_and_changes_nothing(bare):
    await bare.call("POST", "/orgs", {"path": "acme"}, status=201)
    await bare.call("POST", "/orgs", {"path": "acme/indexer", "project": True}, status=201)
    await bare.call("PUT", "/storage-quota", {"project": "acme/indexer", "storage_quota_bytes": 50_000})
    said = await bare.refused("PUT", "/storage-quota", {"project": "acme/indexer", "storage_quota_bytes": -5},
                              status=400)
    assert "storage_quota_bytes" in said
    said = await bare.refused("PUT", "/storage-quota", {"project": "acme/indexer"}, status=400)
    assert "storage_quota_bytes" in said
    assert "no organization" in await bare.refused("GET", "/storage-quota?project=nope/x", status=404)
    await bare.refused("GET", "/storage-quota?project=acme", status=400)  # an organization, not a project
    got = await bare.call("GET", "/storage-quota?project=acme/indexer")
    assert got["storage_quota_bytes"] == 50_000
