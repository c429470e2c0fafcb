"""`GET /v1/models/{id}` for the openai and anthropic SDKs, Anthropic's shape of `/v1/models`, and
`GET /v1/responses/{id}/input_items` through `client.responses.input_items.list`."""

from __future__ import annotations

import anthropic
import openai
import pytest

from .conftest import model, principal


def anthropic_client(gw, key: str) -> anthropic.AsyncAnthropic:
    made = anthropic.AsyncAnthropic(base_url=gw.url, api_key=key, max_retries=0)
    gw.clients.append(made)
    return made


async def test_models_retrieve_names_a_model_the_key_may_use(sim, gateway):
    engine = await sim(models=["m", "other"])
    gw = await gateway([model("m", engine, aliases=["fast"]), model("other", engine)],
                       keys={"sk-a": principal("key-a", models={"m"})})
    client = gw.client("sk-a")
    found = await client.models.retrieve("m")
    assert (found.id, found.object, found.owned_by) == ("m", "model", "llmgw") and found.created > 0
    assert (await client.models.retrieve("fast")).id == "m", "an alias names its model"
    with pytest.raises(openai.NotFoundError) as refused:
        await client.models.retrieve("other")  # served, but not to this key
    assert refused.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        await client.models.retrieve("nope")
    with pytest.raises(openai.AuthenticationError):
        await gw.client("sk-wrong").models.retrieve("m")


async def test_a_model_named_with_a_slash_is_found(sim, gateway):
    engine = await sim(models=["Qwen/Qwen3-8B"])
    gw = await gateway([model("Qwen/Qwen3-8B", engine)])
    assert (await gw.client().models.retrieve("Qwen/Qwen3-8B")).id == "Qwen/Qwen3-8B"


async def test_anthropic_sdk_gets_anthropic_model_objects_and_pages(sim, gateway):
    engine = await sim(models=["a", "b", "c"])
    gw = await gateway([model(n, engine) for n in ("a", "b", "c")],
                       keys={"sk-a": principal("key-a", models={"a", "b", "c"})})
    client = anthropic_client(gw, "sk-a")
    page = await client.models.list(limit=2)
    assert [m.id for m in page.data] == ["a", "b"] and page.has_more and page.last_id == "b"
    assert all(m.type == "model" and m.display_name == m.id and m.created_at.year >= 2024 for m in page.data)
    rest = await client.models.list(after_id="b")
    assert [m.id for m in rest.data] == ["c"] and not rest.has_more
    assert [m.id async for m in client.models.list(limit=1)] == ["a", "b", "c"]
    before = await client.models.list(before_id="c", limit=1)
    assert [m.id for m in before.data] == ["b"] and before.has_more
    info = await client.models.retrieve("c")
    assert (info.type, info.id) == ("model", "c")
    with pytest.raises(anthropic.NotFoundError) as missing:
        await client.models.retrieve("nope")
    assert missing.value.body["type"] == "error" and missing.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError):
        await client.models.list(limit=0)
    # the openai SDK on the same paths still gets OpenAI's shape
    listed = await gw.client("sk-a").models.list()
    assert [m.id for m in listed.data] == ["a", "b", "c"] and listed.data[0].object == "model"


async def test_input_items_lists_what_a_response_was_sent_and_pages(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)], keys={"sk-a": principal("key-a"),
                                                   "sk-b": principal("key-b", project="prj-2")})
    client = gw.client("sk-a")
    first = await client.responses.create(model="m", input="What is a river?", max_output_tokens=16)
    second = await client.responses.create(
        model="m", previous_response_id=first.id, max_output_tokens=16,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "And a lake?"}]},
               {"role": "user", "content": "And the sea?"}])
    items = await client.responses.input_items.list(second.id, order="asc")
    assert [(i.type, i.role, i.content[0].text) for i in items.data] == [
        ("message", "user", "And a lake?"), ("message", "user", "And the sea?")], \
        "only what this response was sent, not the turns it continued"
    assert items.first_id == items.data[0].id and items.last_id == items.data[-1].id and not items.has_more
    newest_first = await client.responses.input_items.list(second.id)
    assert [i.id for i in newest_first.data] == [i.id for i in reversed(items.data)]
    one = await client.responses.input_items.list(second.id, order="asc", limit=1)
    assert one.has_more and [i.id for i in one.data] == [items.data[0].id]
    assert [i.id async for i in client.responses.input_items.list(second.id, order="asc", limit=1)] == \
        [i.id for i in items.data]
    (only,) = (await client.responses.input_items.list(first.id)).data
    assert only.content[0].type == "input_text" and only.content[0].text == "What is a river?"
    with pytest.raises(openai.NotFoundError):
        await gw.client("sk-b").responses.input_items.list(second.id)  # another project's
    with pytest.raises(openai.NotFoundError):
        await client.responses.input_items.list("resp_nope")
    with pytest.raises(openai.BadRequestError):
        await client.responses.input_items.list(second.id, limit=500)


async def test_input_items_show_tool_calls_and_their_outputs(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    client = gw.client()
    response = await client.responses.create(model="m", max_output_tokens=16, input=[
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Oslo"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "rain"}])
    items = (await client.responses.input_items.list(response.id, order="asc")).data
    assert [i.type for i in items] == ["message", "function_call", "function_call_output"]
    assert (items[1].call_id, items[1].name, items[1].arguments) == ("call_1", "get_weather", '{"city":"Oslo"}')
    assert (items[2].call_id, items[2].output) == ("call_1", "rain")
