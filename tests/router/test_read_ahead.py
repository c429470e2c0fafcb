"""What the serving path keeps from the store: one read at a time, read again before it expires."""

from __future__ import annotations

import asyncio

import pytest

from llmgw.router.kept_requests import KeptRules
from llmgw.router.read_ahead import ReadAhead


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Source:
    """A store read that takes a while and answers the round it is in."""

    def __init__(self) -> None:
        self.round = 0
        self.asked: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: Exception | None = None

    async def load(self, key: str) -> str:
        self.asked.append(key)
        await self.gate.wait()
        await asyncio.sleep(0.01)
        if self.fail is not None:
            raise self.fail
        return f"{key}@{self.round}"


async def test_requests_that_find_nothing_share_one_read():
    source, clock = Source(), Clock()
    kept = ReadAhead(source.load, 30.0, clock=clock)
    answers = await asyncio.gather(*(kept.get("k") for _ in range(50)))
    assert answers == ["k@0"] * 50 and source.asked == ["k"]
    assert await kept.get("other") == "other@0" and source.asked == ["k", "other"]


async def test_a_value_past_half_its_life_is_answered_at_once_and_read_again_behind():
    source, clock = Source(), Clock()
    kept = ReadAhead(source.load, 30.0, clock=clock)
    assert await kept.get("k") == "k@0"
    clock.now += 10
    assert await kept.get("k") == "k@0" and source.asked == ["k"]  # young: no read
    clock.now += 10
    source.round = 1
    source.gate.clear()  # the store is slow now: nobody may wait for it
    answers = await asyncio.wait_for(asyncio.gather(*(kept.get("k") for _ in range(20))), 0.5)
    assert answers == ["k@0"] * 20 and source.asked == ["k", "k"]  # one read ahead for all twenty
    source.gate.set()
    await asyncio.sleep(0.05)
    assert await kept.get("k") == "k@1" and len(source.asked) == 2


async def test_a_value_past_its_life_is_read_before_it_is_answered():
    source, clock = Source(), Clock()
    kept = ReadAhead(source.load, 30.0, clock=clock)
    await kept.get("k")
    clock.now += 31
    source.round = 1
    assert await kept.get("k") == "k@1"


async def test_forgotten_values_are_read_again_and_a_read_from_before_is_not_kept():
    source, clock = Source(), Clock()
    kept = ReadAhead(source.load, 30.0, clock=clock)
    await kept.get("k")
    source.gate.clear()
    clock.now += 31
    before = asyncio.ensure_future(kept.get("k"))  # a read under way when the rule changes
    await asyncio.sleep(0)
    kept.forget()
    source.round = 1
    source.gate.set()
    assert await kept.get("k") == "k@1"
    await before
    assert await kept.get("k") == "k@1"  # the older read did not put its answer back
    kept.forget("k")
    source.round = 2
    assert await kept.get("k") == "k@2"


async def test_a_failed_read_reaches_its_waiters_and_a_failed_read_ahead_keeps_the_value():
    source, clock = Source(), Clock()
    kept = ReadAhead(source.load, 30.0, clock=clock)
    source.fail = OSError("store down")
    results = await asyncio.gather(kept.get("k"), kept.get("k"), return_exceptions=True)
    assert [type(r) for r in results] == [OSError, OSError] and len(source.asked) == 1
    source.fail = None
    assert await kept.get("k") == "k@0"
    clock.now += 20
    source.fail = OSError("store down")
    assert await kept.get("k") == "k@0"  # the read ahead fails behind the request
    await asyncio.sleep(0.05)
    assert await kept.get("k") == "k@0"
    clock.now += 11
    with pytest.raises(OSError):
        await kept.get("k")


async def test_a_request_that_goes_away_does_not_cancel_the_read_others_wait_for():
    source, clock = Source(), Clock()
    kept = ReadAhead(source.load, 30.0, clock=clock)
    source.gate.clear()
    leaving = asyncio.ensure_future(kept.get("k"))
    staying = asyncio.ensure_future(kept.get("k"))
    await asyncio.sleep(0)
    leaving.cancel()
    source.gate.set()
    assert await staying == "k@0" and source.asked == ["k"]


async def test_a_busy_keys_kept_request_rules_are_read_once_for_all_its_requests_in_flight():
    class Store:
        reads = 0

        async def keep_rules_of(self, key_id, project_id):
            Store.reads += 1
            await asyncio.sleep(0.02)
            return {}

    class Data:
        store = Store()

    clock = Clock()
    rules = KeptRules(Data(), clock=clock)
    assert await asyncio.gather(*(rules.keep_for("key-1", "proj") for _ in range(50))) == [None] * 50
    clock.now += 29  # the rules' age past half their life: read again once, behind the requests
    await asyncio.gather(*(rules.keep_for("key-1", "proj") for _ in range(50)))
    await asyncio.sleep(0.05)
    assert Store.reads == 2
