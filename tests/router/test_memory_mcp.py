"""Memory notes over REST (/v1/memory) and as MCP tools (/mcp), with plain HTTP."""

from __future__ import annotations

import json

from .conftest import model
from .stored import get_json

HELPER = {"x-llmgw-agent": "helper"}


async def test_notes_are_refused_where_they_are_off(stored_gateway, http):
    sg = await stored_gateway([model("m", "http://127.0.0.1:9/v1")])
    status, body, _ = await get_json(http, "GET", f"{sg.url}/v1/memory", headers=sg.headers())
    assert (status, body["error"]["code"]) == (400, "memory_off")
    assert "llmgw keys memory" in body["error"]["message"]
    await sg.turn_on(memory=True)
    status, body, _ = await get_json(http, "GET", f"{sg.url}/v1/memory", headers=sg.headers("sk-personal"))
    assert (status, body["error"]["code"]) == (400, "project_required")
    status, body, _ = await get_json(http, "GET", f"{sg.url}/v1/memory")
    assert (status, body["error"]["code"]) == (401, "missing_api_key")


async def test_put_get_search_delete(stored_gateway, http):
    sg = await stored_gateway([model("m", "http://127.0.0.1:9/v1")])
    await sg.turn_on(memory=True)
    base = f"{sg.url}/v1/memory"
    h = sg.headers(**HELPER)

    status, note, _ = await get_json(http, "PUT", f"{base}/favourite-colour", headers=h,
                                     json={"text": "The user likes dark green.", "tags": ["preference"]})
    assert status == 201
    assert (note["key"], note["text"], note["tags"], note["agent"]) == (
        "favourite-colour", "The user likes dark green.", ["preference"], "helper")
    status, _, _ = await get_json(http, "PUT", f"{base}/city", headers=h, json={"text": "Lives in Izmir.",
                                                                              "tags": ["preference", "place"]})
    assert status == 201
    status, again, _ = await get_json(http, "PUT", f"{base}/city", headers=h, json={"text": "Lives in Ankara now.",
                                                                                  "tags": ["place"]})
    assert status == 200 and again["text"] == "Lives in Ankara now."

    status, found, _ = await get_json(http, "GET", base, headers=h, params={"q": "GREEN"})
    assert [n["key"] for n in found["data"]] == ["favourite-colour"]
    status, found, _ = await get_json(http, "GET", base, headers=h, params={"tag": "place"})
    assert [n["key"] for n in found["data"]] == ["city"]
    status, found, _ = await get_json(http, "GET", base, headers=h)
    assert [n["key"] for n in found["data"]] == ["city", "favourite-colour"]

    # Another agent, another project: notes of their own.
    status, found, _ = await get_json(http, "GET", base, headers=sg.headers())
    assert found["data"] == []
    await sg.turn_on(sg.other, memory=True)
    status, _, _ = await get_json(http, "GET", f"{base}/city", headers=sg.headers("sk-b", **HELPER))
    assert status == 404

    status, note, _ = await get_json(http, "GET", f"{base}/city", headers=h)
    assert (status, note["text"]) == (200, "Lives in Ankara now.")
    status, gone, _ = await get_json(http, "DELETE", f"{base}/city", headers=h)
    assert (status, gone["deleted"]) == (200, True)
    status, body, _ = await get_json(http, "GET", f"{base}/city", headers=h)
    assert (status, body["error"]["code"]) == (404, "note_not_found")


async def test_the_limits(stored_gateway, http):
    sg = await stored_gateway([model("m", "http://127.0.0.1:9/v1")])
    await sg.turn_on(memory=True)
    base = f"{sg.url}/v1/memory"
    h = sg.headers()
    status, body, _ = await get_json(http, "PUT", f"{base}/{'k' * 201}", headers=h, json={"text": "x"})
    assert status == 400 and "200 bytes" in body["error"]["message"]
    status, body, _ = await get_json(http, "PUT", f"{base}/k", headers=h, json={"text": "x" * (16 * 1024 + 1)})
    assert status == 400 and "16 KiB" in body["error"]["message"]
    status, body, _ = await get_json(http, "PUT", f"{base}/k", headers=h,
                                     json={"text": "x", "tags": [f"t{i}" for i in range(17)]})
    assert status == 400 and "at most 16" in body["error"]["message"]
    status, body, _ = await get_json(http, "PUT", f"{base}/k", headers=h, json={"text": "x", "tags": ["Upper"]})
    assert status == 400
    status, body, _ = await get_json(http, "PUT", f"{base}/k", headers={**h, "x-llmgw-agent": "no spaces"},
                                     json={"text": "x"})
    assert (status, body["error"]["code"]) == (400, "invalid_agent")
    status, body, _ = await get_json(http, "PUT", f"{base}/k", headers={**h, "Content-Type": "application/json"},
                                     data=b"not json")
    assert (status, body["error"]["code"]) == (400, "invalid_json")


