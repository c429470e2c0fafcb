"""Responses API answers kept so a follow-up can continue them (`previous_response_id`).

Each answer is kept with the conversation that led to it, as chat
messages, for `RETENTION`; a follow-up naming it gets those messages in
front of its own input. Only the project that made an answer (or, without
a project, its key) may continue it, read it or delete it.

With a store the answers are in its `responses` table, pruned to at most
`MAX_KEPT` rows, so every control plane reads them; the latest are also
held in memory, which is what makes a follow-up sent the moment a stream
ends find its answer before the write is done. Without a store (a gateway
built without one, as in tests) memory alone keeps the latest
`MEMORY_KEPT`, until a restart.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from llmgw.auth.principal import Principal
from llmgw.obs import logs
from llmgw.router.errors import GatewayError, dumps
from llmgw.store import Store, StoredResponse, StoreError

log = logs.get("llmgw.router.responses")

#: How long an answer can be continued.
RETENTION = dt.timedelta(days=30)
#: Rows kept in the store at most; the oldest go first.
MAX_KEPT = 100_000
#: Answers held in memory at most.
MEMORY_KEPT = 2_000
#: A conversation larger than this (as JSON) is not kept: a follow-up naming it is refused.
MAX_CONVERSATION_BYTES = 16 * 1024 * 1024
#: Seconds between two prunings of the store's table.
PRUNE_EVERY = 600.0


def scope_of(principal: Principal) -> str:
    """Who may continue an answer: its project, else its key; "" when keys are off."""
    return principal.project_id or principal.key_id or ""


class ResponseLog:
    def __init__(self, store: Callable[[], Store | None]) -> None:
        self._store = store
        self._memory: OrderedDict[str, StoredResponse] = OrderedDict()
        self._pruned_at = 0.0

    def remember(self, response_id: str, *, scope: str, model: str, messages: list[dict],
                 response: dict) -> StoredResponse | None:
        """Hold an answer in memory at once; `keep` then writes it to the store."""
        size = len(dumps(messages))
        if size > MAX_CONVERSATION_BYTES:
            logs.event(log, "response not kept: its conversation is too large", logging.WARNING,
                       response_id=response_id, bytes=size)
            return None
        now = dt.datetime.now(dt.UTC)
        kept = StoredResponse(id=response_id, scope=scope, model=model, messages=messages, response=response,
                              created_at=now, expires_at=now + RETENTION)
        self._memory[response_id] = kept
        self._memory.move_to_end(response_id)
        while len(self._memory) > MEMORY_KEPT:
            self._memory.popitem(last=False)
        return kept

    async def keep(self, kept: StoredResponse) -> None:
        """Write a remembered answer to the store (when there is one); a failure is logged, not raised:
        the answer was already given."""
        store = self._store()
        if store is None:
            return
        try:
            await store.put_response(kept.id, scope=kept.scope, model=kept.model, messages=kept.messages,
                                     response=kept.response, ttl=RETENTION)
            if time.monotonic() - self._pruned_at > PRUNE_EVERY:
                self._pruned_at = time.monotonic()
                removed = await store.prune_responses(keep_at_most=MAX_KEPT)
                if removed:
                    logs.event(log, "responses pruned", removed=removed)
        except StoreError as exc:
            logs.event(log, "keeping a response failed", logging.WARNING, response_id=kept.id, error=str(exc))

    async def find(self, response_id: str, scope: str) -> StoredResponse | None:
        """The answer, when it exists, has not expired and belongs to `scope`."""
        kept = self._memory.get(response_id)
        if kept is None:
            store = self._store()
            if store is not None:
                try:
                    kept = await store.get_response(response_id)
                except StoreError as exc:
                    raise GatewayError(503, "store_unavailable",
                                       f"kept responses cannot be read now ({exc}); try again") from None
        if kept is None or kept.scope != scope or kept.expires_at <= dt.datetime.now(dt.UTC):
            return None
        return kept

    async def forget(self, response_id: str, scope: str) -> bool:
        if await self.find(response_id, scope) is None:
            return False
        self._memory.pop(response_id, None)
        store = self._store()
        if store is not None:
            try:
                await store.delete_response(response_id)
            except StoreError as exc:
                raise GatewayError(503, "store_unavailable",
                                   f"kept responses cannot be changed now ({exc}); try again") from None
        return True
