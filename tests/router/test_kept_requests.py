"""Kept requests (`llmgw keys requests`, `llmgw ctl request`): a key's or a project's requests and answers kept
when it asked, never by default; listed, shown and replayed against another model through the admin API.

A whole server runs in the test's process (tests/router/kept_server.py): the openai SDK talks to its client
API, `llmgw` commands to its store and its admin API, as an operator's would (slow: a server each). The
gateway alone, with a store, is tested in test_kept_requests_gateway.py.
"""

from __future__ import annotations

import asyncio
import logging

import openai
import pytest

from .conftest import model
from .kept_server import kept_server
from .stored import stored_gateway  # noqa: F401

HELLO = [{"role": "user", "content": "Tell me about the sea, briefly."}]


@pytest.mark.slow
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

        code, out, _ = await s.ctl(capsys, "keys", "requests", f"key:{s.key_id}", "--list", "--since", "1h",
                                   "--config", s.config)
        assert code == 0 and oldest["id"] in out and newest["id"] in out
        assert HELLO[0]["content"] not in out, "a list shows no text"
        code, _, err = await s.ctl(capsys, "ctl", "kept-requests", f"key:{s.key_id}", "--keep", "400d")
        assert code != 0 and "at most 366 days" in err

        # --off stops it; what is kept stays until it expires
        code, out, _ = await s.ctl(capsys, "keys", "requests", f"key:{s.key_id}", "--off", "--config", s.config)
        assert code == 0 and "requests not kept" in out


CARD = "4111 1111 1111 1111"


@pytest.mark.slow
async def test_a_guard_redacted_request_is_kept_redacted_and_a_no_store_key_never(tmp_path, monkeypatch, capsys):
    policy = {"default": ["baseline", "nosecrets"], "policies": {"nosecrets": {"input": {"pii": {"secret": "block"}}}}}
    async with kept_server(tmp_path, monkeypatch, guard=policy) as s:
        code, out, err = await s.ctl(capsys, "keys", "requests", "project:acme/a", "--keep", "2d",
                                     "--config", s.config)
        assert code == 0, err
        assert "project:acme/a: requests kept 48h" in out
        raw = await s.client().chat.completions.with_raw_response.create(
            model="echo", messages=[{"role": "user", "content": f"Charge my card {CARD} please."}])
        assert raw.headers["x-llmgw-guard"] == "redacted"
        await asyncio.sleep(0.2)
        shown = await s.ctl_json(capsys, "ctl", "request", "show", raw.headers["x-request-id"])
        assert shown["summary"]["guard_action"] == "redacted"
        assert CARD not in str(shown["request"]) and CARD not in shown["text"]
        assert "Charge my card" in shown["request"]["messages"][0]["content"]
        with pytest.raises(openai.APIStatusError) as blocked:
            await s.client().chat.completions.create(
                model="echo", messages=[{"role": "user", "content": "My key is AKIAIOSFODNN7EXAMPLE, keep it."}])
        assert blocked.value.status_code == 400
        await asyncio.sleep(0.2)
        assert s.count_rows() == 1, "a request the guardrails block is not kept"
        setting = await s.ctl_json(capsys, "ctl", "kept-requests", f"key:{s.key_id}")
        assert (setting["keep_s"], setting["in_force_s"], setting["in_force_set_by"]) == (None, 172800, "project")



async def test_a_key_under_a_no_store_policy_is_never_kept(sim, stored_gateway):
    """The guardrails' data policy wins over a rule: nothing of a no_store key is kept (on a model the
    cluster runs itself, as no_store also keeps the key in the cluster)."""
    import datetime as dt

    from llmgw.router.replicas import Replica
    from llmgw.router.residency import CLUSTER_SOURCE

    engine = await sim(models=["m"])
    policy = {"default": ["private"], "policies": {"private": {"no_store": True}}}
    sg = await stored_gateway([model("m")], guard=policy)
    sg.running.gateway.replicas.add(Replica(id="m-1", model="m", base_url=engine.url + "/v1",
                                            source=CLUSTER_SOURCE))
    await sg.store.set_keep_rule("project", sg.project.id, dt.timedelta(days=7))
    answer = await sg.client().chat.completions.create(model="m", messages=HELLO, max_tokens=2)
    assert answer.choices[0].message.content
    await asyncio.sleep(0.1)
    assert await sg.store.list_kept_requests() == []
    assert sg.accountant.rows[-1].status == 200


