"""Files and batches through the official openai SDK, run by the batch worker in front of simulated engines."""

from __future__ import annotations

import datetime as dt
import json

import openai
import pytest

from llmgw.router.batch_worker import LEASE_NAME, parse_input, read_input

from .conftest import HELLO, model
from .stored import get_json, wait_for


def jsonl(lines: list[dict]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def chat_line(i: int, model_name: str = "m", url: str = "/v1/chat/completions") -> dict:
    return {"custom_id": f"doc-{i}", "method": "POST", "url": url,
            "body": {"model": model_name, "messages": [{"role": "user", "content": f"Summarise document {i}."}],
                     "max_tokens": 4}}


async def until_done(client: openai.AsyncOpenAI, batch_id: str, timeout: float = 30.0):
    async def ended():
        batch = await client.batches.retrieve(batch_id)
        return batch if batch.status in ("completed", "failed", "expired", "cancelled") else None

    return await wait_for(ended, timeout=timeout, every=0.1)


async def results(client: openai.AsyncOpenAI, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    content = await client.files.content(file_id)
    return [json.loads(line) for line in content.text.splitlines()]


async def test_a_batch_of_100_lines_completes(stored_gateway, sim):
    engine = await sim(models=["m"])
    sg = await stored_gateway([model("m", engine)])
    bands: list[str] = []
    admission = sg.running.gateway.admission
    acquire = admission.acquire

    async def spy(model_name, band, want):
        bands.append(band)
        return await acquire(model_name, band, want)

    admission.acquire = spy
    client = sg.client()
    uploaded = await client.files.create(file=("requests.jsonl", jsonl([chat_line(i) for i in range(100)])),
                                         purpose="batch")
    assert (uploaded.purpose, uploaded.filename, uploaded.status) == ("batch", "requests.jsonl", "processed")
    batch = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                        completion_window="24h", metadata={"job": "nightly"})
    assert batch.status in ("validating", "in_progress") and batch.metadata == {"job": "nightly"}

    done = await until_done(client, batch.id)
    assert done.status == "completed"
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (100, 100, 0)
    assert done.error_file_id is None and done.completed_at >= done.in_progress_at >= done.created_at
    lines = await results(client, done.output_file_id)
    assert sorted(r["custom_id"] for r in lines) == sorted(f"doc-{i}" for i in range(100))
    first = lines[0]
    assert first["response"]["status_code"] == 200 and first["error"] is None
    assert first["response"]["body"]["choices"][0]["message"]["content"]
    assert first["response"]["request_id"].startswith("req_")

    rows = [r for r in await sg.running.settle(100) if f"batch={batch.id}" in r.tags]
    assert len(rows) == 100 and {r.key_id for r in rows} == {"key-a"}
    assert all(r.completion_tokens == 4 and r.outcome == "ok" for r in rows)
    assert set(bands) == {"bronze"}, "batch lines wait in the lowest band"
    output = await client.files.retrieve(done.output_file_id)
    assert output.purpose == "batch_output"
    assert dt.timedelta(days=29) < dt.datetime.fromtimestamp(output.expires_at, dt.UTC) - dt.datetime.now(dt.UTC)
    with pytest.raises(openai.ConflictError):
        await client.batches.cancel(batch.id)  # it has ended: nothing left to cancel
    lease = await sg.store.get_lease(LEASE_NAME)
    assert lease is not None and lease.holder == sg.data.worker.holder


async def test_failed_lines_go_to_the_error_file_with_their_custom_id(stored_gateway, sim):
    engine = await sim(models=["e"])
    sg = await stored_gateway([model("e", engine)])
    client = sg.client()
    lines = [{"custom_id": f"v{i}", "url": "/v1/embeddings", "method": "POST",
              "body": {"model": "e", "input": f"text {i}"}} for i in range(5)]
    lines[2]["body"]["model"] = "nope"
    uploaded = await client.files.create(file=("emb.jsonl", jsonl(lines)), purpose="batch")
    batch = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings",
                                        completion_window="24h")
    done = await until_done(client, batch.id)
    assert done.status == "completed"
    assert (done.request_counts.completed, done.request_counts.failed) == (4, 1)
    good = await results(client, done.output_file_id)
    bad = await results(client, done.error_file_id)
    assert [r["custom_id"] for r in good] == ["v0", "v1", "v3", "v4"]
    assert len(good[0]["response"]["body"]["data"][0]["embedding"]) > 0
    assert [r["custom_id"] for r in bad] == ["v2"]
    assert bad[0]["response"]["status_code"] == 404
    assert bad[0]["response"]["body"]["error"]["code"] == "model_not_found"


