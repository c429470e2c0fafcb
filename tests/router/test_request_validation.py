"""Every client body is checked before anything is spent: the hostile inputs of issue #17, each now a 4xx.

Each refusal comes in its API's own error shape and names the field, and the
usage row says it was refused, never `200 ok`; a fault of the gateway's own
is a 500 with the request id, recorded as an error and counted.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from .conftest import HELLO, model
from .stored import recorder, stored_gateway  # noqa: F401


def _deep(depth: int) -> str:
    """Objects nested `depth` deep, as JSON text (Python's own encoder gives up long before)."""
    return '{"a":' * depth + "{}" + "}" * depth


def _with(body: dict, **raw_json: str) -> bytes:
    text = json.dumps(body)[:-1]
    return (text + "".join(f', "{k}": {v}' for k, v in raw_json.items()) + "}").encode()


def _anthropic(gw) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.url, api_key="none", max_retries=0)


@pytest.mark.parametrize(("path", "body"), [
    ("/chat/completions", {"model": "m", "messages": HELLO}),
    ("/embeddings", {"model": "m", "input": "rivers"}),
    ("/completions", {"model": "m", "prompt": "rivers"}),
])
async def test_metadata_nested_5000_deep_is_a_400_recorded_as_refused(sim, gateway, http, path, body):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    json_type = {"Content-Type": "application/json"}
    async with http.post(gw.base_url + path, data=_with(body, metadata=_deep(5000)), headers=json_type) as resp:
        error = (await resp.json())["error"]
        assert resp.status == 400 and error["code"] == "json_too_deep"
        assert "router.clients.max_json_depth" in error["message"]
    (row,) = await gw.settle(1)
    assert (row.status, row.outcome) == (400, "refused")
    # 64 deep is still fine
    async with http.post(gw.base_url + path, data=_with(body, x=_deep(60)), headers=json_type) as resp:
        assert resp.status == 200


async def test_non_json_content_types_and_non_utf8_bodies_are_refused(sim, gateway, http):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    text = '{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    async with http.post(gw.base_url + "/chat/completions", data=text,
                         headers={"Content-Type": "text/plain"}) as resp:
        error = (await resp.json())["error"]
        assert resp.status == 415 and error["code"] == "unsupported_media_type"
        assert "application/json" in error["message"]
    async with http.post(gw.url + "/v1/messages", data=text, headers={"Content-Type": "text/plain"}) as resp:
        body = await resp.json()
        assert resp.status == 415 and body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    async with http.post(gw.base_url + "/chat/completions", data=b'{"model": "m\xff"}',
                         headers={"Content-Type": "application/json"}) as resp:
        error = (await resp.json())["error"]
        assert resp.status == 400 and error["code"] == "invalid_encoding"


