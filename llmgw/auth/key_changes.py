"""Telling every control plane that people's keys changed, within a second.

A gateway caches what a key may do for a few seconds (llmgw.auth.keys). The
process that suspends or reinstates a person (llmgw.auth.tenancy: `llmgw
users suspend`, the admin API, /admin, SCIM) forgets its own cache at once;
the gateways learn it from the store: the setting `keys.changed` takes a
new random value at each such change, and every gateway reads it every
`POLL_SECONDS` and forgets its cached keys when it moved. So a suspended
person's keys get 403 on every control plane within a second.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from llmgw.obs import logs
from llmgw.store import Store, StoreError
from llmgw.tasks import cancel_and_wait

SETTING = "keys.changed"
#: How often each gateway reads the marker.
POLL_SECONDS = 0.4

log = logs.get("llmgw.auth")


async def keys_changed(store: Store, actor: str) -> None:
    """Mark that some person's keys must be looked up again everywhere."""
    try:
        await store.set_setting(SETTING, secrets.token_hex(8), actor=actor)
    except StoreError as exc:
        log.warning("other control planes may take a few seconds to refuse a suspended person's keys: %s", exc)


async def _read(store: Store) -> object:
    setting = await store.get_setting(SETTING)
    return setting.value if setting is not None else None


def watch(store_key: web.AppKey, invalidate_of: Callable[[web.Application], Callable[[], None] | None]):
    """A cleanup context: a task forgetting this gateway's cached keys whenever the marker moves."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        store = app.get(store_key)
        task = asyncio.create_task(_loop(app, store, invalidate_of), name="llmgw-key-changes") \
            if store is not None else None
        try:
            yield
        finally:
            await cancel_and_wait(task)

    return context


async def _loop(app: web.Application, store: Store, invalidate_of) -> None:
    try:
        seen = await _read(store)
    except StoreError:
        seen = None
    while True:
        await asyncio.sleep(POLL_SECONDS)
        try:
            now = await _read(store)
        except StoreError:
            continue
        if now != seen:
            seen = now
            invalidate = invalidate_of(app)
            if invalidate is not None:
                invalidate()