async def mcp(http, sg, message, key="sk-a", **headers):
    async with http.post(f"{sg.url}/mcp", headers={**sg.headers(key), "Accept": "application/json, text/event-stream",
                                                    **headers}, data=json.dumps(message)) as resp:
        text = await resp.text()
        return resp.status, (json.loads(text) if text else None), resp.headers


async def test_mcp_tools_are_the_same_notes(stored_gateway, http):
    sg = await stored_gateway([model("m", "http://127.0.0.1:9/v1")])
    await sg.turn_on(memory=True)

    status, init, headers = await mcp(http, sg, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert init["id"] == 1 and init["result"]["protocolVersion"] == "2025-03-26"
    assert "tools" in init["result"]["capabilities"] and init["result"]["serverInfo"]["name"]
    status, body, _ = await mcp(http, sg, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert (status, body) == (202, None)

    status, listed, _ = await mcp(http, sg, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    tools = {t["name"]: t for t in listed["result"]["tools"]}
    assert set(tools) == {"remember", "recall", "forget"}
    assert tools["remember"]["inputSchema"]["required"] == ["key", "text"]

    def call(i, name, **arguments):
        return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": arguments}}

    status, kept, _ = await mcp(http, sg, call(3, "remember", key="colour", text="Likes green.", tags=["preference"]),
                                **HELPER)
    assert kept["result"]["isError"] is False and kept["result"]["structuredContent"]["created"] is True
    status, note, _ = await get_json(http, "GET", f"{sg.url}/v1/memory/colour", headers=sg.headers(**HELPER))
    assert (status, note["text"], note["tags"]) == (200, "Likes green.", ["preference"])

    status, found, _ = await mcp(http, sg, call(4, "recall", query="green"), **HELPER)
    notes = found["result"]["structuredContent"]["notes"]
    assert [n["key"] for n in notes] == ["colour"]
    assert "Likes green." in found["result"]["content"][0]["text"]
    status, found, _ = await mcp(http, sg, call(5, "recall", query="green"))
    assert found["result"]["structuredContent"]["notes"] == [], "the default agent has notes of its own"

    status, gone, _ = await mcp(http, sg, call(6, "forget", key="colour"), **HELPER)
    assert gone["result"]["isError"] is False
    status, again, _ = await mcp(http, sg, call(7, "forget", key="colour"), **HELPER)
    assert again["result"]["isError"] is True and "no note" in again["result"]["content"][0]["text"]
    status, missing, _ = await mcp(http, sg, call(8, "remember", key="k"))
    assert missing["result"]["isError"] is True and "text" in missing["result"]["content"][0]["text"]


async def test_mcp_protocol_errors_and_refusals(stored_gateway, http):
    sg = await stored_gateway([model("m", "http://127.0.0.1:9/v1")])
    status, body, _ = await mcp(http, sg, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                           "params": {"name": "recall", "arguments": {}}})
    assert status == 200 and body["result"]["isError"] is True
    assert "off for this project" in body["result"]["content"][0]["text"]

    status, body, _ = await mcp(http, sg, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                           "params": {"name": "nope"}})
    assert body["error"]["code"] == -32602
    status, body, _ = await mcp(http, sg, {"jsonrpc": "2.0", "id": 3, "method": "resources/list"})
    assert body["error"]["code"] == -32601
    status, body, _ = await mcp(http, sg, {"id": 4, "method": "ping"})
    assert body["error"]["code"] == -32600
    status, body, _ = await mcp(http, sg, [{"jsonrpc": "2.0", "id": 5, "method": "ping"},
                                           {"jsonrpc": "2.0", "method": "notifications/initialized"}])
    assert body == [{"jsonrpc": "2.0", "id": 5, "result": {}}]
    async with http.post(f"{sg.url}/mcp", headers=sg.headers(), data=b"{not json") as resp:
        assert resp.status == 400 and (await resp.json())["error"]["code"] == -32700
    async with http.post(f"{sg.url}/mcp", data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})) as resp:
        assert resp.status == 401
    async with http.get(f"{sg.url}/mcp", headers=sg.headers()) as resp:
        assert resp.status == 405, "no server-sent stream is offered"
