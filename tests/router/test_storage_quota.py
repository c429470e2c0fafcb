"""router.clients.project_storage_bytes: what one project keeps is bounded, and a refusal says what to do."""

from __future__ import annotations

import openai
import pytest

from .conftest import model
from .stored import get_json, recorder, stored_gateway  # noqa: F401

QUOTA = {"clients": {"project_storage_bytes": "64KiB"}}


async def test_uploads_past_the_quota_are_413_naming_it_and_deleting_makes_room(stored_gateway):
    sg = await stored_gateway([model("m", "http://127.0.0.1:9/v1")], router=QUOTA)
    client = sg.client()
    first = await client.files.create(file=("a.jsonl", b"x" * 40_000), purpose="batch")
    with pytest.raises(openai.APIStatusError) as caught:
        await client.files.create(file=("b.jsonl", b"y" * 40_000), purpose="batch")
    error = caught.value.body
    assert caught.value.status_code == 413 and error["code"] == "storage_quota_exceeded"
    assert "router.clients.project_storage_bytes" in error["message"] and "delete files" in error["message"]
    assert [f.id for f in (await client.files.list()).data] == [first.id]  # nothing kept of the refused one
    # another project is not held by this one's files
    await sg.client("sk-b").files.create(file=("c.jsonl", b"z" * 40_000), purpose="batch")
    await client.files.delete(first.id)
    await client.files.create(file=("b.jsonl", b"y" * 40_000), purpose="batch")


async def test_memory_notes_threads_and_batches_count_against_the_quota(stored_gateway, http):
    sg = await stored_gateway([model("m", "http://127.0.0.1:9/v1")], router=QUOTA)
    await sg.turn_on(memory=True, threads=True)
    await sg.client().files.create(file=("a.jsonl", b"x" * 60_000), purpose="batch")
    status, body, _ = await get_json(http, "PUT", f"{sg.url}/v1/memory/k", headers=sg.headers(),
                                     json={"text": "n" * 8000})
    assert (status, body["error"]["code"]) == (413, "storage_quota_exceeded")
    status, body, _ = await get_json(http, "POST", f"{sg.url}/v1/chat/completions",
                                     headers=sg.headers(**{"x-llmgw-thread": "t1"}),
                                     json={"model": "m", "messages": [{"role": "user", "content": "w" * 6000}]})
    assert (status, body["error"]["code"]) == (413, "storage_quota_exceeded")
    await sg.client().files.create(file=("b.jsonl", b"x" * 5536), purpose="batch")  # now exactly full
    status, body, _ = await get_json(http, "POST", f"{sg.url}/v1/batches", headers=sg.headers(), json={
        "input_file_id": "file-whatever", "endpoint": "/v1/chat/completions", "completion_window": "24h"})
    assert (status, body["error"]["code"]) == (413, "storage_quota_exceeded")
    assert await sg.store.storage_used(sg.project.id) == 65_536


async def test_a_projects_own_quota_wins_over_the_servers(stored_gateway):
    sg = await stored_gateway([model("m", "http://127.0.0.1:9/v1")], router=QUOTA)
    await sg.store.set_project_features(sg.project.id, actor="test", storage_quota_bytes=200_000)
    sg.data.forget_features()
    await sg.client().files.create(file=("a.jsonl", b"x" * 150_000), purpose="batch")  # past the server's 64 KiB
    await sg.store.set_project_features(sg.project.id, actor="test", storage_quota_bytes=100_000)
    sg.data.forget_features()
    with pytest.raises(openai.APIStatusError) as caught:
        await sg.client().files.create(file=("b.jsonl", b"x" * 10), purpose="batch")
    assert "its own quota, llmgw keys quota" in caught.value.body["message"]
    await sg.store.set_project_features(sg.project.id, actor="test", storage_quota_bytes=0)  # no limit
    sg.data.forget_features()
    await sg.client().files.create(file=("b.jsonl", b"x" * 100_000), purpose="batch")


async def test_a_response_that_would_be_kept_past_the_quota_is_refused_and_store_false_is_not(stored_gateway,
                                                                                             recorder):
    engine = await recorder()
    sg = await stored_gateway([model("m", engine)], router=QUOTA)
    await sg.client().files.create(file=("a.jsonl", b"x" * 65_000), purpose="batch")
    with pytest.raises(openai.APIStatusError) as caught:
        await sg.client().responses.create(model="m", input="w" * 2000)
    assert caught.value.status_code == 413 and caught.value.body["code"] == "storage_quota_exceeded"
    answer = await sg.client().responses.create(model="m", input="w" * 2000, store=False)
    assert answer.status == "completed"


