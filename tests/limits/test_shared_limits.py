"""Two accountants (as two gateway processes would have) sharing one real Redis (limits.store): an RPM, a budget's
holds and a TPM counted once for both, holds of a crashed gateway dying, and the Redis killed and back."""

from __future__ import annotations

import asyncio
import logging

import pytest

from llmgw.accounting.accountant import Accountant
from llmgw.accounting.api import LimitExceeded
from llmgw.accounting.limits_redis import SharedLimitsCollector
from llmgw.auth.keys import KeyResolver
from llmgw.auth.tenancy import Tenancy
from llmgw.config import parse_server_config
from llmgw.config.errors import ConfigError
from llmgw.store import open_store

ENDPOINTS = [{"url": "http://engine:8000/v1"}]


def config(url: str, **limits):
    return parse_server_config({
        "prices": {"default": {"input": 1, "output": 1}},
        "limits": {"store": url, **limits},
        "models": [{"name": "paid", "price": {"input": 1, "output": 1}, "endpoints": ENDPOINTS}],
    })


async def tenant(tmp_path, **limits):
    store = await open_store(str(tmp_path / "llmgw.db"))
    t = Tenancy(store, actor="tester")
    await t.create("acme")
    await t.create("acme/app", project=True)
    issued = await t.create_key(project="acme/app")
    await t.set_limits(await t.scope("acme/app"), **limits)
    return store, await KeyResolver(store).resolve(issued.secret)


async def two_gateways(cfg, store):
    a, b = Accountant(cfg, store), Accountant(cfg, store)
    await a.start()
    await b.start()
    return a, b


@pytest.mark.slow  # a second or more: 100 connections at once, or waiting out a TTL or a retry
async def test_an_rpm_of_60_lets_exactly_60_through_across_two_gateways(tmp_path, redis_server):
    store, principal = await tenant(tmp_path, rpm=60)
    a, b = await two_gateways(config(redis_server.url), store)
    try:
        results = await asyncio.gather(*(
            (a if i % 2 else b).admit(principal, "paid", prompt_tokens=10, max_tokens=0) for i in range(100)
        ), return_exceptions=True)
        refused = [r for r in results if isinstance(r, LimitExceeded)]
        assert len(results) - len(refused) == 60
        assert len(refused) == 40 and {r.code for r in refused} == {"rate_limit_exceeded"}
        assert all(0 < r.retry_after <= 2 for r in refused)  # one request's worth of a minute: a second
        assert "limit of 60 requests a minute" in refused[0].message
    finally:
        await a.stop()
        await b.stop()
        await store.close()


@pytest.mark.slow  # 100 connections at once: a second or more on a busy machine
async def test_a_budget_for_10_requests_holds_against_100_concurrent_on_two_gateways(tmp_path, redis_server):
    # worst case of each: 100 prompt + 900 max tokens at 1 micro-dollar a token = 1000; the budget: 10 of them
    store, principal = await tenant(tmp_path, budget_micros=10_000, budget_period="day")
    a, b = await two_gateways(config(redis_server.url), store)
    try:
        results = await asyncio.gather(*(
            (a if i % 2 else b).admit(principal, "paid", prompt_tokens=100, max_tokens=900) for i in range(100)
        ), return_exceptions=True)
        admitted = [(a if i % 2 else b, r) for i, r in enumerate(results) if not isinstance(r, BaseException)]
        refused = [r for r in results if isinstance(r, LimitExceeded)]
        assert len(admitted) == 10 and len(refused) == 90
        assert {r.code for r in refused} == {"budget_exceeded"}
        assert "requests in progress hold the rest" in refused[0].message
        for acc, reservation in admitted:  # each costs 950: 9,500 spent, 500 left, less than one worst case
            await acc.settle(reservation, model_served="paid", prompt_tokens=100, completion_tokens=850)
        await asyncio.sleep(0.2)  # the settlements are sent without waiting for them
        for acc in (a, b):
            with pytest.raises(LimitExceeded) as err:
                await acc.admit(principal, "paid", prompt_tokens=100, max_tokens=900)
            assert "could cost up to" in err.value.message and "left" in err.value.message
        small = await b.admit(principal, "paid", prompt_tokens=100, max_tokens=300)  # 400 fits in the 500 left
        b.release(small)
    finally:
        await a.stop()
        await b.stop()
        await store.close()


