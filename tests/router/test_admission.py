"""Admission: room per replica, a bounded queue per model, bands by weight, the wait limit."""

from __future__ import annotations

import asyncio

import openai
import pytest

from llmgw.config.server import AdmissionConfig, AffinityConfig, Band
from llmgw.config.units import Duration
from llmgw.router.admission import Admission, NoCapacity, NoReplica, QueueFull
from llmgw.router.choose import Chooser, Want
from llmgw.router.replicas import Replica, ReplicaSet

from .conftest import HELLO, model, principal


def admission(concurrency: int = 1, *, depth: int = 10, max_wait: float = 5.0, replicas: int = 1,
              bands: list[Band] | None = None) -> tuple[Admission, ReplicaSet]:
    rs = ReplicaSet(Replica(id=f"r{i}", model="m", base_url="http://x/v1", max_concurrency=concurrency)
                    for i in range(replicas))
    config = AdmissionConfig(queue_depth=depth, max_wait=Duration.from_seconds(max_wait),
                             bands=bands or [Band("gold", 4), Band("silver", 2), Band("bronze", 1)])
    return Admission(config, rs, Chooser(AffinityConfig())), rs


async def test_room_goes_at_once_then_the_queue_then_a_refusal():
    adm, _ = admission(1, depth=1)
    first = await adm.acquire("m", "silver", Want())
    assert first.waited == 0.0 and first.replica.in_flight == 1
    second = asyncio.create_task(adm.acquire("m", "silver", Want()))
    await asyncio.sleep(0)
    assert adm.waiting("m") == 1
    with pytest.raises(QueueFull) as caught:
        await adm.acquire("m", "silver", Want())
    assert caught.value.status == 429 and "queue_depth" in caught.value.message
    adm.release(first)
    grant = await second
    assert grant.replica.in_flight == 1 and grant.waited >= 0
    adm.release(grant)
    assert grant.replica.in_flight == 0


async def test_freed_room_goes_to_the_higher_band_first():
    adm, _ = admission(1)
    held = await adm.acquire("m", "gold", Want())
    order: list[str] = []
    grants: asyncio.Queue = asyncio.Queue()

    async def wait(band: str):
        grant = await adm.acquire("m", band, Want())
        order.append(band)
        await grants.put(grant)

    tasks = []
    for band in ("bronze", "silver", "gold"):  # the lowest arrives first
        tasks.append(asyncio.create_task(wait(band)))
        await asyncio.sleep(0)
    adm.release(held)
    for _ in range(3):
        adm.release(await asyncio.wait_for(grants.get(), 1))
    await asyncio.gather(*tasks)
    assert order == ["gold", "silver", "bronze"]


async def test_bands_share_freed_room_by_weight():
    adm, _ = admission(1, depth=100)
    held = await adm.acquire("m", "gold", Want())
    order: list[str] = []
    grants: asyncio.Queue = asyncio.Queue()

    async def wait(band: str):
        grant = await adm.acquire("m", band, Want())
        order.append(band)
        await grants.put(grant)

    tasks = [asyncio.create_task(wait(b)) for b in ["gold"] * 10 + ["silver"] * 10 + ["bronze"] * 10]
    await asyncio.sleep(0)
    adm.release(held)
    for _ in range(14):
        adm.release(await grants.get())
    assert order[:7].count("gold") == 4 and order[:7].count("silver") == 2 and order[:7].count("bronze") == 1
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_wait_past_the_bands_limit_is_refused_with_503():
    adm, _ = admission(1, bands=[Band("gold", 4, max_wait=Duration.from_seconds(0.05)), Band("silver", 2)])
    held = await adm.acquire("m", "silver", Want())
    with pytest.raises(NoCapacity) as caught:
        await adm.acquire("m", "gold", Want())
    assert caught.value.status == 503 and caught.value.code == "no_capacity"
    assert "'gold'" in caught.value.message
    assert adm.waiting("m") == 0
    adm.release(held)


