"""The guardrails with the gateway's other parts: threads keep turns as checked; the Responses and
Messages APIs are checked as chat completions are."""

from __future__ import annotations

import json

import anthropic
import pytest

from llmgw.store import open_store


async def test_a_thread_keeps_the_new_turn_redacted(tmp_path, sim, guarded, served, principal_for):
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    try:
        org = await store.create_org("acme")
        project = await store.create_project(org.id, "payroll")
        await store.set_project_features(project.id, actor="test", threads=True)
        engine = await sim(models=("echo",))
        gw = await guarded([served("echo", engine)], guard={"default": ["baseline"]},
                           keys={"k": principal_for("key-1", project=project.id)}, store=store)
        client = gw.client("k")
        thread = {"x-llmgw-thread": "t-1"}
        messages = [{"role": "system", "content": "be brief"},
                    {"role": "user", "content": "my card is 4111 1111 1111 1111"}]
        first = await client.chat.completions.create(model="echo", messages=messages, extra_headers=thread)
        assert first.choices[0].message.content == "my card is [CARD_1]"
        second = await client.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "and 5555 5555 5555 4444?"}], extra_headers=thread)
        assert second.choices[0].message.content == "and [CARD_2]?"  # [CARD_1] is in the thread already
        turns = await store.get_thread_turns(project.id, "t-1")
        kept = json.dumps([t.messages for t in turns])
        assert "4111" not in kept and "5555" not in kept
        assert [m["content"] for t in turns for m in t.messages] == [
            "my card is [CARD_1]", "my card is [CARD_1]", "and [CARD_2]?", "and [CARD_2]?"]
    finally:
        await gw.runner.cleanup()
        await store.close()


async def test_the_responses_and_messages_apis_are_checked_as_chat_is(sim, guarded, served):
    engine = await sim(models=("echo",))
    policy = {"default": ["baseline", "answers"], "policies": {"answers": {"output": {"pii": {"email": "block"}}}}}
    gw = await guarded([served("echo", engine)], guard=policy)
    responses = gw.client().responses
    done = await responses.create(model="echo", input="write to jane@example.com please")
    assert done.status == "incomplete" and done.incomplete_details.reason == "content_filter"
    redacted = await responses.create(model="echo", input="card 4111 1111 1111 1111")
    assert redacted.output_text == "card [CARD_1]"
    events = [e.type async for e in await responses.create(model="echo", input="mail jane@example.com now.",
                                                            stream=True)]
    assert events[-1] == "response.incomplete"
    claude = anthropic.AsyncAnthropic(base_url=gw.url, api_key="none", max_retries=0)
    with pytest.raises(anthropic.BadRequestError):
        await claude.messages.create(model="echo", max_tokens=50,
                                     messages=[{"role": "user", "content": "key AKIAIOSFODNN7EXAMPLE"}])
    stopped = await claude.messages.create(model="echo", max_tokens=50,
                                           messages=[{"role": "user", "content": "mail jane@example.com"}])
    assert stopped.stop_reason == "refusal"
