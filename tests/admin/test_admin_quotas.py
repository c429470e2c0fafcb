"""What a capacity quota's scope holds, counted as placement counts it: the models of the scopes under it too."""

from __future__ import annotations

from llmgw.admin.testing import FakeCluster

from .conftest import QWEN


async def test_held_counts_the_models_of_the_scopes_under_it_in_any_case(make_admin):
    train = {**QWEN, "name": "trainer", "owner": "project:ACME/ml/train"}
    web = {**QWEN, "name": "web", "owner": "acme/web"}
    admin = await make_admin(FakeCluster(models=[QWEN, train, web]))  # one GPU each
    for path in ("acme", "acme/ml", "acme/ml/train", "acme/web"):
        await admin.call("POST", "/orgs", {"path": path}, status=201)
    for scope in ("org:acme", "team:acme/ml", "project:acme/ml/train"):
        await admin.call("PUT", "/quotas", {"scope": scope, "limit": {"gpus": 8}})
    listed = {q["scope"]: q["held"]["gpus"] for q in (await admin.call("GET", "/quotas"))["quotas"]}
    assert listed == {"org:acme": 3, "team:acme/ml": 2, "project:acme/ml/train": 1}