@pytest.mark.slow  # a second or more: 100 connections at once, or waiting out a TTL or a retry
async def test_the_holds_of_a_gateway_that_crashed_die_after_hold_ttl(tmp_path, redis_server):
    store, principal = await tenant(tmp_path, budget_micros=2_000, budget_period="day")
    cfg = config(redis_server.url, hold_ttl="1s")
    crashed, alive = Accountant(cfg, store), Accountant(cfg, store)
    try:
        await crashed.admit(principal, "paid", prompt_tokens=100, max_tokens=900)
        await crashed.admit(principal, "paid", prompt_tokens=100, max_tokens=900)
        await crashed.shared.client.aclose()  # gone without settling
        with pytest.raises(LimitExceeded):
            await alive.admit(principal, "paid", prompt_tokens=100, max_tokens=900)
        await asyncio.sleep(1.2)
        alive.release(await alive.admit(principal, "paid", prompt_tokens=100, max_tokens=900))
    finally:
        await alive.stop()
        await store.close()


def _metric(acc: Accountant) -> dict[str, float]:
    return {fam.samples[0].name: fam.samples[0].value for fam in SharedLimitsCollector(acc.shared).collect()}


@pytest.mark.slow  # a second or more: 100 connections at once, or waiting out a TTL or a retry
async def test_redis_killed_refuse_answers_503_with_the_reason_and_back_it_is_shared_again(
        tmp_path, redis_server, caplog):
    caplog.set_level(logging.INFO, "llmgw.accounting.limits")
    store, principal = await tenant(tmp_path, rpm=5)
    a, b = await two_gateways(config(redis_server.url, on_store_down="refuse"), store)
    try:
        await a.admit(principal, "paid", prompt_tokens=10, max_tokens=0)
        redis_server.kill()
        for _ in range(3):
            with pytest.raises(LimitExceeded) as err:
                await a.admit(principal, "paid", prompt_tokens=10, max_tokens=0)
            assert err.value.status == 503 and err.value.code == "limits_unavailable"
            assert f"127.0.0.1:{redis_server.port}" in err.value.message and "unreachable" in err.value.message
        assert _metric(a)["llmgw_limits_store_up"] == 0
        assert sum("limits store down" in r.getMessage() for r in caplog.records) == 1  # once per outage
        redis_server.start()  # empty: the minute's count starts again
        await asyncio.sleep(1.1)  # the next try after a second
        results = await asyncio.gather(*(
            (a if i % 2 else b).admit(principal, "paid", prompt_tokens=10, max_tokens=0) for i in range(10)
        ), return_exceptions=True)
        assert sum(not isinstance(r, BaseException) for r in results) == 5  # shared again: 5 across both
        assert _metric(a)["llmgw_limits_store_up"] == 1
        assert any("limits store back" in r.getMessage() for r in caplog.records)
    finally:
        await a.stop()
        await b.stop()
        await store.close()


async def test_redis_killed_local_keeps_serving_and_the_metric_says_so(tmp_path, redis_server):
    store, principal = await tenant(tmp_path, rpm=100)
    a = Accountant(config(redis_server.url, on_store_down="local"), store)
    try:
        await a.admit(principal, "paid", prompt_tokens=10, max_tokens=0)
        redis_server.kill()
        for _ in range(5):
            a.release(await a.admit(principal, "paid", prompt_tokens=10, max_tokens=0))
        metrics = _metric(a)
        assert metrics["llmgw_limits_store_up"] == 0 and metrics["llmgw_limits_local_total"] == 5
    finally:
        await a.stop()
        await store.close()


def test_workers_above_1_need_a_shared_limits_store():
    with pytest.raises(ConfigError) as err:
        parse_server_config({"workers": 2})
    assert "workers" in str(err.value) and "limits.store" in str(err.value)
    assert parse_server_config({"workers": 2, "limits": {"store": "redis://127.0.0.1:6379/0"}}).workers == 2
    with pytest.raises(ConfigError) as err:
        parse_server_config({"limits": {"store": "memcached://x"}})
    assert "limits.store" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_server_config({"limits": {"store": "redis://:hunter2@127.0.0.1:6379/0"}})
    assert "limits.password_file" in str(err.value) and "hunter2" not in str(err.value)


async def test_tokens_a_request_used_count_on_the_other_gateway(tmp_path, redis_server):
    store, principal = await tenant(tmp_path, tpm=1000)
    a, b = await two_gateways(config(redis_server.url), store)
    try:
        first = await a.admit(principal, "paid", prompt_tokens=10, max_tokens=0)
        await a.settle(first, model_served="paid", prompt_tokens=10, completion_tokens=890)  # 900 used, not 10
        await asyncio.sleep(0.2)  # the correction is sent without waiting for it
        with pytest.raises(LimitExceeded) as err:
            await b.admit(principal, "paid", prompt_tokens=200, max_tokens=0)
        assert err.value.code == "tokens_limit_exceeded" and "limit of 1000 tokens a minute" in err.value.message
        b.release(await b.admit(principal, "paid", prompt_tokens=50, max_tokens=0))
    finally:
        await a.stop()
        await b.stop()
        await store.close()
