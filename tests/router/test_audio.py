"""`/v1/audio/transcriptions` and `/translations` through the official openai SDK, passed to a fake
Whisper engine this test runs (vLLM serves Whisper at these paths; no such model runs here)."""

from __future__ import annotations

import json

import openai
import pytest
from aiohttp import web

from .conftest import model, principal

AUDIO = b"RIFF" + bytes(range(256)) * 400  # ~100 KiB that stands in for a WAV file


@pytest.fixture
async def whisper():
    running = []

    async def make():
        seen: list[dict] = []

        async def speech(request: web.Request) -> web.StreamResponse:
            form = await request.post()
            upload = form["file"]
            data = upload.file.read()
            fields = {k: v for k, v in form.items() if k != "file"}
            seen.append({"path": request.path, "bytes": len(data), "filename": upload.filename,
                         "fields": fields, "content_type": request.headers["Content-Type"]})
            words = "the river runs to the sea" if request.path.endswith("transcriptions") else "translated"
            if fields.get("stream") == "true" and fields.get("language") == "openai":  # OpenAI's own events
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                for event in ({"type": "transcript.text.delta", "delta": "hello"},
                              {"type": "transcript.text.done", "text": "hello"}):
                    await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                return resp
            if fields.get("stream") == "true":
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                for word in words.split():
                    chunk = {"object": "transcription.chunk", "choices": [{"delta": {"content": word + " "}}]}
                    await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                usage = {"object": "transcription.chunk", "choices": [],
                         "usage": {"prompt_tokens": 50, "completion_tokens": 6, "total_tokens": 56}}
                await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
                return resp
            if fields.get("response_format") == "text":
                return web.Response(text=words + "\n", content_type="text/plain")
            return web.json_response({"text": words, "usage": {"type": "tokens", "input_tokens": len(data) // 1000,
                                                               "output_tokens": 6, "total_tokens": 106}})

        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_post("/v1/audio/transcriptions", speech)
        app.router.add_post("/v1/audio/translations", speech)
        app.router.add_get("/v1/models", lambda r: web.json_response({"object": "list", "data": []}))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        running.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}/v1", seen

    yield make
    for runner in running:
        await runner.cleanup()


async def test_transcriptions_create_through_the_sdk_is_one_usage_row(gateway, whisper):
    url, seen = await whisper()
    gw = await gateway([{**model("whisper", url), "aliases": ["whisper-1"]}], keys={"sk-a": principal("key-a")})
    raw = await gw.client("sk-a").audio.transcriptions.with_raw_response.create(
        model="whisper-1", file=("talk.wav", AUDIO, "audio/wav"), language="en", temperature=0.2)
    answer = raw.parse()
    assert answer.text == "the river runs to the sea"
    (sent,) = seen
    assert sent["bytes"] == len(AUDIO) and sent["filename"] == "talk.wav"
    assert sent["fields"]["model"] == "whisper" and sent["fields"]["language"] == "en", "the engine's name"
    assert sent["content_type"].startswith("multipart/form-data")
    (row,) = await gw.settle(1)
    assert row.request_id == raw.headers["x-llmgw-request-id"]
    assert (row.model_requested, row.model_served, row.status, row.outcome) == ("whisper-1", "whisper", 200, "ok")
    assert (row.prompt_tokens, row.completion_tokens, row.key_id) == (len(AUDIO) // 1000, 6, "key-a")
    assert 'llmgw_requests_total{model="whisper",outcome="ok"} 1.0' in gw.metrics.exposition().decode()


async def test_text_answers_keep_their_type_and_translations_work(gateway, whisper):
    url, seen = await whisper()
    gw = await gateway([model("whisper", url)])
    text = await gw.client().audio.transcriptions.create(model="whisper", file=("a.wav", AUDIO),
                                                         response_format="text")
    assert text.strip() == "the river runs to the sea"
    translated = await gw.client().audio.translations.create(model="whisper", file=("a.wav", AUDIO))
    assert translated.text == "translated" and seen[-1]["path"] == "/v1/audio/translations"


async def test_a_streamed_transcription_relays_the_engines_events(gateway, whisper):
    url, seen = await whisper()
    gw = await gateway([model("whisper", url)])
    stream = await gw.client().audio.transcriptions.create(model="whisper", file=("a.wav", AUDIO), stream=True)
    events = [e async for e in stream]
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    assert "".join(deltas).split() == "the river runs to the sea".split(), "vLLM's chunks as OpenAI's events"
    done = events[-1]
    assert done.type == "transcript.text.done" and done.text == "".join(deltas)
    assert (done.usage.input_tokens, done.usage.output_tokens) == (50, 6)
    assert seen[-1]["fields"]["stream_include_usage"] == "true"
    (row,) = await gw.settle(1)
    assert (row.prompt_tokens, row.completion_tokens, row.outcome) == (50, 6, "ok")


async def test_uploads_are_held_to_the_file_limit_and_forms_checked(gateway, whisper, http):
    url, seen = await whisper()
    gw = await gateway([model("whisper", url)], router={"batch": {"max_file_bytes": "64KiB"}})
    with pytest.raises(openai.APIStatusError) as big:
        await gw.client().audio.transcriptions.create(model="whisper", file=("a.wav", AUDIO))
    assert big.value.status_code == 413 and big.value.body["code"] == "file_too_large"
    small = AUDIO[:1000]
    with pytest.raises(openai.BadRequestError) as bad:
        await gw.client().audio.transcriptions.create(model="whisper", file=("a.wav", small), temperature=3)
    assert bad.value.body["param"] == "temperature"
    async with http.post(gw.base_url + "/audio/transcriptions", json={"model": "whisper"}) as resp:
        assert resp.status == 400 and (await resp.json())["error"]["code"] == "invalid_upload"
    assert not seen, "nothing refused reached the engine"


async def test_a_model_that_does_not_serve_audio_is_a_clear_400(sim, gateway):
    engine = await sim(models=["chat"])
    gw = await gateway([model("chat", engine)])
    with pytest.raises(openai.BadRequestError) as refused:
        await gw.client().audio.transcriptions.create(model="chat", file=("a.wav", AUDIO[:1000]))
    assert refused.value.body["code"] == "unsupported_endpoint"
    assert "/v1/audio/transcriptions" in refused.value.body["message"]


async def test_an_engine_streaming_openais_events_is_passed_on(gateway, whisper):
    url, _ = await whisper()
    gw = await gateway([model("whisper", url)])
    stream = await gw.client().audio.transcriptions.create(model="whisper", file=("a.wav", AUDIO), stream=True,
                                                           language="openai")
    assert [(e.type, getattr(e, "delta", None) or e.text) async for e in stream] == [
        ("transcript.text.delta", "hello"), ("transcript.text.done", "hello")], "once each, not doubled"