async def test_unknown_bands_wait_in_the_default_one():
    adm, _ = admission()
    assert adm.band_name("platinum") == "silver"
    assert adm.band_name(None) == "silver"
    assert adm.band_name("bronze") == "bronze"


async def test_no_healthy_replica_is_its_own_refusal():
    adm, rs = admission()
    for _ in range(3):
        rs.get("r0").failed("test")
    with pytest.raises(NoReplica) as caught:
        await adm.acquire("m", "silver", Want())
    assert caught.value.code == "model_unavailable" and caught.value.retry_after > 0
    with pytest.raises(NoReplica):
        await adm.acquire("other", "silver", Want())


async def test_a_replica_added_serves_the_queue_at_once():
    adm, rs = admission(1)
    held = await adm.acquire("m", "silver", Want())
    waiting = asyncio.create_task(adm.acquire("m", "silver", Want()))
    await asyncio.sleep(0)
    rs.add(Replica(id="r-new", model="m", base_url="http://y/v1", max_concurrency=1))
    grant = await asyncio.wait_for(waiting, 1)
    assert grant.replica.id == "r-new"
    adm.release(held)
    adm.release(grant)


# ---------------------------------------------------------------- through the gateway


async def test_with_one_slot_and_a_queue_of_one_the_third_request_is_refused(sim, gateway):
    engine = await sim(models=["m"], tpot=0.02)
    gw = await gateway([model("m", engine, concurrency=1)], admission={"queue_depth": 1})
    client = gw.client()

    async def ask():
        return await client.chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=10)

    first = asyncio.create_task(ask())
    await asyncio.sleep(0.05)
    second = asyncio.create_task(ask())
    await asyncio.sleep(0.02)
    with pytest.raises(openai.RateLimitError) as caught:
        await ask()
    assert caught.value.body["code"] == "queue_full"
    assert "1 requests already wait" in caught.value.body["message"]
    assert caught.value.response.headers["Retry-After"] == "1"
    first_raw, second_raw = await first, await second
    assert int(second_raw.headers["x-llmgw-queue-ms"]) > int(first_raw.headers["x-llmgw-queue-ms"])
    rows = await gw.settle(3)
    refused = [r for r in rows if r.status == 429]
    assert len(refused) == 1 and refused[0].outcome == "refused" and refused[0].replica == ""
    assert 'llmgw_requests_total{model="m",outcome="limited"} 1.0' in gw.metrics.exposition().decode()


async def test_a_request_that_waits_too_long_gets_503_no_capacity(sim, gateway):
    engine = await sim(models=["m"], tpot=0.05)
    gw = await gateway([model("m", engine, concurrency=1)], admission={"max_wait": "100ms"})
    client = gw.client()
    first = asyncio.create_task(client.chat.completions.create(model="m", messages=HELLO, max_tokens=10))
    await asyncio.sleep(0.05)
    with pytest.raises(openai.InternalServerError) as caught:
        await client.chat.completions.create(model="m", messages=HELLO, max_tokens=1)
    assert caught.value.status_code == 503 and caught.value.body["code"] == "no_capacity"
    await first


async def test_the_band_header_counts_only_when_keys_are_off(sim, gateway, http):
    engine = await sim(models=["m"])
    open_gw = await gateway([model("m", engine)])
    keyed_gw = await gateway([model("m", engine)], keys={"k": principal(band="bronze")})
    body = {"model": "m", "messages": HELLO, "max_tokens": 1}
    async with http.post(open_gw.base_url + "/chat/completions", json=body, headers={"x-llmgw-band": "gold"}):
        pass
    async with http.post(keyed_gw.base_url + "/chat/completions", json=body,
                         headers={"x-llmgw-band": "gold", "Authorization": "Bearer k"}):
        pass
    open_text = open_gw.metrics.exposition().decode()
    keyed_text = keyed_gw.metrics.exposition().decode()
    assert 'llmgw_queue_wait_seconds_count{band="gold",model="m"} 1.0' in open_text
    assert 'llmgw_queue_wait_seconds_count{band="bronze",model="m"} 1.0' in keyed_text