async def test_a_file_with_bad_lines_fails_the_batch(stored_gateway, sim):
    engine = await sim(models=["m"])
    sg = await stored_gateway([model("m", engine)])
    client = sg.client()
    lines = [chat_line(0), chat_line(0), chat_line(2, url="/v1/embeddings"), {"custom_id": "x", "body": {}}]
    uploaded = await client.files.create(file=("bad.jsonl", jsonl(lines) + b"not json\n"), purpose="batch")
    batch = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                        completion_window="24h")
    done = await until_done(client, batch.id)
    assert done.status == "failed" and done.failed_at
    assert [(e.code, e.line) for e in done.errors.data] == [
        ("duplicate_custom_id", 2), ("mismatched_endpoint", 3), ("invalid_body", 4), ("invalid_json_line", 5)]
    assert not [r for r in sg.accountant.rows if f"batch={batch.id}" in r.tags], "no line of it ran"


async def test_a_cancelled_batch_says_what_ran_and_what_did_not(stored_gateway, sim):
    engine = await sim(models=["m"], tpot=0.05)
    sg = await stored_gateway([model("m", engine, concurrency=1)], router={"batch": {"concurrency": 1}})
    client = sg.client()
    uploaded = await client.files.create(file=("slow.jsonl", jsonl([chat_line(i) for i in range(30)])),
                                         purpose="batch")
    batch = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                        completion_window="24h")

    async def started():
        b = await client.batches.retrieve(batch.id)
        return b.request_counts.completed >= 2

    await wait_for(started)
    cancelling = await client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    done = await until_done(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at
    good = await results(client, done.output_file_id)
    bad = await results(client, done.error_file_id)
    assert sorted(r["custom_id"] for r in good + bad) == sorted(f"doc-{i}" for i in range(30))
    assert good and bad and all(r["error"]["code"] == "batch_cancelled" for r in bad)
    assert all(r["response"]["status_code"] == 200 for r in good)
    assert (await client.batches.cancel(batch.id)).status == "cancelled", "cancelling again changes nothing"


async def test_only_the_lease_holder_runs_batches(stored_gateway, sim):
    engine = await sim(models=["m"])
    sg = await stored_gateway([model("m", engine)])
    assert await sg.store.try_acquire_lease(LEASE_NAME, "another-control-plane", 60)
    client = sg.client()
    uploaded = await client.files.create(file=("r.jsonl", jsonl([chat_line(i) for i in range(3)])), purpose="batch")
    batch = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                        completion_window="24h")
    await sg.data.worker.round()
    assert (await client.batches.retrieve(batch.id)).status == "validating", "another control plane holds it"
    await sg.store.release_lease(LEASE_NAME, "another-control-plane")
    sg.data.worker.wake()
    done = await until_done(client, batch.id)
    assert (done.status, done.request_counts.completed) == ("completed", 3)


