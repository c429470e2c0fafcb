"""The router's parts on their own: the SSE relay, usage reading, scraping, replicas and their health."""

from __future__ import annotations

import json

import pytest

from llmgw.config import parse_server_config
from llmgw.router.catalog import Catalog
from llmgw.router.replicas import (
    EJECT_AFTER,
    EJECT_BACKOFF,
    Replica,
    ReplicaSet,
    api_base,
    metrics_url_for,
    static_replicas,
)
from llmgw.router.scrape import parse_load
from llmgw.router.sse import SSERelay, find_usage


def event(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


CHUNK = event({"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}], "usage": None})
USAGE = event({"id": "c", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9,
                                                  "prompt_tokens_details": {"cached_tokens": 3}}})
DONE = b"data: [DONE]\n\n"
STREAM = CHUNK + CHUNK + USAGE + DONE


@pytest.mark.parametrize("size", [1, 7, 64, len(STREAM)])
def test_the_relay_passes_whole_events_and_takes_the_usage_out(size):
    relay = SSERelay(strip_usage=True)
    out = b"".join(relay.feed(STREAM[i:i + size]) for i in range(0, len(STREAM), size)) + relay.close()
    assert out == CHUNK + CHUNK + DONE
    assert relay.usage["completion_tokens"] == 2 and relay.usage["prompt_tokens_details"]["cached_tokens"] == 3
    assert relay.done and relay.events == 2


def test_the_relay_keeps_the_usage_for_a_client_that_asked():
    relay = SSERelay(strip_usage=False)
    assert relay.feed(STREAM) + relay.close() == STREAM
    assert relay.usage["total_tokens"] == 9


def test_the_relay_holds_a_partial_event_until_its_end_arrives():
    relay = SSERelay(strip_usage=True)
    assert relay.feed(CHUNK[:10]) == b""
    assert relay.feed(CHUNK[10:]) == CHUNK


def test_usage_inside_a_chunk_with_choices_is_read_and_kept():
    last = event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": {"completion_tokens": 4}})
    relay = SSERelay(strip_usage=True)
    assert relay.feed(last) == last
    assert relay.usage == {"completion_tokens": 4}


def test_find_usage_reads_only_the_usage_of_a_big_answer():
    body = json.dumps({"data": [{"embedding": [0.1] * 5000}], "usage": {"prompt_tokens": 5, "total_tokens": 5}}).encode()
    assert find_usage(body) == {"prompt_tokens": 5, "total_tokens": 5}
    assert find_usage(b'{"usage": null}') is None
    assert find_usage(b'{"choices": []}') is None
    assert find_usage(b'{"usage": {"prompt_tokens": ') is None


def test_parse_load_reads_vllm_and_llamacpp():
    vllm = """# HELP vllm:num_requests_running x
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
vllm:num_requests_waiting{model_name="m"} 2.0
vllm:num_requests_waiting{model_name="m2"} 1.0
vllm:kv_cache_usage_perc{model_name="m"} 0.25
vllm:prompt_tokens_total{model_name="m"} 99.0
"""
    load = parse_load(vllm)
    assert (load.running, load.waiting, load.kv_cache_usage) == (3.0, 3.0, 0.25)
    llama = "llamacpp:requests_processing 1\nllamacpp:requests_deferred 4 1700000000\n"
    load = parse_load(llama)
    assert (load.running, load.waiting, load.kv_cache_usage) == (1.0, 4.0, None)
    assert parse_load("process_cpu_seconds_total 3\n") is None
    assert parse_load("vllm:num_requests_waiting{model_name=\"m\"} NaN\n") is None


def test_a_replica_is_ejected_after_failures_in_a_row_and_its_backoff_doubles():
    r = Replica(id="r", model="m", base_url="http://r/v1")
    for _ in range(EJECT_AFTER - 1):
        assert not r.failed("x", now=0.0)
    r.succeeded()
    assert r.health.failures == 0
    for _ in range(EJECT_AFTER - 1):
        r.failed("x", now=0.0)
    assert r.failed("x", now=0.0)
    assert not r.usable(now=1.0) and r.usable(now=EJECT_BACKOFF + 0.1)
    assert r.failed("again", now=EJECT_BACKOFF + 0.1), "one failure after the back-off ejects it again"
    assert r.health.backoff == 2 * EJECT_BACKOFF
    r.succeeded()
    assert r.usable(now=EJECT_BACKOFF + 0.2) and r.health.backoff == 0


def test_the_replica_set_tells_its_listeners_and_keeps_live_state_on_update():
    rs = ReplicaSet()
    heard = []
    unsubscribe = rs.subscribe(lambda change: heard.append((change.kind, change.replica.id)))
    r = rs.add(Replica(id="a", model="m", base_url="http://a/v1"))
    r.in_flight = 2
    rs.update("a", base_url="http://a2/v1", max_concurrency=8)
    assert rs.replicas_for("m")[0].in_flight == 2 and rs.get("a").base_url == "http://a2/v1"
    with pytest.raises(ValueError):
        rs.update("a", model="other")
    rs.add(Replica(id="a", model="m", base_url="http://a3/v1"))  # same id: an update
    assert len(rs) == 1 and rs.get("a").base_url == "http://a3/v1"
    rs.remove("a")
    assert rs.replicas_for("m") == [] and rs.models() == [] and rs.remove("a") is None
    unsubscribe()
    rs.add(Replica(id="b", model="m", base_url="http://b/v1"))
    assert heard == [("added", "a"), ("updated", "a"), ("updated", "a"), ("removed", "a")]


def test_static_replicas_and_the_catalog_come_from_server_yaml():
    config = parse_server_config({"models": [
        {"name": "m", "aliases": ["mm"], "fallbacks": ["nn"], "concurrency": 8, "endpoints": [
            {"url": "http://h:8000", "api_key": "k1", "model": "org/m-7b"},
            {"url": "http://h:8001/v1/"},
            {"url": "https://api.example.com/v1", "api": "anthropic"}]},
        {"name": "n", "aliases": ["nn"], "profiles": [{"engine": "sim"}]},
    ]})
    rs = static_replicas(config)
    ids = [r.id for r in rs.replicas_for("m")]
    assert ids == ["m/endpoint-0", "m/endpoint-1", "m/endpoint-2"]
    provider = rs.get("m/endpoint-2")
    assert (provider.api, provider.base_url, provider.metrics_url) == ("anthropic", "https://api.example.com/v1", None)
    first = rs.get("m/endpoint-0")
    assert (first.base_url, first.name_at_engine, first.api_key.reveal(), first.max_concurrency) == (
        "http://h:8000/v1", "org/m-7b", "k1", 8)
    assert first.metrics_url == "http://h:8000/metrics"
    catalog = Catalog(config.models, rs)
    assert catalog.resolve("mm") == "m" and catalog.resolve("nn") == "n" and catalog.resolve("zz") is None
    assert catalog.fallbacks("m") == ("n",)
    assert catalog.names() == ["m", "n"]
    rs.add(Replica(id="x", model="extra", base_url="http://x/v1"))
    assert catalog.resolve("extra") == "extra" and "extra" in catalog.names()


def test_addresses():
    assert api_base("http://h:1/") == "http://h:1/v1" and api_base("http://h:1/v1") == "http://h:1/v1"
    assert metrics_url_for("http://h:1/v1") == "http://h:1/metrics"
    assert metrics_url_for("http://h:1/engine/v1") == "http://h:1/engine/metrics"


async def test_the_scraper_reads_the_engines_queue(sim, gateway, http):
    import asyncio

    from .conftest import HELLO, model

    engine = await sim(models=["m"], max_num_seqs=1, tpot=0.02)
    gw = await gateway([model("m", engine)], router={"scrape_interval": "50ms"})
    body = {"model": "m", "messages": HELLO, "max_tokens": 15}
    tasks = [asyncio.create_task(http.post(gw.base_url + "/chat/completions", json=body)) for _ in range(2)]
    replica = gw.gateway.replicas.get("m/endpoint-0")
    for _ in range(50):
        await asyncio.sleep(0.02)
        if replica.load.waiting == 1:
            break
    assert (replica.load.running, replica.load.waiting) == (1.0, 1.0)
    assert replica.outstanding(replica.load.at, 1.0) == 3.0  # two of ours in flight, one waiting inside
    for resp in await asyncio.gather(*tasks):
        resp.close()