@pytest.mark.slow
async def test_expired_requests_are_swept_and_forget_deletes_a_persons(tmp_path, monkeypatch, capsys):
    from llmgw.router import client_data

    monkeypatch.setattr(client_data, "JANITOR_EVERY", 0.2)
    async with kept_server(tmp_path, monkeypatch) as s:
        await s.ctl_json(capsys, "ctl", "kept-requests", f"key:{s.key_id}", "--keep", "1s")
        await s.ctl_json(capsys, "ctl", "kept-requests", "project:acme/a", "--keep", "1d")
        await s.client().chat.completions.create(model="m", messages=HELLO, max_tokens=2)
        member = await s.client(s.member_secret).chat.completions.with_raw_response.create(
            model="m", messages=HELLO, max_tokens=2)
        await asyncio.sleep(0.2)
        assert s.count_rows() == 2
        for _ in range(50):  # the service key's, kept 1s, is deleted by the sweep; Ann's, kept 1d, stays
            if s.count_rows() == 1:
                break
            await asyncio.sleep(0.1)
        assert s.count_rows() == 1
        listed = await s.ctl_json(capsys, "ctl", "requests", "--project", "acme/a")
        assert [r["id"] for r in listed["requests"]] == [member.headers["x-request-id"]]

        code, out, err = await s.ctl(capsys, "ctl", "users", "forget", s.email, "--yes")
        assert code == 0, err
        assert "kept requests: 1" in out
        assert s.count_rows() == 0
        status, _ = await s.admin("GET", f"/requests/{member.headers['x-request-id']}")
        assert status == 404


@pytest.mark.slow
async def test_a_kept_request_replayed_against_another_model_side_by_side(tmp_path, monkeypatch, capsys):
    async with kept_server(tmp_path, monkeypatch) as s:
        await s.ctl_json(capsys, "ctl", "kept-requests", f"key:{s.key_id}", "--keep", "7d")
        raw = await s.client().chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=6)
        kept_id, first = raw.headers["x-request-id"], raw.parse()
        await asyncio.sleep(0.2)

        done = await s.ctl_json(capsys, "ctl", "request", kept_id, "--replay", "--model", "other")
        assert (done["status"], done["model"], done["replay_model"]) == (200, "m", "other")
        assert done["replayed"]["model"] == "other" and done["replayed_text"]
        assert done["original_text"] == first.choices[0].message.content
        assert done["replayed"]["usage"]["completion_tokens"] == 6, "the kept max_tokens goes with it"
        assert s.count_rows() == 1, "a replay is not kept again"
        key_id, tags = await s.usage_of(done["replay_request_id"])
        assert key_id == s.key_id and f"replay_of={kept_id}" in tags, "billed to the key that made it, tagged"

        code, out, _ = await s.ctl(capsys, "ctl", "request", kept_id, "--replay", "--model", "echo")
        assert code == 0
        head, *rows = out.splitlines()
        assert head.startswith(f"request {kept_id} replayed as req_")
        assert rows[0].startswith("kept: m") and "| replay: echo" in rows[0]
        assert "Tell me about the sea" in out, "echo answers with the kept prompt: the same request went"

        code, _, err = await s.ctl(capsys, "ctl", "request", kept_id, "--replay", "--model", "nope")
        assert code != 0 and "nope" in err
        code, _, err = await s.ctl(capsys, "ctl", "request", kept_id, "--replay")
        assert code == 2 and "--model" in err
        status, audit = await s.admin("GET", "/audit", action="requests.replay")
        assert [e["target"] for e in audit["events"]] == [f"request:{kept_id}"] * 3

        await s.ctl_json(capsys, "ctl", "residency", f"key:{s.key_id}", "--in-cluster")
        code, _, err = await s.ctl(capsys, "ctl", "request", kept_id, "--replay", "--model", "other")
        assert code == 1 and "must stay on the cluster's own engines" in err, "residency holds for a replay"

        status, _ = await s.admin("POST", f"/keys/{s.key_id}/revoke", {})
        assert status == 200
        code, _, err = await s.ctl(capsys, "ctl", "request", kept_id, "--replay", "--model", "other")
        assert code != 0 and "cannot be used now" in err and "billed to it" in err
