"""`/v1/rerank` and `/v1/score`: documents ordered by a reranker, and pairs of texts scored.

The shapes are the ones vLLM and llama-server serve (Jina's and Cohere's
rerank; vLLM's score), passed to the model's engine through the pipeline:
key, limits, admission, replica, a usage row with the tokens the engine
counted, metrics. A model whose engine does not serve the endpoint gets a
400 naming it (llmgw.router.passthrough).

    POST /v1/rerank  {"model", "query", "documents": [text, ...][, "top_n", "return_documents"]}
    POST /v1/score   {"model", "text_1": text or [text], "text_2": text or [text]}
"""

from __future__ import annotations

from aiohttp import web

from llmgw.router.passthrough import PassThrough
from llmgw.router.pipeline import serve


async def rerank(request: web.Request) -> web.StreamResponse:
    return await serve(request, "rerank", "/rerank", dialect=PassThrough("rerank", "/v1/rerank"))


async def score(request: web.Request) -> web.StreamResponse:
    return await serve(request, "score", "/score", dialect=PassThrough("score", "/v1/score"))


__all__ = ["rerank", "score"]
