"""OpenAI's Responses API at /v1/responses, as the official openai SDK sees it, and its translation."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest

from llmgw.router.errors import dumps, loads
from llmgw.router.responses import ResponseDraft, ResponseEvents, response_from_chat, to_chat
from llmgw.router.sse import SSERelay
from llmgw.store import open_store

from .conftest import model, principal

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CITY = {"type": "object", "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["name", "population"], "additionalProperties": False}


async def test_text_with_instructions_and_usage(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    raw = await gw.client().responses.with_raw_response.create(
        model="m", instructions="Answer in one sentence.", input="Why is the sky blue?", max_output_tokens=16,
        metadata={"feature": "faq"}, reasoning={"effort": "low"}, truncation="auto",
        include=["reasoning.encrypted_content"])
    response = raw.parse()
    assert response.id.startswith("resp_") and response.object == "response" and response.model == "m"
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.instructions == "Answer in one sentence."
    (item,) = response.output
    assert item.type == "message" and item.role == "assistant" and item.content[0].type == "output_text"
    assert response.output_text == item.content[0].text and response.output_text
    usage = response.usage
    assert usage.output_tokens == 16 and usage.input_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    row = (await gw.settle(1))[0]
    assert row.request_id == raw.headers["x-llmgw-request-id"]
    assert (row.model_requested, row.status, row.outcome) == ("m", 200, "ok")
    assert (row.prompt_tokens, row.completion_tokens) == (usage.input_tokens, 16)
    assert row.metadata == {"feature": "faq"}


async def test_an_answer_that_ends_is_completed_and_the_sync_client_works(sim, gateway):
    engine = await sim(models=["echo-m"])
    gw = await gateway([model("echo-m", engine)])

    def ask():
        return gw.sync_client().responses.create(model="echo-m", input=[
            {"role": "developer", "content": "Repeat."},
            {"role": "user", "content": [{"type": "input_text", "text": "blue"}, {"type": "input_text",
                                                                                 "text": "skies"}]}])

    response = await asyncio.to_thread(ask)
    assert response.status == "completed" and response.incomplete_details is None
    assert response.output_text == "blue\nskies"


async def test_streaming_gives_the_responses_events(sim, gateway):
    engine = await sim(models=["m"], tpot=0.002)
    gw = await gateway([model("m", engine)])
    stream = await gw.client().responses.create(model="m", input="Count to ten.", max_output_tokens=16, stream=True)
    events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * 16,
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert events[-4].text == text
    last = events[-1].response
    assert last.status == "incomplete" and last.output_text == text and last.usage.output_tokens == 16
    assert last.id == events[0].response.id
    row = (await gw.settle(1))[0]
    assert row.completion_tokens == 16 and row.ttft_ms is not None


async def test_a_streamed_answer_that_ends_is_completed(sim, gateway):
    engine = await sim(models=["echo-m"])
    gw = await gateway([model("echo-m", engine)])
    async with gw.client().responses.stream(model="echo-m", input="all done") as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert final.status == "completed" and final.output_text == "all done"


async def test_function_tools_and_their_results(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    ask = gw.client()
    first = await ask.responses.create(model="m", input="Is it raining in Ankara? Check the weather.", tools=[WEATHER,
                                       {"type": "web_search"}])
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    assert isinstance(json.loads(call.arguments)["city"], str)
    # Stateless: the whole conversation sent again, the call and its output as items.
    second = await ask.responses.create(model="m", tools=[WEATHER], tool_choice="none", max_output_tokens=16, input=[
        {"role": "user", "content": "Is it raining in Ankara?"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": '{"raining": false}'},
    ])
    assert second.output[0].type == "message" and second.output_text
    forced = await ask.responses.create(model="m", input="Weather?", tools=[WEATHER],
                                        tool_choice={"type": "function", "name": "get_weather"})
    assert forced.output[0].type == "function_call"


async def test_a_streamed_function_call(sim, gateway):
    engine = await sim(models=["m"], tpot=0.001)
    gw = await gateway([model("m", engine)])
    stream = await gw.client().responses.create(model="m", input="Weather in Oslo?", tools=[WEATHER], stream=True)
    events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done",
                          "response.completed"]
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(deltas) > 1
    done = events[-2].item
    assert done.type == "function_call" and done.arguments == "".join(deltas)
    assert events[-1].response.output[0].call_id == done.call_id


async def test_previous_response_id_carries_the_conversation(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    ask = gw.client()
    first = await ask.responses.create(model="m", input="My name is Deniz.", max_output_tokens=16)
    alone = await ask.responses.create(model="m", input="What is my name?", max_output_tokens=16)
    follow = await ask.responses.create(model="m", input="What is my name?", max_output_tokens=16,
                                        previous_response_id=first.id)
    assert follow.previous_response_id == first.id
    # The first turn and its answer went in front of the question.
    assert follow.usage.input_tokens >= alone.usage.input_tokens + first.usage.input_tokens + 8
    # A chain: the third turn carries both before it.
    third = await ask.responses.create(model="m", input="Thanks.", max_output_tokens=16,
                                       previous_response_id=follow.id)
    assert third.usage.input_tokens > follow.usage.input_tokens
    fetched = await ask.responses.retrieve(follow.id)
    assert fetched.id == follow.id and fetched.output_text == follow.output_text
    with pytest.raises(openai.BadRequestError) as caught:
        await ask.responses.create(model="m", input="Hi", previous_response_id="resp_nope")
    assert caught.value.body["code"] == "previous_response_not_found"
    assert caught.value.body["param"] == "previous_response_id"


async def test_a_function_call_continued_by_previous_response_id_after_a_stream(sim, gateway):
    engine = await sim(models=["m"], tpot=0.001)
    gw = await gateway([model("m", engine)])
    ask = gw.client()
    stream = await ask.responses.create(model="m", input="Weather in Oslo?", tools=[WEATHER], stream=True)
    events = [event async for event in stream]
    done = events[-1].response
    call = done.output[0]
    # Sent the moment the stream ended: the answer is already kept.
    follow = await ask.responses.create(model="m", previous_response_id=done.id, tools=[WEATHER],
                                        tool_choice="none", max_output_tokens=16,
                                        input=[{"type": "function_call_output", "call_id": call.call_id,
                                                "output": "sunny"}])
    assert follow.status == "incomplete" and follow.output_text


async def test_store_false_is_not_kept_and_another_project_cannot_continue(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)], keys={"a": principal("key-a", project="prj-a"),
                                                    "a2": principal("key-a2", project="prj-a"),
                                                    "b": principal("key-b", project="prj-b")})
    first = await gw.client("a").responses.create(model="m", input="Secret plans.", max_output_tokens=16)
    same_project = await gw.client("a2").responses.create(model="m", input="More?", max_output_tokens=16,
                                                          previous_response_id=first.id)
    assert same_project.status == "incomplete"
    with pytest.raises(openai.BadRequestError):
        await gw.client("b").responses.create(model="m", input="More?", previous_response_id=first.id)
    with pytest.raises(openai.NotFoundError):
        await gw.client("b").responses.retrieve(first.id)
    unkept = await gw.client("a").responses.create(model="m", input="Forget me.", max_output_tokens=16, store=False)
    with pytest.raises(openai.BadRequestError):
        await gw.client("a").responses.create(model="m", input="Hi", previous_response_id=unkept.id)
    await gw.client("a").responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        await gw.client("a").responses.retrieve(first.id)


async def test_kept_in_the_store_for_another_gateway_to_continue(sim, gateway, tmp_path):
    engine = await sim(models=["m"])
    store = await open_store(f"sqlite:///{tmp_path}/store.db")
    try:
        one = await gateway([model("m", engine)], store=store)
        other = await gateway([model("m", engine)], store=store)
        first = await one.client().responses.create(model="m", input="Remember the number 7.", max_output_tokens=16)
        kept = await store.get_response(first.id)
        assert kept is not None and kept.scope == "" and kept.model == "m"
        assert kept.messages[0] == {"role": "user", "content": "Remember the number 7."}
        assert kept.messages[-1] == {"role": "assistant", "content": first.output_text}
        follow = await other.client().responses.create(model="m", input="Which number?", max_output_tokens=16,
                                                       previous_response_id=first.id)
        assert follow.usage.input_tokens > first.usage.input_tokens
    finally:
        await store.close()


async def test_json_schema_and_json_object_formats(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    ask = gw.client()
    response = await ask.responses.create(model="m", input="A city, please.", text={"format": {
        "type": "json_schema", "name": "city", "schema": CITY, "strict": True}})
    city = json.loads(response.output_text)
    assert set(city) == {"name", "population"} and isinstance(city["population"], int)
    assert response.text.format.type == "json_schema"
    anything = await ask.responses.create(model="m", input="Some JSON.", text={"format": {"type": "json_object"}})
    assert isinstance(json.loads(anything.output_text), dict)


async def test_an_image_input(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    response = await gw.client().responses.create(model="m", max_output_tokens=16, input=[{"role": "user", "content": [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
        {"type": "input_image", "file_id": "file-123"}]}])
    assert response.output_text


async def test_refusals_are_openais(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)], keys={"k": principal()})
    with pytest.raises(openai.AuthenticationError):
        await gw.client("wrong").responses.create(model="m", input="Hi")
    with pytest.raises(openai.NotFoundError) as caught:
        await gw.client("k").responses.create(model="nope", input="Hi")
    assert caught.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as caught:
        await gw.client("k").responses.create(model="m", input=[])
    assert caught.value.body["param"] == "input"
    rows = await gw.settle(2)
    assert [r.status for r in rows] == [404, 400]  # a request with no key known has no row


# ---------------------------------------------------------------- the translation


def test_items_translated_to_chat_messages():
    history = [{"role": "user", "content": "Earlier."}, {"role": "assistant", "content": "Yes."}]
    chat, conversation = to_chat({
        "model": "m", "instructions": "Be brief.", "max_output_tokens": 50, "temperature": 0.2, "user": "u1",
        "tools": [WEATHER, {"type": "file_search", "vector_store_ids": ["x"]}], "tool_choice": "required",
        "parallel_tool_calls": False, "text": {"format": {"type": "json_schema", "name": "c", "schema": CITY}},
        "reasoning": {"effort": "high"}, "store": True, "stream": True,
        "input": [
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Look"},
                {"type": "input_image", "image_url": "https://x/y.png", "detail": "high"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Oslo"}'},
            {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": '{"city":"Rome"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "rain"},
            {"type": "function_call_output", "call_id": "call_2",
             "output": [{"type": "input_text", "text": "sun"}]},
        ],
    }, history)
    assert chat["messages"][0] == {"role": "system", "content": "Be brief."}
    assert chat["messages"][1:] == conversation
    assert conversation == [
        *history,
        {"role": "user", "content": [{"type": "text", "text": "Look"},
                                     {"type": "image_url", "image_url": {"url": "https://x/y.png",
                                                                         "detail": "high"}}]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
        {"role": "tool", "tool_call_id": "call_2", "content": "sun"},
    ]
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER["parameters"], "description": "The weather in a city."}}]
    assert (chat["tool_choice"], chat["parallel_tool_calls"]) == ("required", False)
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "c", "schema": CITY}}
    assert (chat["max_tokens"], chat["temperature"], chat["user"]) == (50, 0.2, "u1")
    assert chat["stream_options"] == {"include_usage": True}
    assert not {"reasoning", "store", "input", "instructions", "text"} & set(chat)


def test_a_content_filter_makes_the_response_incomplete():
    answer = {"choices": [{"index": 0, "finish_reason": "content_filter",
                           "message": {"role": "assistant", "content": "I can"}}],
              "usage": {"prompt_tokens": 4, "completion_tokens": 2}}
    response, message = response_from_chat(answer, ResponseDraft(model="m"))
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "content_filter"}
    assert response["output"][0]["status"] == "incomplete"
    assert response["usage"]["total_tokens"] == 6
    assert message == {"role": "assistant", "content": "I can"}


def _chunk(delta=None, finish=None) -> bytes:
    return b"data: " + dumps({"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}) + b"\n\n"


def _events(out: bytes) -> list[dict]:
    return [loads(block.split("\n")[1].removeprefix("data: ")) for block in out.decode().strip().split("\n\n")]


def test_a_filtered_stream_ends_incomplete_and_a_cut_one_failed():
    done = []
    relay = ResponseEvents(SSERelay(strip_usage=False), ResponseDraft(model="m"), on_done=lambda r, m: done.append(m))
    out = relay.feed(_chunk({"content": "Some"}) + _chunk({}, "content_filter") + b"data: [DONE]\n\n")
    events = _events(out)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "content_filter"}
    assert done == [{"role": "assistant", "content": "Some"}]

    from llmgw.router.errors import GatewayError

    cut = ResponseEvents(SSERelay(strip_usage=False), ResponseDraft(model="m"))
    cut.feed(_chunk({"content": "Some"}))
    failed = _events(cut.error_event(GatewayError(504, "upstream_timeout", "the engine went quiet")))
    assert [e["type"] for e in failed] == ["error", "response.failed"]
    assert failed[1]["response"]["error"] == {"code": "server_error", "message": "the engine went quiet"}


async def test_a_guardrail_that_stops_the_answer_makes_it_incomplete(sim, gateway):
    engine = await sim(models=["echo-m"], tpot=0.002)
    policy = {"policies": {"answers": {"output": {"pii": {"secret": "block"}}}}, "default": ["answers"]}
    gw = await gateway([model("echo-m", engine)], guard=policy)
    words = " ".join(f"word{i}" for i in range(60))
    ask = f"Here it is: AKIAIOSFODNN7EXAMPLE and then {words}."
    stream = await gw.client().responses.create(model="echo-m", input=ask, stream=True)
    events = [event async for event in stream]
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details.reason == "content_filter"
    assert "AKIA" not in "".join(e.delta for e in events if e.type == "response.output_text.delta")
    whole = await gw.client().responses.create(model="echo-m", input=ask)
    assert whole.status == "incomplete" and whole.incomplete_details.reason == "content_filter"
    assert "AKIA" not in whole.output_text
