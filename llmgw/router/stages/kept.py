"""kept: the key's requests kept with their answers, as checked, when a rule asks for it
(llmgw.router.kept_requests.RequestKeeper)."""

from __future__ import annotations

from llmgw.router import kept_requests
from llmgw.router.stages.base import HookStage, Turn


class KeptStage(HookStage):
    name = "kept"

    async def begin(self, turn: Turn) -> None:
        await kept_requests.begin(turn.gw, turn.call, turn.request, turn.body)
