"""Timing, slots, the prefix cache, keys, errors and metrics, over plain HTTP."""

from __future__ import annotations

import asyncio
import json
import re
import time

import aiohttp

from llmgw.simengine import SimOptions, make_app
from llmgw.simengine.metrics import METRIC_NAMES

LONG_PREFIX = " ".join(f"word{i}" for i in range(300))


def chat(content: str, **extra) -> dict:
    return {"model": "sim", "messages": [{"role": "user", "content": content}], **extra}


def metric(text: str, name: str, **labels) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


async def scrape(http, engine) -> str:
    async with http.get(engine.url + "/metrics") as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        return await r.text()


async def first_token_time(http, url: str, body: dict) -> tuple[float, dict]:
    """Seconds to the first content chunk of a stream, and the usage chunk."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    ttft, usage = None, None
    async with http.post(url + "/v1/chat/completions", json=body) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        async for line in r.content:
            if line.startswith(b"data: {") and ttft is None and b'"content":"' in line and b'"content":""' not in line:
                ttft = time.perf_counter() - started
            if b'"usage":{' in line:
                usage = json.loads(line[6:])["usage"]
    return ttft, usage


async def test_prefix_cache_reports_cached_tokens_and_lowers_ttft(sim, http):
    engine = await sim(ttft=0.01, prefill_per_token=0.0015, max_tokens_default=2)
    cold, usage1 = await first_token_time(http, engine.url, chat(LONG_PREFIX + " first question"))
    warm, usage2 = await first_token_time(http, engine.url, chat(LONG_PREFIX + " second question"))
    assert usage1["prompt_tokens_details"]["cached_tokens"] == 0
    cached = usage2["prompt_tokens_details"]["cached_tokens"]
    assert cached > 250 and cached % 16 == 0
    assert cold > 0.45 and warm < cold - 0.3
    text = await scrape(http, engine)
    assert metric(text, "vllm:prefix_cache_hits_total") == cached
    assert metric(text, "vllm:prefix_cache_queries_total") == usage1["prompt_tokens"] + usage2["prompt_tokens"]


async def test_prefix_caching_off_caches_nothing(sim, http):
    engine = await sim(prefix_caching=False)
    for _ in range(2):
        async with http.post(engine.url + "/v1/chat/completions", json=chat(LONG_PREFIX, max_tokens=1)) as r:
            body = await r.json()
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


async def test_one_slot_serializes_and_shows_a_waiting_request(sim, http):
    engine = await sim(max_num_seqs=1, ttft=0.0, tpot=0.05)
    url = engine.url + "/v1/chat/completions"

    async def ask():
        async with http.post(url, json=chat("hi", max_tokens=5)) as r:
            assert r.status == 200
            await r.json()
        return time.perf_counter()

    started = time.perf_counter()
    first = asyncio.create_task(ask())
    second = asyncio.create_task(ask())
    await asyncio.sleep(0.08)
    text = await scrape(http, engine)
    assert metric(text, "vllm:num_requests_running", model_name="sim") == 1
    assert metric(text, "vllm:num_requests_waiting", model_name="sim") == 1
    assert metric(text, "vllm:kv_cache_usage_perc") > 0
    done = sorted(await asyncio.gather(first, second))
    # Each takes 4 x 50 ms; one after the other, the second ends past 400 ms.
    assert done[0] - started < 0.35
    assert done[1] - started > 0.38
    text = await scrape(http, engine)
    assert metric(text, "vllm:num_requests_running") == 0
    assert metric(text, "vllm:num_requests_waiting") == 0
    assert metric(text, "vllm:request_success_total", finished_reason="length") == 2
    assert metric(text, "vllm:request_queue_time_seconds_sum") > 0.15


async def test_a_client_leaving_mid_stream_frees_its_slot(sim, http):
    engine = await sim(max_num_seqs=1, tpot=0.2)
    url = engine.url + "/v1/chat/completions"
    async with http.post(url, json=chat("hi", max_tokens=50, stream=True)) as r:
        await r.content.readline()  # the role chunk has come: the request runs
    for _ in range(50):
        if engine.engine.scheduler.running == 0:
            break
        await asyncio.sleep(0.02)
    assert engine.engine.scheduler.running == 0
    async with http.post(url, json=chat("hi", max_tokens=1)) as r:
        assert r.status == 200
    text = await scrape(http, engine)
    assert metric(text, "vllm:request_success_total", finished_reason="abort") == 1


async def test_api_key_is_demanded_on_the_api_only(sim, http, monkeypatch):
    engine = await sim(api_key="k-123")
    url = engine.url
    async with http.get(url + "/v1/models") as r:
        assert r.status == 401
        error = (await r.json())["error"]
        assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error"
    async with http.get(url + "/v1/models", headers={"Authorization": "Bearer wrong"}) as r:
        assert r.status == 401
    async with http.post(url + "/v1/chat/completions", json=chat("hi"),
                         headers={"Authorization": "Bearer k-123"}) as r:
        assert r.status == 200
    for open_path in ("/health", "/metrics"):
        async with http.get(url + open_path) as r:
            assert r.status == 200


async def test_errors_are_shaped_like_openai(sim, http):
    engine = await sim(context_length=100)
    url = engine.url + "/v1/chat/completions"

    async def post(data, path=url):
        kwargs = {"data": data} if isinstance(data, (str, bytes)) else {"json": data}
        async with http.post(path, **kwargs) as r:
            body = await r.json()
            assert set(body["error"]) == {"message", "type", "param", "code"}
            return r.status, body["error"]

    assert (await post(b"{not json"))[0] == 400
    assert (await post(b"[1, 2]"))[0] == 400
    status, error = await post({"model": "sim"})
    assert (status, error["param"]) == (400, "messages")
    status, error = await post({"model": "sim", "messages": [{"role": "robot", "content": "x"}]})
    assert (status, error["param"]) == (400, "messages[0].role")
    status, error = await post(chat("hi") | {"model": "gpt-9"})
    assert (status, error["code"]) == (404, "model_not_found")
    status, error = await post(chat("hi", max_tokens=200))
    assert (status, error["code"]) == (400, "context_length_exceeded")
    status, error = await post(chat("hi", n=0))
    assert (status, error["param"]) == (400, "n")
    status, error = await post(chat("hi", tools=[{"type": "function", "function": {"name": "f"}}],
                                    tool_choice={"type": "function", "function": {"name": "g"}}))
    assert (status, error["param"]) == (400, "tool_choice")
    status, error = await post({"model": "sim"}, engine.url + "/v1/completions")
    assert (status, error["param"]) == (400, "prompt")
    status, error = await post({"model": "sim"}, engine.url + "/v1/embeddings")
    assert (status, error["param"]) == (400, "input")


async def test_fail_rate_answers_500(sim, http):
    engine = await sim(fail_rate=1.0)
    async with http.post(engine.url + "/v1/chat/completions", json=chat("hi")) as r:
        assert r.status == 500
        assert (await r.json())["error"]["type"] == "server_error"
    half = await sim(fail_rate=0.5, seed=4)
    statuses = []
    for _ in range(40):
        async with http.post(half.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}) as r:
            statuses.append(r.status)
    assert 5 < statuses.count(500) < 35 and statuses.count(200) + statuses.count(500) == 40


async def test_metrics_carry_vllm_names(sim, http):
    engine = await sim()
    async with http.post(engine.url + "/v1/chat/completions", json=chat("hi", max_tokens=3)) as r:
        usage = (await r.json())["usage"]
    text = await scrape(http, engine)
    for name in METRIC_NAMES:
        assert re.search(rf"^{re.escape(name)}(_count|_sum|_bucket)?{{.*model_name=\"sim\"", text, re.M), name
    assert metric(text, "vllm:prompt_tokens_total") == usage["prompt_tokens"]
    assert metric(text, "vllm:generation_tokens_total") == 3
    assert metric(text, "vllm:time_to_first_token_seconds_count") == 1
    assert metric(text, "vllm:e2e_request_latency_seconds_count") == 1


async def test_each_engine_has_its_own_metrics(sim, http):
    one, two = await sim(), await sim()
    async with http.post(one.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}) as r:
        assert r.status == 200
    assert metric(await scrape(http, one), "vllm:generation_tokens_total") == 2
    assert metric(await scrape(http, two), "vllm:generation_tokens_total") == 0


async def test_tokenize_and_health_and_version(sim, http):
    engine = await sim()
    async with http.post(engine.url + "/tokenize",
                         json={"model": "sim", "prompt": "Hello, world", "return_token_strs": True}) as r:
        body = await r.json()
    assert body["count"] == 3 and body["token_strs"] == ["Hello", ",", "world"]
    assert len(body["tokens"]) == 3 and body["max_model_len"] == 8192
    async with http.post(engine.url + "/tokenize", json=chat("Hello")) as r:
        tokens = (await r.json())["count"]
    async with http.post(engine.url + "/v1/chat/completions", json=chat("Hello", max_tokens=1)) as r:
        assert (await r.json())["usage"]["prompt_tokens"] == tokens
    async with http.get(engine.url + "/health") as r:
        assert r.status == 200
    async with http.get(engine.url + "/version") as r:
        assert "version" in await r.json()


async def test_make_app_works_with_aiohttp_test_client(aiohttp_client):
    client = await aiohttp_client(make_app(SimOptions(models=["a"], ttft=0, tpot=0)))
    r = await client.get("/v1/models")
    assert [m["id"] for m in (await r.json())["data"]] == ["a"]
    r = await client.post("/v1/chat/completions", json={"model": "a", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url"}]}]})
    assert (await r.json())["usage"]["prompt_tokens"] > 0


async def test_zero_latency_answers_at_once(sim, http):
    engine = await sim(ttft=0, prefill_per_token=0, tpot=0)
    started = time.perf_counter()
    for _ in range(20):
        async with http.post(engine.url + "/v1/chat/completions",
                             json=chat("hi", max_tokens=64, stream=True)) as r:
            async for _line in r.content:
                pass
    assert time.perf_counter() - started < 1.0


async def test_a_long_prompt_body_is_taken(sim, http):
    engine = await sim(context_length=1_000_000)
    big = "word " * 300_000  # about 1.5 MB, past aiohttp's default body limit
    async with http.post(engine.url + "/v1/completions", json={"prompt": big, "max_tokens": 1}) as r:
        assert r.status == 200
        assert (await r.json())["usage"]["prompt_tokens"] == 300_000


async def test_a_timeout_while_waiting_leaves_the_queue(sim, http):
    engine = await sim(max_num_seqs=1, tpot=0.1)
    url = engine.url + "/v1/chat/completions"
    holder = asyncio.create_task(http.post(url, json=chat("hi", max_tokens=4)))
    await asyncio.sleep(0.03)
    try:
        async with http.post(url, json=chat("hi", max_tokens=1),
                             timeout=aiohttp.ClientTimeout(total=0.05)) as r:
            await r.read()
    except asyncio.TimeoutError:
        pass
    for _ in range(50):
        if engine.engine.scheduler.waiting == 0:
            break
        await asyncio.sleep(0.01)
    assert engine.engine.scheduler.waiting == 0
    (await holder).close()