async def test_files_belong_to_their_project(stored_gateway, http):
    sg = await stored_gateway([model("m", "http://127.0.0.1:9/v1")])
    mine, theirs = sg.client(), sg.client("sk-b")
    uploaded = await mine.files.create(file=("a.jsonl", jsonl([chat_line(1)])), purpose="batch")
    assert [f.id for f in (await mine.files.list()).data] == [uploaded.id]
    assert (await theirs.files.list()).data == []
    with pytest.raises(openai.NotFoundError):
        await theirs.files.retrieve(uploaded.id)
    with pytest.raises(openai.NotFoundError):
        await theirs.files.content(uploaded.id)
    with pytest.raises(openai.NotFoundError):
        await theirs.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                    completion_window="24h")
    assert (await mine.files.content(uploaded.id)).content == jsonl([chat_line(1)])
    with pytest.raises(openai.BadRequestError):
        await mine.files.create(file=("a.jsonl", b"{}\n"), purpose="fine-tune")
    with pytest.raises(openai.BadRequestError):
        await mine.batches.create(input_file_id=uploaded.id, endpoint="/v1/audio/speech", completion_window="24h")
    with pytest.raises(openai.BadRequestError):
        await mine.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="soon")
    deleted = await mine.files.delete(uploaded.id)
    assert deleted.deleted is True
    with pytest.raises(openai.NotFoundError):
        await mine.files.retrieve(uploaded.id)
    status, body, _ = await get_json(http, "GET", f"{sg.url}/v1/batches", headers=sg.headers())
    assert (status, body["data"], body["has_more"]) == (200, [], False)


async def test_batches_run_on_a_gateway_without_keys(stored_gateway, sim):
    engine = await sim(models=["m"])
    sg = await stored_gateway([model("m", engine)], keys_required=False)
    client = sg.client("none")
    uploaded = await client.files.create(file=("r.jsonl", jsonl([chat_line(i) for i in range(3)])), purpose="batch")
    batch = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                        completion_window="1h")
    done = await until_done(client, batch.id)
    assert (done.status, done.request_counts.completed) == ("completed", 3)
    listed = await client.batches.list()
    assert [b.id for b in listed.data] == [batch.id]
    await client.chat.completions.create(model="m", messages=HELLO, max_tokens=2)


async def test_the_input_is_read_line_by_line_across_stored_pieces():
    content = jsonl([chat_line(i) for i in range(5)]) + b"\n" + b'{"custom_id": "doc-1"}'

    async def pieces():
        for at in range(0, len(content), 37):  # lines cut anywhere, newlines included
            yield content[at:at + 37]

    lines, errors = await read_input(pieces(), "/v1/chat/completions", 10)
    assert [line.custom_id for line in lines] == [f"doc-{i}" for i in range(5)]
    assert [(e["code"], e["line"]) for e in errors] == [("duplicate_custom_id", 7)]
    assert (lines, errors) == parse_input(content, "/v1/chat/completions", 10)


async def test_a_large_file_downloads_whole_and_a_batch_runs_from_it(stored_gateway, sim):
    engine = await sim(models=["m"])
    sg = await stored_gateway([model("m", engine)])
    client = sg.client()
    pad = "x" * 450_000  # lines of near half a stored piece, so one runs across two pieces
    rows = [{**chat_line(i), "body": {**chat_line(i)["body"], "user": pad}} for i in range(3)]
    uploaded = await client.files.create(file=("big.jsonl", jsonl(rows)), purpose="batch")
    assert uploaded.bytes > 1024 * 1024
    assert (await client.files.content(uploaded.id)).content == jsonl(rows)
    batch = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                        completion_window="24h")
    done = await until_done(client, batch.id)
    assert (done.status, done.request_counts.completed, done.request_counts.total) == ("completed", 3, 3)


def test_parse_input_checks_every_line():
    lines, errors = parse_input(jsonl([chat_line(1), chat_line(2)]) + b"\n\n", "/v1/chat/completions", 10)
    assert [line.custom_id for line in lines] == ["doc-1", "doc-2"] and errors == []
    lines, errors = parse_input(jsonl([chat_line(i) for i in range(3)]), "/v1/chat/completions", 2)
    assert errors[0]["code"] == "too_many_requests"
    _, errors = parse_input(b"\xff\xfe", "/v1/chat/completions", 10)
    assert errors[0]["code"] == "invalid_file"
    _, errors = parse_input(b"", "/v1/chat/completions", 10)
    assert errors[0]["code"] == "empty_file"
