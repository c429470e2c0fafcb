"""Kept requests (`llmgw keys requests`, `llmgw ctl request`): a key's or a project's requests and answers kept
when it asked, never by default; listed, shown and replayed against another model through the admin API.

A whole server runs in the test's process (tests/router/kept_server.py): the openai SDK talks to its client
API, `llmgw` commands to its store and its admin API, as an operator's would.
"""

from __future__ import annotations

import asyncio
import logging

from .kept_server import kept_server

HELLO = [{"role": "user", "content": "Tell me about the sea, briefly."}]


async def test_not_kept_by_default_then_kept_whole_and_streamed_once_asked(tmp_path, monkeypatch, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    async with kept_server(tmp_path, monkeypatch) as s:
        client = s.client()
        raw = await client.chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=8)
        before = raw.headers["x-request-id"]
        status, _ = await s.admin("GET", f"/requests/{before}")
        assert status == 404, "nothing is kept unless asked"
        assert s.count_rows() == 0

        setting = await s.ctl_json(capsys, "ctl", "kept-requests", f"key:{s.key_id}", "--keep", "7d")
        assert (setting["keep_s"], setting["in_force_s"], setting["in_force_set_by"]) == (604800, 604800, "key")

        whole = await client.chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=8)
        answer = whole.parse()
        stream = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=8, stream=True,
                                                      stream_options={"include_usage": True})
        streamed_text, streamed_id = "", None
        async for chunk in stream:
            streamed_id = streamed_id or chunk.id
            for choice in chunk.choices:
                streamed_text += choice.delta.content or ""
        await asyncio.sleep(0.2)  # kept as the request ends

        listed = await s.ctl_json(capsys, "ctl", "requests", "--key", s.key_id)
        assert len(listed["requests"]) == 2
        newest, oldest = listed["requests"]
        assert (newest["streamed"], oldest["streamed"]) == (True, False)
        assert oldest["id"] == whole.headers["x-request-id"]
        assert (oldest["model"], oldest["status"], oldest["completion_tokens"]) == ("m", 200, 8)

        shown = await s.ctl_json(capsys, "ctl", "request", "show", oldest["id"])
        assert shown["request"]["messages"] == HELLO and shown["request"]["max_tokens"] == 8
        assert shown["text"] == answer.choices[0].message.content
        assert shown["answer"]["usage"]["completion_tokens"] == 8

        kept_stream = await s.ctl_json(capsys, "ctl", "request", "show", newest["id"])
        assert kept_stream["text"] == streamed_text, "a streamed answer is kept assembled, as the client got it"
        assert kept_stream["answer"]["choices"][0]["finish_reason"] == "length"

        code, out, _ = await s.ctl(capsys, "ctl", "request", "show", oldest["id"])
        assert code == 0 and answer.choices[0].message.content in out and "-- request" in out

        # reads are audited; the text is in no log line
        status, audit = await s.admin("GET", "/audit", action="requests.*")
        assert status == 200
        assert {e["action"] for e in audit["events"]} >= {"requests.list", "requests.read"}
        assert HELLO[0]["content"] not in caplog.text and answer.choices[0].message.content not in caplog.text

        # --off stops it; what is kept stays until it expires
        code, out, _ = await s.ctl(capsys, "keys", "requests", f"key:{s.key_id}", "--off", "--config", s.config)
        assert code == 0 and "requests not kept" in out
