"""Where policies are attached, and whether the guardrails are on: two settings in the store.

`guard.attach` is a list of `{scope, id, policy}` (scope: org, team,
project, user or key; id: the store's id of it). `guard.enabled` is
`{"enabled": bool, "note": text}`; absent means on. Both are settings, so
every change is in their history with who made it, and no migration was
needed.

`llmgw ctl guard` changes them against the store; a running gateway reads
them again every `REFRESH_SECONDS` (`AttachmentWatcher`), never on a
request's path.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from llmgw.guard.policy import (
    ATTACH_SETTING,
    ENABLED_SETTING,
    Attachment,
    parse_attachments,
)
from llmgw.obs import logs
from llmgw.tasks import cancel_and_wait

__all__ = [
    "REFRESH_SECONDS",
    "AttachmentWatcher",
    "add_attachment",
    "enabled_state",
    "load_attachments",
    "remove_attachment",
    "set_enabled",
]

REFRESH_SECONDS = 5.0
log = logs.get("llmgw.guard")


async def load_attachments(store: Any) -> list[Attachment]:
    setting = await store.get_setting(ATTACH_SETTING)
    return parse_attachments(setting.value if setting is not None else None)


def enabled_state(value: Any) -> tuple[bool, str]:
    """(on, the note given when it was turned off) from the `guard.enabled` setting's value."""
    if isinstance(value, dict):
        return value.get("enabled", True) is not False, str(value.get("note") or "")
    return value is not False, ""


async def add_attachment(store: Any, attachment: Attachment, *, actor: str) -> bool:
    """Attach; False when it was attached already."""
    current = await load_attachments(store)
    if attachment in current:
        return False
    await store.set_setting(ATTACH_SETTING, [a.as_setting() for a in (*current, attachment)], actor=actor)
    return True


async def remove_attachment(store: Any, attachment: Attachment, *, actor: str) -> bool:
    """Detach; False when it was not attached."""
    current = await load_attachments(store)
    if attachment not in current:
        return False
    kept = [a.as_setting() for a in current if a != attachment]
    await store.set_setting(ATTACH_SETTING, kept, actor=actor)
    return True


async def set_enabled(store: Any, enabled: bool, *, actor: str, note: str = "") -> None:
    await store.set_setting(ENABLED_SETTING, {"enabled": enabled, "note": note}, actor=actor)


class AttachmentWatcher:
    """Keeps a GuardLayer's attachments and on/off switch as the store has them."""

    def __init__(self, layer: Any, store: Any, *, interval: float = REFRESH_SECONDS) -> None:
        self.layer = layer
        self.store = store
        self.interval = interval
        self._seen: tuple[int, int] | None = None
        self._task: asyncio.Task | None = None

    async def refresh(self) -> bool:
        """Read the settings; True when they changed and the layer was given a new book."""
        attach = await self.store.get_setting(ATTACH_SETTING)
        enabled = await self.store.get_setting(ENABLED_SETTING)
        seen = (attach.version if attach else 0, enabled.version if enabled else 0)
        if seen == self._seen:
            return False
        self._seen = seen
        on, note = enabled_state(enabled.value if enabled else None)
        book = self.layer.book.with_attachments(parse_attachments(attach.value if attach else None), enabled=on)
        self.layer.set_book(book)
        logs.event(log, "guard settings read", attachments=len(book.attachments), enabled=on,
                   note=note or None)
        return True

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="llmgw-guard-settings")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.refresh()
            except Exception as exc:  # the store may be away for a while: keep the last settings
                logs.event(log, "guard settings not read", logging.WARNING, error=str(exc))

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