async def test_the_mcp_remember_tool_keeps_to_the_quota_and_a_deep_mcp_body_is_a_parse_error(stored_gateway, http):
    sg = await stored_gateway([model("m", "http://127.0.0.1:9/v1")], router=QUOTA)
    await sg.turn_on(memory=True)
    await sg.client().files.create(file=("a.jsonl", b"x" * 65_000), purpose="batch")
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "remember", "arguments": {"key": "k", "text": "t" * 1000}}}
    status, body, _ = await get_json(http, "POST", f"{sg.url}/mcp", headers=sg.headers(), json=call)
    assert status == 200 and body["result"]["isError"] is True
    assert "router.clients.project_storage_bytes" in body["result"]["content"][0]["text"]
    deep = b'{"a":' * 5000 + b"1" + b"}" * 5000
    status, body, _ = await get_json(http, "POST", f"{sg.url}/mcp", data=deep,
                                     headers=sg.headers(**{"Content-Type": "application/json"}))
    assert status == 400 and body["error"]["code"] == -32700 and "max_json_depth" in body["error"]["message"]


async def test_a_batch_whose_results_pass_the_quota_fails_with_its_error_and_keeps_what_it_wrote(
        stored_gateway, recorder, monkeypatch):
    from .test_batches import chat_line, jsonl, results, until_done

    monkeypatch.setattr("llmgw.router.batch_worker.FLUSH_AT", 1)  # every result written as it comes
    engine = await recorder()
    sg = await stored_gateway([model("m", engine.url + "/v1")], router={**QUOTA, "batch": {"concurrency": 1}})
    client = sg.client()
    requests = jsonl([chat_line(i) for i in range(30)])
    room = 3000  # what is left of the 64 KiB once the input is kept: a few results, not 30
    uploaded = await client.files.create(file=("in.jsonl", requests + b" " * (65_536 - room - len(requests) - 1)
                                               + b"\n"), purpose="batch")
    batch = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                        completion_window="24h")
    done = await until_done(client, batch.id)
    assert done.status == "failed"
    [error] = done.errors.data
    assert error.code == "storage_quota_exceeded" and "storage quota" in error.message and error.line >= 2
    kept = await results(client, done.output_file_id)
    assert 1 <= len(kept) < 30 and all(r["response"]["status_code"] == 200 for r in kept)
    assert len(kept) == done.request_counts.completed and error.line == len(kept) + 1
    assert await sg.store.storage_used(sg.project.id) <= 65_536


async def test_responses_kept_without_keys_count_under_the_anonymous_owner(stored_gateway, recorder):
    from .stored import wait_for

    engine = await recorder()
    sg = await stored_gateway([model("m", engine.url + "/v1")], keys_required=False, router=QUOTA)
    client = sg.client()
    await client.files.create(file=("a.jsonl", b"x" * 60_000), purpose="batch")
    answer = await client.responses.create(model="m", input="w" * 2000)
    assert answer.status == "completed"

    async def counted():
        return await sg.store.storage_used("anonymous") > 62_000 or None

    await wait_for(counted, timeout=5, every=0.05)
    with pytest.raises(openai.APIStatusError) as caught:  # 60 000 + 5 000 fits; with the response it does not
        await client.files.create(file=("b.jsonl", b"y" * 5000), purpose="batch")
    assert caught.value.status_code == 413 and caught.value.body["code"] == "storage_quota_exceeded"


async def test_a_response_is_refused_when_its_owners_files_fill_the_quota(stored_gateway, recorder):
    """A response counts for whoever owns the files: without keys, the files of everyone."""
    engine = await recorder()
    sg = await stored_gateway([model("m", engine.url + "/v1")], keys_required=False, router=QUOTA)
    client = sg.client()
    await client.files.create(file=("a.jsonl", b"x" * 64_000), purpose="batch")
    with pytest.raises(openai.APIStatusError) as caught:
        await client.responses.create(model="m", input="w" * 2000)
    assert caught.value.status_code == 413 and caught.value.body["code"] == "storage_quota_exceeded"
    answer = await client.responses.create(model="m", input="w" * 2000, store=False)
    assert answer.status == "completed"
