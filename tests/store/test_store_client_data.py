"""What clients keep: projects' switches, threads, memory notes, files and batches, on both backends."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from llmgw.store import Conflict, Invalid, NotFound, Store
from llmgw.store.client_data import (
    DEFAULT_CACHE_TTL,
    DEFAULT_THREAD_RETENTION,
    BatchResult,
)

from .conftest import FakeClock, Tree

HOUR = dt.timedelta(hours=1)


# ---- projects' switches ----------------------------------------------------------


async def test_features_default_off_and_change_one_at_a_time(store: Store, tree: Tree, clock: FakeClock) -> None:
    pid = tree.project.id
    first = await store.get_project_features(pid)
    assert (first.threads, first.memory, first.cache) == (False, False, False)
    assert (first.thread_retention, first.cache_ttl, first.updated_at) == (DEFAULT_THREAD_RETENTION, DEFAULT_CACHE_TTL, None)

    on = await store.set_project_features(pid, actor="ann", threads=True, thread_retention=2 * HOUR)
    assert (on.threads, on.thread_retention, on.cache, on.actor, on.updated_at) == (True, 2 * HOUR, False, "ann", clock.now)
    cached = await store.set_project_features(pid, actor="bob", cache=True, cache_ttl=dt.timedelta(minutes=5))
    assert (cached.threads, cached.thread_retention, cached.cache, cached.cache_ttl) == (
        True, 2 * HOUR, True, dt.timedelta(minutes=5))
    assert await store.get_project_features(pid) == cached
    assert [f.project_id for f in await store.list_project_features()] == [pid]

    with pytest.raises(NotFound):
        await store.set_project_features("prj-none", actor="ann", threads=True)
    with pytest.raises(Invalid, match="at least one second"):
        await store.set_project_features(pid, actor="ann", cache_ttl=dt.timedelta(0))


# ---- threads -----------------------------------------------------------------------


def turn(text: str, answer: str) -> list[dict]:
    return [{"role": "user", "content": text}, {"role": "assistant", "content": answer}]


async def test_thread_turns_in_order_per_project(store: Store, clock: FakeClock) -> None:
    assert await store.get_thread_turns("prj-a", "t-1") == []
    one = await store.append_thread_turn("prj-a", "t-1", turn("hi", "hello"), tokens=7, retention=HOUR)
    clock.advance(10)
    two = await store.append_thread_turn("prj-a", "t-1", turn("and?", "more"), tokens=5, retention=HOUR)
    assert (one.seq, two.seq) == (1, 2)
    turns = await store.get_thread_turns("prj-a", "t-1")
    assert [t.seq for t in turns] == [1, 2]
    assert turns[0].messages == tuple(turn("hi", "hello")) and turns[1].tokens == 5
    assert await store.get_thread_turns("prj-b", "t-1") == [], "a thread id reaches nothing of another project"


async def test_thread_retention_counts_from_the_last_turn(store: Store, clock: FakeClock) -> None:
    await store.append_thread_turn("prj-a", "t", turn("a", "b"), tokens=1, retention=HOUR)
    clock.advance(3000)
    await store.append_thread_turn("prj-a", "t", turn("c", "d"), tokens=1, retention=HOUR)
    clock.advance(3000)  # 100 minutes after the first turn, 50 after the last
    assert len(await store.get_thread_turns("prj-a", "t")) == 2
    assert await store.delete_expired_threads() == 0
    clock.advance(700)
    assert await store.get_thread_turns("prj-a", "t") == []
    # A lapsed thread that has not been pruned yet starts again.
    again = await store.append_thread_turn("prj-a", "t", turn("e", "f"), tokens=1, retention=HOUR)
    assert again.seq == 1
    clock.advance(7200)
    assert await store.delete_expired_threads() == 1
    assert await store.get_thread_turns("prj-a", "t") == []


async def test_thread_keeps_its_newest_turns_and_can_be_deleted(store: Store) -> None:
    for i in range(5):
        await store.append_thread_turn("prj-a", "t.x:1", turn(f"q{i}", f"a{i}"), tokens=1, keep_turns=3)
    assert [t.seq for t in await store.get_thread_turns("prj-a", "t.x:1")] == [3, 4, 5]
    assert await store.delete_thread("prj-b", "t.x:1") is False
    assert await store.delete_thread("prj-a", "t.x:1") is True
    assert await store.get_thread_turns("prj-a", "t.x:1") == []
    assert await store.delete_thread("prj-a", "t.x:1") is False


async def test_thread_inputs_are_checked(store: Store) -> None:
    with pytest.raises(Invalid, match="thread id"):
        await store.append_thread_turn("prj-a", "has space", turn("a", "b"), tokens=1)
    with pytest.raises(Invalid, match="thread id"):
        await store.get_thread_turns("prj-a", "x" * 129)
    with pytest.raises(Invalid, match="messages"):
        await store.append_thread_turn("prj-a", "t", [], tokens=1)


# ---- memory notes ---------------------------------------------------------------------


async def test_notes_put_replace_get_delete(store: Store, clock: FakeClock) -> None:
    note, created = await store.put_memory_note("prj-a", "helper", "colour", "Likes dark green.", ["preference"])
    assert created and note.tags == ("preference",) and note.created_at == note.updated_at == clock.now
    clock.advance(5)
    again, created = await store.put_memory_note("prj-a", "helper", "colour", "Likes blue now.")
    assert not created and again.created_at == note.created_at and again.updated_at == clock.now
    assert (await store.get_memory_note("prj-a", "helper", "colour")).text == "Likes blue now."
    assert await store.get_memory_note("prj-a", "other", "colour") is None
    assert await store.get_memory_note("prj-b", "helper", "colour") is None
    assert await store.delete_memory_note("prj-a", "helper", "colour") is True
    assert await store.delete_memory_note("prj-a", "helper", "colour") is False


async def test_notes_search_by_text_and_tag(store: Store, clock: FakeClock) -> None:
    await store.put_memory_note("prj-a", "default", "colour", "The user likes Dark GREEN.", ["preference", "ui"])
    clock.advance(1)
    await store.put_memory_note("prj-a", "default", "city", "Lives in Izmir.", ["preference"])
    clock.advance(1)
    await store.put_memory_note("prj-a", "default", "100%_sure", "a literal percent", ["x_y"])
    await store.put_memory_note("prj-a", "other", "colour", "green too", ["preference"])

    def keys(notes):
        return [n.key for n in notes]

    assert keys(await store.search_memory_notes("prj-a", "default", text="green")) == ["colour"]
    assert keys(await store.search_memory_notes("prj-a", "default", tag="preference")) == ["city", "colour"]
    assert keys(await store.search_memory_notes("prj-a", "default", text="CITY", tag="preference")) == ["city"]
    assert keys(await store.search_memory_notes("prj-a", "default", text="%_")) == ["100%_sure"]
    assert keys(await store.search_memory_notes("prj-a", "default", tag="x_y")) == ["100%_sure"]
    assert keys(await store.search_memory_notes("prj-a", "default", tag="xay")) == []
    assert keys(await store.search_memory_notes("prj-a", "default", limit=2)) == ["100%_sure", "city"]


async def test_notes_limits(store: Store) -> None:
    await store.put_memory_note("prj-a", "a", "k1", "one", max_notes=2)
    await store.put_memory_note("prj-a", "a", "k2", "two", max_notes=2)
    await store.put_memory_note("prj-a", "a", "k2", "two again", max_notes=2)  # a replacement is not a new note
    with pytest.raises(Conflict, match="already keeps 2 notes"):
        await store.put_memory_note("prj-a", "a", "k3", "three", max_notes=2)
    await store.put_memory_note("prj-a", "b", "k3", "three", max_notes=2)  # the limit is per agent
    with pytest.raises(Invalid, match="200 bytes"):
        await store.put_memory_note("prj-a", "a", "ü" * 101, "text")
    with pytest.raises(Invalid, match="16 KiB"):
        await store.put_memory_note("prj-a", "a", "k", "x" * (16 * 1024 + 1))
    with pytest.raises(Invalid, match="tag"):
        await store.put_memory_note("prj-a", "a", "k", "text", ["Not Lower"])
    with pytest.raises(Invalid, match="at most 16"):
        await store.put_memory_note("prj-a", "a", "k", "text", [f"t{i}" for i in range(17)])
    with pytest.raises(Invalid, match="agent"):
        await store.put_memory_note("prj-a", "bad agent", "k", "text")


# ---- files ----------------------------------------------------------------------------


async def test_files_are_kept_per_owner(store: Store, clock: FakeClock) -> None:
    content = b'{"custom_id": "a"}\n'
    f = await store.create_file("prj-a", purpose="batch", filename="in.jsonl", content=content)
    assert f.id.startswith("file-") and f.bytes == len(content) and f.expires_at is None
    assert await store.get_file("prj-a", f.id) == f
    assert await store.read_file_content("prj-a", f.id) == content
    assert await store.get_file("prj-b", f.id) is None
    assert await store.read_file_content("prj-b", f.id) is None
    assert await store.delete_file("prj-b", f.id) is False
    assert await store.delete_file("prj-a", f.id) is True
    assert await store.get_file("prj-a", f.id) is None


async def test_responses_kept_without_keys_are_the_anonymous_owners_storage(store: Store) -> None:
    import datetime as dt

    await store.create_file("anonymous", purpose="batch", filename="in.jsonl", content=b"x" * 100)
    assert await store.storage_used("anonymous") == 100
    kept = await store.put_response("resp_0123456789abcdef0123456789abcdef", scope="", model="m",
                                    messages=[{"role": "user", "content": "w" * 500}],
                                    response={"id": "resp_1", "output": []}, ttl=dt.timedelta(hours=1))
    assert kept is not None
    assert await store.storage_used("anonymous") > 600  # the file and the response
    assert await store.storage_used("prj-a") == 0


async def test_a_file_is_read_back_a_stored_piece_at_a_time(store: Store) -> None:
    import io

    content = bytes(range(256)) * (10 * 1024 + 7)  # 2.5 MiB and a bit: three pieces
    f = await store.create_file("prj-a", purpose="batch", filename="in.jsonl", content=io.BytesIO(content))
    pieces = [p async for p in await store.iter_file_content("prj-a", f.id)]
    assert [len(p) for p in pieces] == [1024 * 1024, 1024 * 1024, len(content) - 2 * 1024 * 1024]
    assert b"".join(pieces) == content
    small = await store.create_file("prj-a", purpose="batch", filename="s.jsonl", content=b"one line\n")
    assert [p async for p in await store.iter_file_content("prj-a", small.id)] == [b"one line\n"]
    assert await store.iter_file_content("prj-b", f.id) is None


async def test_files_list_in_pages_and_expire(store: Store, clock: FakeClock) -> None:
    made = []
    for i in range(5):
        made.append(await store.create_file("prj-a", purpose="batch", filename=f"{i}.jsonl", content=b"x"))
        clock.advance(1)
    later = await store.create_file("prj-a", purpose="batch_output", filename="out.jsonl", content=b"y",
                                    expires_at=clock.now + HOUR)
    newest_first = [later.id] + [f.id for f in reversed(made)]
    page1 = await store.list_files("prj-a", limit=3)
    assert [f.id for f in page1] == newest_first[:3]
    page2 = await store.list_files("prj-a", after=page1[-1].id, limit=3)
    assert [f.id for f in page2] == newest_first[3:6]
    assert [f.id for f in await store.list_files("prj-a", purpose="batch_output")] == [later.id]
    assert await store.list_files("prj-b") == []
    clock.advance(3601)
    assert await store.get_file("prj-a", later.id) is None, "an expired file is gone before it is pruned"
    assert await store.delete_expired_files() == 1
    assert len(await store.list_files("prj-a")) == 5
    with pytest.raises(Invalid, match="purpose"):
        await store.create_file("prj-a", purpose="fine-tune", filename="x", content=b"")


# ---- batches ----------------------------------------------------------------------------


async def new_batch(store: Store, owner: str = "prj-a", clock: FakeClock | None = None):
    f = await store.create_file(owner, purpose="batch", filename="in.jsonl", content=b"{}\n")
    return await store.create_batch(
        owner, key_id="key-1", principal={"key_id": "key-1", "project_id": owner},
        endpoint="/v1/chat/completions", completion_window="24h", input_file_id=f.id,
        expires_at=(clock.now if clock else dt.datetime.now(dt.UTC)) + dt.timedelta(hours=24),
        metadata={"job": "nightly"},
    )


def result(line: int, ok: bool) -> BatchResult:
    return BatchResult(line=line, custom_id=f"c{line}", ok=ok, text=json.dumps({"custom_id": f"c{line}", "ok": ok}))


async def test_batch_runs_and_ends_with_its_files(store: Store, clock: FakeClock) -> None:
    batch = await new_batch(store, clock=clock)
    assert batch.id.startswith("batch_") and batch.status == "validating" and batch.metadata == {"job": "nightly"}
    assert await store.get_batch(batch.id, owner="prj-b") is None
    assert [b.id for b in await store.list_open_batches()] == [batch.id]

    clock.advance(2)
    running = await store.set_batch_status(batch.id, "in_progress", expect=["validating"], total=3)
    assert (running.status, running.total, running.in_progress_at) == ("in_progress", 3, clock.now)
    assert await store.set_batch_status(batch.id, "in_progress", expect=["validating"]) is None

    counted = await store.record_batch_results(batch.id, [result(3, True), result(1, True)])
    assert (counted.completed, counted.failed) == (2, 0)
    counted = await store.record_batch_results(batch.id, [result(2, False), result(1, True)])
    assert (counted.completed, counted.failed) == (2, 1), "a line done again is counted once"
    assert await store.batch_lines_done(batch.id) == {1, 2, 3}

    clock.advance(2)
    done = await store.finish_batch(batch.id, "completed", output_expires_at=clock.now + HOUR)
    assert (done.status, done.completed_at, done.completed, done.failed) == ("completed", clock.now, 2, 1)
    output = await store.read_file_content("prj-a", done.output_file_id)
    errors = await store.read_file_content("prj-a", done.error_file_id)
    assert [json.loads(x)["custom_id"] for x in output.decode().splitlines()] == ["c1", "c3"]
    assert [json.loads(x)["custom_id"] for x in errors.decode().splitlines()] == ["c2"]
    out_file = await store.get_file("prj-a", done.output_file_id)
    assert out_file.purpose == "batch_output" and out_file.expires_at == clock.now + HOUR
    assert await store.batch_lines_done(batch.id) == set()
    assert await store.list_open_batches() == []
    assert await store.get_batch(batch.id, owner="prj-a") == done


async def test_batch_without_failures_has_no_error_file(store: Store) -> None:
    batch = await new_batch(store)
    await store.record_batch_results(batch.id, [result(1, True)])
    done = await store.finish_batch(batch.id, "completed")
    assert done.output_file_id and done.error_file_id is None


async def test_batch_cancel_and_list(store: Store, clock: FakeClock) -> None:
    first = await new_batch(store, clock=clock)
    clock.advance(1)
    second = await new_batch(store, clock=clock)
    clock.advance(1)
    await new_batch(store, owner="prj-b", clock=clock)
    assert [b.id for b in await store.list_batches("prj-a")] == [second.id, first.id]
    assert [b.id for b in await store.list_batches("prj-a", after=second.id)] == [first.id]

    cancelling = await store.cancel_batch("prj-a", first.id)
    assert (cancelling.status, cancelling.cancelling_at) == ("cancelling", clock.now)
    assert (await store.cancel_batch("prj-a", first.id)).status == "cancelling"
    with pytest.raises(NotFound):
        await store.cancel_batch("prj-b", first.id)
    await store.finish_batch(first.id, "cancelled")
    with pytest.raises(Conflict, match="nothing left to cancel"):
        await store.set_batch_status(second.id, "failed", errors=[{"code": "x", "message": "y"}]) and \
            await store.cancel_batch("prj-a", second.id)
    failed = await store.get_batch(second.id)
    assert failed.errors == [{"code": "x", "message": "y"}] and failed.failed_at == clock.now


async def test_an_ended_batch_is_deleted_with_its_files(store: Store, clock: FakeClock) -> None:
    batch = await new_batch(store, clock=clock)
    with pytest.raises(Conflict, match="once it has ended"):
        await store.delete_batch("prj-a", batch.id)
    await store.record_batch_results(batch.id, [result(1, True), result(2, False)])
    done = await store.finish_batch(batch.id, "completed")
    assert not await store.delete_batch("prj-b", batch.id), "another owner's batch is not theirs to delete"
    assert await store.delete_batch("prj-a", batch.id)
    assert await store.get_batch(batch.id) is None
    for file_id in (done.input_file_id, done.output_file_id, done.error_file_id):
        assert await store.get_file("prj-a", file_id) is None
    assert await store.storage_used("prj-a") == 0
    assert not await store.delete_batch("prj-a", batch.id)


async def test_a_persons_storage_counts_the_answers_of_their_personal_keys(store: Store, tree: Tree) -> None:
    """Files of a personal key are its person's; the answers it keeps are under the key: both count for the person."""
    import hashlib

    user = tree.user
    key = await store.create_key(key_hash=hashlib.sha256(b"personal").hexdigest(), prefix="llmgw-person",
                                 name="laptop", user_id=user.id)
    await store.create_file(user.id, purpose="batch", filename="in.jsonl", content=b"x" * 100)
    assert await store.storage_used(user.id) == 100
    await store.put_response("resp_0123456789abcdef0123456789abcdee", scope=key.id, model="m",
                             messages=[{"role": "user", "content": "w" * 500}],
                             response={"id": "resp_2", "output": []}, ttl=dt.timedelta(hours=1))
    assert await store.storage_used(user.id) > 600  # the file and the key's answer
    assert await store.storage_used(tree.project.id) == 0
