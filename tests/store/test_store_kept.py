"""Kept requests in the store (llmgw.store.sql_kept), on both backends: the rules, what is kept and read
back, lists by key, project and time, expiry, and forgetting a person."""

from __future__ import annotations

import datetime as dt

import pytest

from llmgw.store import Invalid, Store

from .conftest import FakeClock

DAY = dt.timedelta(days=1)
REQUEST = {"model": "m", "messages": [{"role": "user", "content": "Mé llamo Deniz."}], "max_tokens": 5}
ANSWER = {"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hola"},
                                                    "finish_reason": "stop"}]}


def _fields(clock: FakeClock, request_id: str, key_id: str = "key-1", **extra) -> dict:
    return {"id": request_id, "at": clock.now, "keep": DAY, "key_id": key_id, "project_id": "prj-1",
            "org_id": "org-1", "user_id": None, "endpoint": "/v1/chat/completions", "kind": "chat", "model": "m",
            "model_served": "m", "status": 200, "outcome": "ok", "streamed": False, "prompt_tokens": 7,
            "completion_tokens": 2, "guard_action": None, "request": REQUEST, "answer": ANSWER, **extra}


async def test_rules_a_keys_and_a_projects(store: Store, clock: FakeClock) -> None:
    assert await store.keep_rules_of("key-1", "prj-1") == {}
    await store.set_keep_rule("project", "prj-1", dt.timedelta(days=7), actor="ops")
    rule = await store.set_keep_rule("key", "key-1", dt.timedelta(hours=12), actor="ops")
    assert (rule.keep, rule.updated_at, rule.updated_by) == (dt.timedelta(hours=12), clock.now, "ops")
    rules = await store.keep_rules_of("key-1", "prj-1")
    assert (rules["key"].keep, rules["project"].keep) == (dt.timedelta(hours=12), dt.timedelta(days=7))
    assert set(await store.keep_rules_of("key-2", "prj-1")) == {"project"}
    assert await store.set_keep_rule("key", "key-1", None) is None
    assert await store.get_keep_rule("key", "key-1") is None
    for bad, words in ((dt.timedelta(days=400), "at most 366 days"), (dt.timedelta(0), "at least 1s")):
        with pytest.raises(Invalid, match=words):
            await store.set_keep_rule("project", "prj-1", bad)
    with pytest.raises(Invalid, match="for a key or a project"):
        await store.set_keep_rule("org", "org-1", DAY)
    assert (await store.get_keep_rule("project", "prj-1")).keep == dt.timedelta(days=7), "a refusal changes nothing"


async def test_kept_read_listed_and_gone_when_expired(store: Store, clock: FakeClock) -> None:
    first = await store.put_kept_request(**_fields(clock, "req_1"))
    assert await store.get_kept_request("req_1") == first
    assert first.request == REQUEST and first.answer == ANSWER and first.expires_at == clock.now + DAY
    clock.advance(3600)
    await store.put_kept_request(**_fields(clock, "req_2", key_id="key-2", streamed=True, answer=None))
    assert [k.id for k in await store.list_kept_requests()] == ["req_2", "req_1"]
    assert [k.id for k in await store.list_kept_requests(key_id="key-1")] == ["req_1"]
    assert [k.id for k in await store.list_kept_requests(project_id="prj-1", since=clock.now)] == ["req_2"]
    second = await store.get_kept_request("req_2")
    assert second.streamed is True and second.answer is None
    clock.advance(DAY.total_seconds() - 1800)  # req_1's day is up, req_2's not
    assert await store.get_kept_request("req_1") is None, "past its time it is not read, swept or not"
    assert await store.delete_expired_kept_requests() == 1
    assert [k.id for k in await store.list_kept_requests()] == ["req_2"]


async def test_forgetting_a_person_deletes_theirs_and_their_keys(store: Store, clock: FakeClock) -> None:
    from llmgw.auth.keys import hash_secret, new_secret, visible_prefix

    org = await store.create_org("acme")
    project = await store.create_project(org.id, "a")
    ann = await store.create_user("ann@example.com", "Ann")
    secret = new_secret()
    key = await store.create_key(key_hash=hash_secret(secret), prefix=visible_prefix(secret), name="ann's",
                                 project_id=project.id, user_id=ann.id)
    await store.set_keep_rule("key", key.id, DAY)
    await store.put_kept_request(**_fields(clock, "req_ann", key_id=key.id, user_id=ann.id))
    await store.put_kept_request(**_fields(clock, "req_service", key_id="key-service"))
    report = await store.forget_user(ann.id)
    assert report.kept_requests == 1
    assert [k.id for k in await store.list_kept_requests()] == ["req_service"]
    assert await store.get_keep_rule("key", key.id) is None
