"""Stopping background tasks, for sure.

Every long-lived loop (a scraper, a janitor, a lease renewer, the batch
worker) ends the same way at shutdown: cancelled, then waited for. Two
things make the naive `task.cancel(); await task` hang or lie:

- a task may swallow its cancellation — Python 3.11's `asyncio.wait_for`
  does when the awaited thing finishes at the moment it is cancelled — and
  go round its loop again, so the wait never ends;
- a CancelledError caught around `await task` may be the caller's own,
  meant to stop the caller, not the task's.

`cancel_and_wait` cancels again, every `recancel_after` seconds, a task
that is still running, and lets a cancellation aimed at the caller go on
up once the tasks are asked to stop. A task that ended by an error is
logged, not raised: stopping is not the place to fail.
"""

from __future__ import annotations

import asyncio
import logging

__all__ = ["cancel_and_wait"]

log = logging.getLogger("llmgw.tasks")


async def cancel_and_wait(*tasks: asyncio.Future | None, recancel_after: float = 1.0) -> None:
    """Cancel each of `tasks` (None and finished ones are skipped) and wait until every one has ended."""
    pending = {t for t in tasks if t is not None and not t.done()}
    for task in pending:
        task.cancel()
    while pending:
        _, pending = await asyncio.wait(pending, timeout=recancel_after)
        for task in pending:  # still running: it swallowed the cancellation; ask again
            task.cancel()
    for task in tasks:
        if task is None or not task.done() or task.cancelled():
            continue
        error = task.exception()
        if error is not None:
            name = task.get_name() if isinstance(task, asyncio.Task) else repr(task)
            log.error("a background task had failed before it was stopped", exc_info=error,
                      extra={"fields": {"task": name}})
