"""SLO-aware admission: a model over its slo.ttft_p99 refuses its lowest bands, serves the highest, counts them."""

from __future__ import annotations

import asyncio
import json

from llmgw.router.slo import MIN_SAMPLES, WINDOW, SloWatch

from .conftest import HELLO, model, principal

BANDS = {f"k-{band}": principal(f"k-{band}", band=band) for band in ("gold", "silver", "bronze")}


async def _stream(http, gw, key: str):
    body = {"model": "m", "messages": HELLO, "max_tokens": 2, "stream": True}
    async with http.post(gw.base_url + "/chat/completions", json=body,
                         headers={"Authorization": f"Bearer {key}"}) as resp:
        return resp.status, dict(resp.headers), await resp.read()


async def test_a_model_over_its_ttft_objective_refuses_the_lowest_band_and_serves_the_others(sim, gateway, http):
    engine = await sim(models=["m"], ttft=0.1)  # every first token takes 0.1 s or more: over an objective of 0.05 s
    two_bands = {"bands": [{"name": "gold", "weight": 4}, {"name": "bronze", "weight": 1}], "default_band": "gold"}
    keys = {k: p for k, p in BANDS.items() if p.band != "silver"}
    gw = await gateway([model("m", engine, concurrency=8, slo={"ttft_p99": "50ms"})], keys=keys,
                       admission=two_bands)
    first = await asyncio.gather(*(_stream(http, gw, "k-gold") for _ in range(MIN_SAMPLES)))
    assert [status for status, _, _ in first] == [200] * MIN_SAMPLES
    status, headers, body = await _stream(http, gw, "k-bronze")
    assert status == 503 and headers["Retry-After"] == "5"
    error = json.loads(body)["error"]
    assert error["code"] == "slo_exceeded", error
    assert "slo.ttft_p99 0.05s" in error["message"] and "'bronze'" in error["message"]
    # however far over it is, the highest band is served
    assert (await _stream(http, gw, "k-gold"))[0] == 200
    assert (await _stream(http, gw, "k-bronze"))[0] == 503
    text = gw.metrics.exposition().decode()
    assert 'llmgw_slo_shed_total{band="bronze",model="m"} 2.0' in text
    assert 'llmgw_slo_shed_total{band="gold"' not in text
    assert gw.gateway.slo.over("m")


async def test_a_model_within_its_objective_or_without_one_refuses_no_band(sim, gateway, http):
    engine = await sim(models=["m", "n"])  # fast: 5 ms to the first token
    gw = await gateway([model("m", engine, slo={"ttft_p99": "2s"}), model("n", engine)], keys=BANDS)
    for _ in range(MIN_SAMPLES + 1):
        assert (await _stream(http, gw, "k-bronze"))[0] == 200
    assert not gw.gateway.slo.over("m") and gw.gateway.slo.pressure("n") == 0.0
    assert "llmgw_slo_shed_total{" not in gw.metrics.exposition().decode()


def test_further_over_the_objective_sheds_more_bands_never_the_highest_and_recovers_when_samples_age():
    now = [0.0]
    watch = SloWatch(lambda m: 1.0, clock=lambda: now[0])
    bands = ["gold", "silver", "bronze"]
    for _ in range(MIN_SAMPLES - 1):
        watch.observe("m", 5.0)
    assert watch.bands_shed("m", bands) == set()  # too few samples to believe
    watch.observe("m", 5.0)
    assert watch.bands_shed("m", bands) == {"silver", "bronze"}  # 5x: as many as may be, gold never
    assert watch.bands_shed("m", ["only"]) == set()
    now[0] = WINDOW + 1
    for _ in range(MIN_SAMPLES):
        watch.observe("m", 1.2)
    assert watch.bands_shed("m", bands) == {"bronze"}  # the old samples left the window
    now[0] = 2 * WINDOW + 2
    assert not watch.over("m") and watch.bands_shed("m", bands) == set()


async def test_a_shed_request_goes_to_the_models_fallback_when_it_has_one(sim, gateway, http):
    slow, fast = await sim(models=["m"], ttft=0.1), await sim(models=["small"])
    two_bands = {"bands": [{"name": "gold", "weight": 4}, {"name": "bronze", "weight": 1}], "default_band": "gold"}
    keys = {k: p for k, p in BANDS.items() if p.band != "silver"}
    gw = await gateway([model("m", slow, concurrency=8, slo={"ttft_p99": "50ms"}, fallbacks=["small"]),
                        model("small", fast)], keys=keys, admission=two_bands)
    await asyncio.gather(*(_stream(http, gw, "k-gold") for _ in range(MIN_SAMPLES)))
    status, _, body = await _stream(http, gw, "k-bronze")
    assert status == 200 and b'"model":"small"' in body.replace(b" ", b"")
    assert 'llmgw_fallbacks_total{model="m",reason="slo",served="small"} 1.0' in gw.metrics.exposition().decode()
