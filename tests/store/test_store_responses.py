"""Responses API answers kept for previous_response_id: expiry, replacement, a bounded table."""

from __future__ import annotations

import datetime as dt

import pytest

from llmgw.store import Invalid, Store

from .conftest import FakeClock

DAY = dt.timedelta(days=1)
MESSAGES = [
    {"role": "user", "content": "Mé llamo Deniz."},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
]
RESPONSE = {"id": "resp_1", "object": "response", "status": "completed", "output": []}


async def test_keep_read_and_forget(store: Store, clock: FakeClock) -> None:
    assert await store.get_response("resp_1") is None
    kept = await store.put_response("resp_1", scope="prj-1", model="m", messages=MESSAGES,
                                    response=RESPONSE, ttl=DAY)
    assert (kept.id, kept.scope, kept.model) == ("resp_1", "prj-1", "m")
    assert kept.created_at == clock.now and kept.expires_at == clock.now + DAY
    read = await store.get_response("resp_1")
    assert read == kept
    assert read.messages == MESSAGES and read.response == RESPONSE

    # The same id again replaces what was kept.
    again = await store.put_response("resp_1", scope="prj-1", model="m2", messages=MESSAGES[:1],
                                     response=RESPONSE, ttl=DAY)
    assert (await store.get_response("resp_1")) == again and again.model == "m2"

    assert await store.delete_response("resp_1") is True
    assert await store.delete_response("resp_1") is False
    assert await store.get_response("resp_1") is None


async def test_an_expired_answer_is_not_read_and_is_pruned(store: Store, clock: FakeClock) -> None:
    await store.put_response("resp_old", scope="", model="m", messages=MESSAGES, response=RESPONSE,
                             ttl=dt.timedelta(hours=1))
    await store.put_response("resp_new", scope="", model="m", messages=MESSAGES, response=RESPONSE, ttl=DAY)
    clock.advance(3601)
    assert await store.get_response("resp_old") is None
    assert await store.get_response("resp_new") is not None
    assert await store.prune_responses(keep_at_most=100) == 1
    assert await store.delete_response("resp_old") is False


async def test_pruning_keeps_the_newest(store: Store, clock: FakeClock) -> None:
    for i in range(5):
        await store.put_response(f"resp_{i}", scope="s", model="m", messages=MESSAGES, response=RESPONSE, ttl=DAY)
        clock.advance(1)
    assert await store.prune_responses(keep_at_most=2) == 3
    assert [i for i in range(5) if await store.get_response(f"resp_{i}")] == [3, 4]
    assert await store.prune_responses(keep_at_most=2) == 0


async def test_bad_input_is_refused(store: Store) -> None:
    with pytest.raises(Invalid):
        await store.put_response("", scope="", model="m", messages=[], response={}, ttl=DAY)
    with pytest.raises(Invalid):
        await store.put_response("resp_x", scope="", model="m", messages="no", response={}, ttl=DAY)
    with pytest.raises(Invalid):
        await store.put_response("resp_x", scope="", model="m", messages=[], response={}, ttl=dt.timedelta(0))
    with pytest.raises(Invalid):
        await store.put_response("resp_x", scope="", model="m", messages=[{"bad": float("nan")}],
                                 response={}, ttl=DAY)
