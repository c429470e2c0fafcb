"""The usage journal: rows the store cannot take wait in a file beside it, and reach it when it is back."""

from __future__ import annotations

import datetime as dt
import logging
import os

from llmgw.accounting.budgets import BudgetBook
from llmgw.accounting.journal import Journal, encode_line
from llmgw.accounting.usage import JOURNAL_NAME, UsageWriter
from llmgw.store import Store, StoreError, UsageRow

from .conftest import FakeClock
from .test_usage import FailingStore, count, rows, sqlite_store  # noqa: F401


class FullDisk(FailingStore):
    async def insert_usage_rows(self, batch):
        if self.down:
            raise StoreError("sqlite: database or disk is full")
        return await super().insert_usage_rows(batch)


async def test_rows_the_store_refuses_wait_in_the_journal_and_land_after_a_restart(
    sqlite_store: Store, clock: FakeClock, tmp_path, caplog
) -> None:
    failing = FullDisk(sqlite_store)
    failing.down = True
    writer = UsageWriter(failing, flush_interval=0.01, batch_size=10, journal_dir=str(tmp_path))  # type: ignore[arg-type]
    await writer.start()
    caplog.set_level(logging.INFO, "llmgw.accounting")
    for row in rows(40, clock.now):
        writer.record(row)
        assert not await writer.flush()
    await writer.stop()  # the store still refuses: the rows stay in the journal, none lost
    assert writer.write_errors >= 40 and writer.dropped == 0 and writer.journaled == 40
    refusals = [r for r in caplog.records if r.levelno == logging.ERROR and "refuses usage rows" in r.message]
    assert len(refusals) == 1  # one error for the episode, not one per row
    assert os.stat(tmp_path / JOURNAL_NAME).st_mode & 0o777 == 0o600
    assert await count(sqlite_store, clock) == 0

    failing.down = False
    again = UsageWriter(failing, flush_interval=0.01, journal_dir=str(tmp_path))  # type: ignore[arg-type]
    await again.start()  # the next start writes the journal to the store
    assert again.journaled == 0 and await count(sqlite_store, clock) == 40
    await again.stop()
    third = UsageWriter(failing, journal_dir=str(tmp_path))  # type: ignore[arg-type]
    await third.start()  # an empty journal: nothing counted twice
    await third.stop()
    assert await count(sqlite_store, clock) == 40
    assert await sqlite_store.spend_since("key", "key-1", clock.now - dt.timedelta(hours=1)) == 40 * 7


async def test_writes_resume_when_the_store_comes_back(sqlite_store: Store, clock: FakeClock, tmp_path, caplog) -> None:
    failing = FullDisk(sqlite_store)
    failing.down = True
    writer = UsageWriter(failing, flush_interval=0.01, journal_dir=str(tmp_path))  # type: ignore[arg-type]
    await writer.start()
    caplog.set_level(logging.INFO, "llmgw.accounting")
    for row in rows(25, clock.now):
        writer.record(row)
    assert not await writer.flush()
    assert writer.journaled == 25 and writer.failing
    failing.down = False
    for row in rows(5, clock.now, start=25):
        writer.record(row)
    assert await writer.flush()
    assert (writer.journaled, writer.pending, writer.failing) == (0, 0, False)
    assert await count(sqlite_store, clock) == 30
    assert any("takes usage rows again" in r.message for r in caplog.records)
    await writer.stop()
    assert os.path.getsize(tmp_path / JOURNAL_NAME) > 0  # the room stays reserved...
    assert Journal(str(tmp_path / JOURNAL_NAME)).open() == []  # ...and holds nothing


async def test_a_journal_line_cut_short_is_skipped_and_the_rest_read(tmp_path) -> None:
    path = str(tmp_path / "j.jsonl")
    j = Journal(path, reserve=4096)
    assert j.open() == []
    j.append([{"a": 1}, {"b": "\x00\ud800"}])
    j.close()
    with open(path, "r+b") as f:  # a crash in the middle of a write: a damaged line, then a torn one
        f.seek(j.size)
        f.write(encode_line({"c": 3})[:-4].replace(b"3", b"4") + b"\n" + encode_line({"d": 4})[:7])
    again = Journal(path, reserve=4096)
    assert again.open() == [{"a": 1}, {"b": "\x00\ud800"}]
    assert again.damaged == 2
    again.append([{"e": 5}])
    again.close()
    assert Journal(path).open()[-1] == {"e": 5}


async def test_budgets_count_journaled_rows_after_a_restart(sqlite_store: Store, clock: FakeClock, tmp_path) -> None:
    failing = FullDisk(sqlite_store)
    failing.down = True
    writer = UsageWriter(failing, journal_dir=str(tmp_path))  # type: ignore[arg-type]
    await writer.start()
    for row in rows(10, clock.now):
        writer.record(row)
    await writer.stop()
    # A restart while the store still fails: the spend is the journal's.
    restarted = UsageWriter(failing, journal_dir=str(tmp_path))  # type: ignore[arg-type]
    await restarted.start()
    book = BudgetBook(failing, clock=lambda: clock.now)  # type: ignore[arg-type]
    book.pending = restarted.pending_spend
    failing.down = False  # reads work (only writes failed); spend_since sees none of the rows yet
    [state] = await book.states([("key", "key-1", "day")])
    assert state.spent == 70
    await book.close()
    await restarted.stop()


def test_a_row_of_anything_is_cleaned_for_the_store() -> None:
    from llmgw.accounting.usage_rows import clean_row, row_from_json, row_to_json
    from llmgw.store.validate import check_usage_row

    nasty = "\x00\x1b[31m\ud83d\n" + "x" * 5000
    row = UsageRow(request_id="r\x00" * 100, at=dt.datetime(2026, 1, 1), key_id=nasty, model_requested=nasty,
                   outcome="", status=9999, prompt_tokens=-5, completion_tokens=2**70, client_user=nasty,
                   tags=(nasty, "", "ok"), metadata={nasty: [float("nan"), {"k": "\ud800"}], "b": object()},
                   guard_policy=nasty)
    cleaned = clean_row(row)
    check_usage_row(cleaned, 0)  # the store's own checks pass
    assert cleaned.client_user.startswith("\\x00\\x1b[31m\\ud83d\\x0a") and cleaned.client_user.endswith("]")
    assert len(cleaned.client_user) == 256 and "…[+" in cleaned.client_user
    assert (cleaned.status, cleaned.outcome, cleaned.prompt_tokens) == (500, "unknown", 0)
    assert cleaned.completion_tokens == 2**63 - 1 and cleaned.at.tzinfo is not None
    assert cleaned.tags[1] == "ok" and len(cleaned.tags) == 2
    assert row_from_json(row_to_json(cleaned)) == cleaned
