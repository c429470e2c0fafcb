"""guard: the input checked by the key's guardrails policy after the limits and before admission (a
refusal costs nothing); a redacted body goes on, and a hook that keeps the turn sees it as checked. The
answer's own check is the engine stage's (`call.guard` wraps the stream and filters a whole answer)."""

from __future__ import annotations

from llmgw.router.errors import dumps
from llmgw.router.stages.base import Turn, span


class GuardStage:
    name = "guard"

    async def enter(self, turn: Turn) -> None:
        gw, call = turn.gw, turn.call
        if gw.guard is None or (guard := gw.guard.begin(call.principal, turn.model, call.kind)) is None:
            return
        call.guard = guard
        with span(call, "guard input"):
            turn.body = await guard.check_input(turn.body)
        if guard.changed:
            turn.body_bytes = dumps(turn.body)
            for hook in call.hooks:  # guard: a thread keeps the turn as checked, never a redacted value
                if hasattr(hook, "checked"):
                    hook.checked(turn.body)

    async def leave(self, turn: Turn) -> None:
        return None
