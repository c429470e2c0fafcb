"""threads: a thread's stored conversation put in front of the new turn (before the limits count it);
on the way out the thread keeps the turn and lets go of its lock (llmgw.router.threads.ThreadKeeper)."""

from __future__ import annotations

from llmgw.router import threads
from llmgw.router.stages.base import HookStage, Turn


class ThreadsStage(HookStage):
    name = "threads"

    async def begin(self, turn: Turn) -> None:
        turn.body_bytes, turn.body = await threads.attach(turn.gw, turn.call, turn.request, turn.body_bytes,
                                                          turn.body)
