"""Anthropic's message batches (`client.messages.batches`) through the official anthropic SDK, run by the
same batch worker as OpenAI's batches, in front of a simulated engine."""

from __future__ import annotations

import anthropic
import pytest

from .conftest import model
from .stored import stored_gateway, wait_for  # noqa: F401


def client(sg, key: str = "sk-a") -> anthropic.AsyncAnthropic:
    made = anthropic.AsyncAnthropic(base_url=sg.url, api_key=key, max_retries=0)
    sg.running.clients.append(made)
    return made


def request(i: int, model_name: str = "m") -> dict:
    return {"custom_id": f"q-{i}", "params": {"model": model_name, "max_tokens": 4,
                                               "messages": [{"role": "user", "content": f"Question {i}?"}]}}


async def until_ended(c: anthropic.AsyncAnthropic, batch_id: str):
    async def ended():
        batch = await c.messages.batches.retrieve(batch_id)
        return batch if batch.processing_status == "ended" else None

    return await wait_for(ended, timeout=30, every=0.1)


async def test_a_message_batch_runs_and_its_results_come_as_anthropic_lines(stored_gateway, sim, http):
    engine = await sim(models=["m"])
    sg = await stored_gateway([model("m", engine)])
    c = client(sg)
    requests = [request(i) for i in range(5)] + [request(5, model_name="nope")]
    batch = await c.messages.batches.create(requests=requests)
    assert batch.type == "message_batch" and batch.processing_status == "in_progress"
    assert batch.request_counts.processing + batch.request_counts.succeeded + batch.request_counts.errored == 6
    assert batch.results_url is None
    done = await until_ended(c, batch.id)
    counts = done.request_counts
    assert (counts.succeeded, counts.errored, counts.canceled, counts.expired, counts.processing) == (5, 1, 0, 0, 0)
    assert done.ended_at is not None and done.results_url.endswith(f"/v1/messages/batches/{batch.id}/results")
    async with http.get(f"{sg.url}/v1/messages/batches/{batch.id}", headers={
            "x-api-key": "sk-a", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "llm.example.com"}) as behind:
        url = (await behind.json())["results_url"]
    assert url == f"https://llm.example.com/v1/messages/batches/{batch.id}/results", "as the proxy says"
    results = {r.custom_id: r.result async for r in await c.messages.batches.results(batch.id)}
    assert sorted(results) == [f"q-{i}" for i in range(6)]
    ok = results["q-0"]
    assert ok.type == "succeeded" and ok.message.type == "message" and ok.message.role == "assistant"
    assert ok.message.content[0].text and ok.message.usage.output_tokens == 4
    bad = results["q-5"]
    assert bad.type == "errored" and bad.error.error.type == "not_found_error"
    rows = [r for r in await sg.running.settle(6) if f"batch={batch.id}" in r.tags]
    assert len(rows) == 6 and {r.key_id for r in rows} == {"key-a"}
    assert sorted(r.completion_tokens for r in rows) == [0, 4, 4, 4, 4, 4], "a usage row for every answered item"

    listed = await c.messages.batches.list(limit=10)
    assert [b.id for b in listed.data] == [batch.id]
    second = await c.messages.batches.create(requests=[request(9)])
    assert [b.id for b in (await c.messages.batches.list(limit=1)).data] == [second.id]
    older = await c.messages.batches.list(before_id=batch.id)
    assert [b.id for b in older.data] == [second.id] and not older.has_more
    newer = await c.messages.batches.list(after_id=second.id)
    assert [b.id for b in newer.data] == [batch.id]
    openai_client = sg.client()
    assert {b.endpoint for b in (await openai_client.batches.list()).data} == {"/v1/messages"}
    inputs = [f for f in (await openai_client.files.list()).data if f.filename == "message_batch_requests.jsonl"]
    assert len(inputs) == 2 and {f.purpose for f in inputs} == {"batch"}
    await until_ended(c, second.id)
    await c.messages.batches.delete(second.id)
    with pytest.raises(anthropic.NotFoundError):
        await client(sg, "sk-b").messages.batches.retrieve(batch.id)  # another project's
    deleted = await c.messages.batches.delete(batch.id)
    assert (deleted.id, deleted.type) == (batch.id, "message_batch_deleted")
    with pytest.raises(anthropic.NotFoundError):
        await c.messages.batches.retrieve(batch.id)
    assert not (await c.messages.batches.list()).data


async def test_a_cancelled_batch_ends_with_its_unrun_requests_canceled(stored_gateway, sim):
    engine = await sim(models=["m"], ttft=0.3)
    sg = await stored_gateway([model("m", engine)], router={"batch": {"concurrency": 1}})
    c = client(sg)
    batch = await c.messages.batches.create(requests=[request(i) for i in range(20)])
    with pytest.raises(anthropic.ConflictError):
        await c.messages.batches.delete(batch.id)  # still running
    cancelling = await c.messages.batches.cancel(batch.id)
    assert cancelling.processing_status in ("canceling", "ended") and cancelling.cancel_initiated_at
    done = await until_ended(c, batch.id)
    counts = done.request_counts
    assert counts.canceled > 0 and counts.succeeded + counts.canceled + counts.errored == 20
    kinds = [r.result.type async for r in await c.messages.batches.results(batch.id)]
    assert kinds.count("canceled") == counts.canceled and len(kinds) == 20


async def test_bad_batches_are_refused_whole_with_the_field_named(stored_gateway, sim):
    engine = await sim(models=["m"])
    sg = await stored_gateway([model("m", engine)], router={"batch": {"max_lines": 3}})
    c = client(sg)
    for requests, field in (([], "requests"),
                            ([request(0), request(0)], "requests[1].custom_id"),
                            ([{"custom_id": "bad id!", "params": request(1)["params"]}], "requests[0].custom_id"),
                            ([{"custom_id": "x", "params": {"model": "m", "messages": []}}],
                             "requests[0].params.max_tokens")):
        with pytest.raises(anthropic.BadRequestError) as refused:
            await c.messages.batches.create(requests=requests)
        assert refused.value.body["type"] == "error" and field in refused.value.body["error"]["message"]
    assert not (await c.messages.batches.list()).data, "nothing was kept"
    with pytest.raises(anthropic.BadRequestError) as many:
        await c.messages.batches.create(requests=[request(i) for i in range(4)])
    assert "router.batch.max_lines" in many.value.body["error"]["message"]
    with pytest.raises(anthropic.AuthenticationError):
        await client(sg, "sk-nope").messages.batches.list()


def test_result_lines_map_each_ending_to_anthropics_result_types():
    from llmgw.router.anthropic_batches import _result

    ok = {"custom_id": "a", "response": {"status_code": 200, "body": {"type": "message", "id": "msg_1"}}}
    assert _result(ok) == {"custom_id": "a", "result": {"type": "succeeded", "message": {"type": "message",
                                                                                       "id": "msg_1"}}}
    for code, kind in (("batch_cancelled", "canceled"), ("batch_expired", "expired")):
        line = {"custom_id": "b", "response": None, "error": {"code": code, "message": "not run"}}
        assert _result(line) == {"custom_id": "b", "result": {"type": kind}}
    refused = {"custom_id": "c", "response": {"status_code": 401, "body": {"error": {
        "message": "the key was revoked", "type": "authentication_error", "code": "key_revoked"}}}}
    error = _result(refused)["result"]
    assert error["type"] == "errored"
    assert error["error"] == {"type": "error", "error": {"type": "authentication_error",
                                                         "message": "the key was revoked"}}
