"""Stopping a background task without swallowing a cancellation meant for the caller."""

from __future__ import annotations

import asyncio


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancel `task` and wait until it has ended.

    The CancelledError of `task` itself is absorbed; one aimed at the caller
    (who may be cancelled while waiting) is not, or a task stopping another
    from inside a cancellation would carry on as if nothing had happened.
    """
    if task is None or task.done():
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
