"""cache: an answer kept for this very request, after the limits and the input check, sent instead of
asking an engine; else the answer is kept when it comes (llmgw.router.cache.CacheKeeper)."""

from __future__ import annotations

from aiohttp import web

from llmgw.router import cache as answer_cache
from llmgw.router.stages.base import HookStage, Turn


class CacheStage(HookStage):
    name = "cache"

    async def begin(self, turn: Turn) -> web.StreamResponse | None:
        return await answer_cache.lookup(turn.gw, turn.call, turn.request, turn.body)