@pytest.mark.parametrize(("change", "field"), [
    ({"max_tokens": -5}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": "hot"}, "temperature"),
    ({"temperature": 1.5}, "temperature"),
    ({"stream": "yes"}, "stream"),
    ({"tools": [{"description": "no name, no schema"}]}, "tools[0].name"),
    ({"tools": [{"name": "lookup"}]}, "tools[0].input_schema"),
    ({"tools": "lookup"}, "tools"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
])
async def test_anthropic_messages_are_checked_like_anthropic_checks_them(sim, gateway, change, field):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(anthropic.BadRequestError) as caught:  # extra_body: the SDK lets anything through it
        await _anthropic(gw).messages.create(**body, extra_body=change)
    assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert caught.value.body["error"]["message"].startswith(field + ":")
    (row,) = await gw.settle(1)
    assert (row.status, row.outcome) == (400, "refused")


async def test_anthropic_needs_max_tokens_and_count_tokens_is_checked_too(sim, gateway, http):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    async with http.post(gw.url + "/v1/messages", json={"model": "m", "messages": [
            {"role": "user", "content": "hi"}]}) as resp:
        body = await resp.json()
        assert resp.status == 400 and body["error"]["message"].startswith("max_tokens: required")
    async with http.post(gw.url + "/v1/messages/count_tokens", json={"model": "m", "messages": "hi"}) as resp:
        body = await resp.json()
        assert resp.status == 400 and body["error"]["message"].startswith("messages:")
    # a well-formed request with a custom tool and a server tool still goes through
    answer = await _anthropic(gw).messages.create(
        model="m", max_tokens=4, extra_body={"temperature": 1}, messages=[{"role": "user", "content": "hi"}],
        tools=[{"name": "lookup", "input_schema": {"type": "object", "properties": {}}},
               {"type": "web_search_20250305", "name": "web_search"}])
    assert answer.type == "message"


@pytest.mark.parametrize(("change", "field"), [
    ({"temperature": 2.5}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"n": 0}, "n"),
    ({"stream": "yes"}, "stream"),
    ({"messages": []}, "messages"),
    ({"messages": [{"content": "no role"}]}, "messages[0].role"),
    ({"top_p": 3}, "top_p"),
])
async def test_chat_completions_are_checked_like_openai_checks_them(sim, gateway, http, change, field):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    async with http.post(gw.base_url + "/chat/completions", json={"model": "m", "messages": HELLO, **change}) as resp:
        error = (await resp.json())["error"]
        assert resp.status == 400
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "invalid_request_error" and error["param"] == field
        assert error["message"].startswith(field + ":")


async def test_responses_max_output_tokens_below_16_is_refused(sim, gateway):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    for value in (-1, 15):
        with pytest.raises(openai.BadRequestError) as caught:
            await gw.client().responses.create(model="m", input="hi", max_output_tokens=value)
        assert caught.value.body["param"] == "max_output_tokens"
        assert "at least 16" in caught.value.body["message"]


async def test_a_batch_whose_endpoint_is_an_object_is_a_400(stored_gateway, http):
    sg = await stored_gateway([model("m", "http://127.0.0.1:9/v1")])
    async with http.post(f"{sg.url}/v1/batches", headers=sg.headers(), json={
            "input_file_id": "file-x", "endpoint": {}, "completion_window": "24h"}) as resp:
        error = (await resp.json())["error"]
        assert resp.status == 400 and error["param"] == "endpoint"
        assert error["message"].startswith("a batch: endpoint: expected string")


async def test_a_fault_of_the_gateway_is_a_500_with_the_request_id_recorded_as_an_error(sim, gateway, http,
                                                                                       monkeypatch):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])

    def broken(name):
        raise RuntimeError("a bug")

    monkeypatch.setattr(gw.gateway.catalog, "resolve", broken)
    async with http.post(gw.base_url + "/chat/completions", json={"model": "m", "messages": HELLO}) as resp:
        error = (await resp.json())["error"]
        request_id = resp.headers["x-llmgw-request-id"]
        assert resp.status == 500 and error["type"] == "server_error" and error["code"] == "internal_error"
        assert request_id in error["message"] and resp.headers["x-request-id"] == request_id
    (row,) = await gw.settle(1)
    assert (row.request_id, row.status, row.outcome) == (request_id, 500, "error")
    assert gw.metrics.http_errors.labels("/chat/completions")._value.get() == 1


async def test_a_body_that_stalls_is_a_408_after_the_body_timeout(sim, gateway):
    import asyncio

    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)], router={"clients": {"body_timeout": "200ms"}})
    port = int(gw.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{\"model\": ")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 3)
    assert head.startswith(b"HTTP/1.1 408")
    body = await asyncio.wait_for(reader.read(300), 3)
    assert b"router.clients.body_timeout" in body
    writer.close()
    (row,) = await gw.settle(1)
    assert (row.status, row.outcome) == (408, "refused")


async def test_the_messages_docs_gateway_md_shows(sim, gateway, http):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine)])
    for change, message in [
        ({"temperature": 2.5}, "temperature: must be at most 2, got 2.5"),
        ({"messages": [{"role": "robot", "content": "hi"}]},
         "messages[0].role: must be one of 'system', 'developer', 'user', 'assistant', 'tool', 'function', "
         "got 'robot'"),
    ]:
        async with http.post(gw.base_url + "/chat/completions", json={"model": "m", "messages": HELLO, **change}) as r:
            error = (await r.json())["error"]
            assert (error["message"], error["code"]) == (message, "invalid_value")
    assert "llmgw_http_errors_total" in gw.metrics.exposition().decode()
