"""`/v1/rerank` and `/v1/score` through the gateway to a simulated reranker (`--task score`), over HTTP."""

from __future__ import annotations

from .conftest import model, principal

DOCS = ["Rivers carry water to the sea.", "The stock market fell today.",
        "A river delta forms where rivers meet the sea."]


async def test_rerank_orders_documents_and_is_one_usage_row(sim, gateway, http):
    engine = await sim(models=["rr"], task="score")
    gw = await gateway([model("rr", engine)], keys={"sk-a": principal("key-a")})
    async with http.post(gw.base_url + "/rerank", headers={"Authorization": "Bearer sk-a"},
                         json={"model": "rr", "query": "rivers and the sea", "documents": DOCS, "top_n": 2}) as resp:
        assert resp.status == 200
        body = await resp.json()
        request_id = resp.headers["x-llmgw-request-id"]
    results = body["results"]
    assert len(results) == 2 and [r["index"] for r in results] != [1, 0]
    assert results[0]["relevance_score"] >= results[1]["relevance_score"]
    assert 1 not in [r["index"] for r in results], "the unrelated document is ranked last"
    assert results[0]["document"]["text"] == DOCS[results[0]["index"]]
    assert body["usage"]["total_tokens"] > 0
    row = gw.accountant.row(request_id)
    assert (row.model_requested, row.model_served, row.status, row.outcome) == ("rr", "rr", 200, "ok")
    assert row.prompt_tokens == body["usage"]["total_tokens"] and row.completion_tokens == 0
    assert row.key_id == "key-a"
    assert 'llmgw_requests_total{model="rr",outcome="ok"} 1.0' in gw.metrics.exposition().decode()


async def test_score_pairs_texts(sim, gateway, http):
    engine = await sim(models=["rr"], task="score")
    gw = await gateway([model("rr", engine)])
    async with http.post(gw.base_url + "/score",
                         json={"model": "rr", "text_1": "rivers", "text_2": ["rivers", "markets"]}) as resp:
        assert resp.status == 200
        body = await resp.json()
    (same, other) = body["data"]
    assert body["object"] == "list" and same["object"] == "score" and (same["index"], other["index"]) == (0, 1)
    assert same["score"] > other["score"]
    rows = await gw.settle(1)
    assert rows[0].prompt_tokens == body["usage"]["prompt_tokens"] > 0


async def test_a_model_that_does_not_rerank_is_a_clear_400(sim, gateway, http):
    engine = await sim(models=["chat"])  # --task generate
    gw = await gateway([model("chat", engine)])
    for path, body in (("/rerank", {"model": "chat", "query": "q", "documents": ["d"]}),
                       ("/score", {"model": "chat", "text_1": "a", "text_2": "b"})):
        async with http.post(gw.base_url + path, json=body) as resp:
            assert resp.status == 400
            error = (await resp.json())["error"]
        assert error["code"] == "unsupported_endpoint" and error["param"] == "model"
        assert "'chat' does not serve /v1" + path in error["message"]
    replica = next(iter(gw.gateway.replicas))
    assert replica.usable(), "a model that does not rerank is not an unhealthy replica"


async def test_an_engine_without_the_endpoint_and_llama_servers_501_are_400s(gateway, http):
    from aiohttp import web

    async def not_implemented(request):
        return web.json_response({"error": {"code": 501, "message": "This server does not support reranking. "
                                            "Start it with `--reranking`", "type": "not_supported_error"}},
                                 status=501)

    app = web.Application()
    app.router.add_post("/v1/rerank", not_implemented)
    app.router.add_get("/v1/models", lambda r: web.json_response({"object": "list", "data": [{"id": "l"}]}))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        gw = await gateway([model("l", url)])
        for path in ("/rerank", "/score"):  # 501, then 404 (no such route)
            async with http.post(gw.base_url + path, json={"model": "l", "query": "q", "documents": ["d"],
                                                           "text_1": "a", "text_2": "b"}) as resp:
                assert resp.status == 400, await resp.text()
                assert (await resp.json())["error"]["code"] == "unsupported_endpoint"
    finally:
        await runner.cleanup()


async def test_bad_rerank_bodies_name_the_field(sim, gateway, http):
    engine = await sim(models=["rr"], task="score")
    gw = await gateway([model("rr", engine)])
    for body, field in (({"model": "rr", "query": "q"}, "documents"), ({"model": "rr", "query": "q", "documents": []},
                                                                       "documents"),
                        ({"model": "rr", "query": 3, "documents": ["d"]}, "query"),
                        ({"model": "rr", "query": "q", "documents": ["d"], "top_n": -1}, "top_n")):
        async with http.post(gw.base_url + "/rerank", json=body) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["param"] == field


async def test_a_key_over_its_limit_is_refused_a_rerank_and_the_refusal_recorded(sim, gateway, http):
    from llmgw.accounting.api import LimitExceeded

    engine = await sim(models=["rr"], task="score")
    gw = await gateway([model("rr", engine)], keys={"sk-a": principal("key-a")})
    gw.accountant.refuse["rr"] = LimitExceeded("rate_limit_exceeded", "project prj-1 is over 10 requests a minute",
                                               scope="project", retry_after=7)
    async with http.post(gw.base_url + "/rerank", headers={"Authorization": "Bearer sk-a"},
                         json={"model": "rr", "query": "q", "documents": ["d"]}) as resp:
        assert resp.status == 429 and resp.headers["Retry-After"] == "7"
        assert (await resp.json())["error"]["code"] == "rate_limit_exceeded"
    (row,) = await gw.settle(1)
    assert (row.status, row.outcome, row.replica) == (429, "refused", "")
