"""Stopping background tasks: a swallowed cancellation cannot hang a shutdown."""

from __future__ import annotations

import asyncio
import logging

import pytest

from llmgw.tasks import cancel_and_wait


async def test_a_task_that_swallows_its_cancellation_is_asked_again():
    asked = 0

    async def stubborn():
        nonlocal asked
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                asked += 1
                if asked == 1:
                    continue  # as Python 3.11's wait_for can: the cancellation is lost
                raise

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task, recancel_after=0.05), 5)
    assert task.cancelled() and asked == 2


async def test_none_and_finished_tasks_are_skipped():
    done = asyncio.create_task(asyncio.sleep(0))
    await done
    await cancel_and_wait(None, done)


async def test_the_callers_own_cancellation_goes_on_up():
    let_go = asyncio.Event()

    async def holds_on():
        while not let_go.is_set():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(holds_on())
    await asyncio.sleep(0)
    stopping = asyncio.create_task(cancel_and_wait(task, recancel_after=10))
    await asyncio.sleep(0.05)
    stopping.cancel()  # the caller is told to stop while it waits
    with pytest.raises(asyncio.CancelledError):
        await stopping
    let_go.set()
    await cancel_and_wait(task, recancel_after=0.05)
    assert task.done()


async def test_a_task_that_failed_is_logged_not_raised(caplog):
    async def broken():
        raise RuntimeError("boom")

    task = asyncio.create_task(broken(), name="broken-loop")
    await asyncio.sleep(0)
    with caplog.at_level(logging.ERROR, logger="llmgw.tasks"):
        await cancel_and_wait(task)
    assert "had failed" in caplog.text
