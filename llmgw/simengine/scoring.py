"""Rerank and score as vLLM serves them for a reranker (`--task score`), from the simulated embeddings.

A pair's score is the cosine of the two texts' vectors (llmgw.simengine.embeddings)
moved into 0..1, so texts sharing words score higher than texts sharing
none, the same on every run. An engine started with `--task generate` (the
default) answers these paths 400, in vLLM's words for a model that is not
a reranker.

    POST /v1/rerank, /rerank  {"model", "query", "documents"[, "top_n", "return_documents"]}
    POST /v1/score            {"model", "text_1", "text_2"}
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from llmgw.simengine import embeddings
from llmgw.simengine.engine import request_id
from llmgw.simengine.protocol import APIError, Prompt, bad, read_json, served_model
from llmgw.simengine.tokens import tokenize

NOT_A_RERANKER = "The model does not support Rerank (Score) API"


def _texts(value: Any, param: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        out = []
        for item in value:
            if isinstance(item, dict) and isinstance(item.get("text"), str):
                item = item["text"]
            if not isinstance(item, str):
                raise bad(param, f"'{param}' must be a string or a list of strings")
            out.append(item)
        return out
    raise bad(param, f"'{param}' must be a string or a non-empty list of strings")


def _score(a: Prompt, b: Prompt, dim: int) -> float:
    va = embeddings.embed(a.text, a.tokens, dim)
    vb = embeddings.embed(b.text, b.tokens, dim)
    cosine = sum(x * y for x, y in zip(va, vb))
    return round(max(0.0, min(1.0, (cosine + 1.0) / 2.0)), 6)


def _prompt(text: str) -> Prompt:
    return Prompt(text, tokenize(text))


async def _scored(request: web.Request, pairs: list[tuple[Prompt, Prompt]],
                  model: str) -> tuple[list[float], int]:
    """The pairs' scores and the prompt tokens read, run through the engine as a batch would be
    (its slots, its latency, its metrics)."""
    from llmgw.simengine.server import ENGINE

    engine = request.app[ENGINE]
    engine.maybe_fail()
    prompts = [Prompt(a.text + "\n" + b.text, a.tokens + b.tokens) for a, b in pairs]
    arrival = asyncio.get_running_loop().time()
    async with engine.running(model, prompts, 0, arrival) as run:
        await run.first_token()
        run.done(0, 0, "stop")
    return [_score(a, b, engine.options.embedding_dim) for a, b in pairs], run.prompt_tokens


def _reranker(request: web.Request, body: dict) -> str:
    from llmgw.simengine.server import ENGINE

    engine = request.app[ENGINE]
    model = served_model(body, engine.options)
    if engine.options.task != "score":
        raise APIError(400, NOT_A_RERANKER, code="bad_request", type="BadRequestError")
    return model


async def rerank_handler(request: web.Request) -> web.Response:
    try:
        body = await read_json(request)
        model = _reranker(request, body)
        query = body.get("query")
        if not isinstance(query, str):
            raise bad("query", "'query' (a string) is required")
        documents = _texts(body.get("documents"), "documents")
        top_n = body.get("top_n") or 0
        if not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 0:
            raise bad("top_n", "'top_n' must be a whole number, 0 or more")
        q = _prompt(query)
        scores, tokens = await _scored(request, [(q, _prompt(d)) for d in documents], model)
    except APIError as exc:
        return exc.response()
    order = sorted(range(len(documents)), key=lambda i: (-scores[i], i))
    if top_n:
        order = order[:top_n]
    results = [{"index": i, "document": {"text": documents[i]}, "relevance_score": scores[i]} for i in order]
    return web.json_response({"id": request_id("rerank-"), "model": model, "results": results,
                              "usage": {"total_tokens": tokens}})


async def score_handler(request: web.Request) -> web.Response:
    try:
        body = await read_json(request)
        model = _reranker(request, body)
        first = _texts(body.get("text_1"), "text_1")
        second = _texts(body.get("text_2"), "text_2")
        if len(first) == 1:
            pairs = [(first[0], t) for t in second]
        elif len(first) == len(second):
            pairs = list(zip(first, second))
        else:
            raise bad("text_1", "text_1 is one text, or as many as text_2")
        scores, tokens = await _scored(request, [(_prompt(a), _prompt(b)) for a, b in pairs], model)
    except APIError as exc:
        return exc.response()
    return web.json_response({
        "id": request_id("score-"), "object": "list", "created": int(time.time()), "model": model,
        "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}})


__all__ = ["NOT_A_RERANKER", "rerank_handler", "score_handler"]
