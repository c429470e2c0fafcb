"""`/v1/audio/transcriptions` and `/v1/audio/translations`: speech to text, passed to engines that serve it.

OpenAI's multipart form (`file`, `model`, and `language`, `prompt`,
`response_format`, `temperature`, `stream`, `timestamp_granularities[]`)
is read a piece at a time into a temporary file on disk, never whole in
memory, at most `router.batch.max_file_bytes` (the limit of every upload;
413 past it) and with no pause longer than `router.clients.body_timeout`
(408). Its fields are checked as a JSON body's are (llmgw.router.request_schemas,
`audio`). The form then goes to a replica of the model (vLLM serves Whisper
models at these paths), read again from the file for each try, with the
engine's own name for the model. The answer comes back as the engine sent
it: JSON, or text, SRT or VTT with the engine's content type; with
`stream=true`, as OpenAI's events (`transcript.text.delta`, then
`transcript.text.done` with the text and the usage), vLLM's chunks
translated to them.

Like every request it runs through the pipeline: the key, limits and
budget, admission, a usage row (the tokens the engine reports, in OpenAI's
`input_tokens`/`output_tokens` or as `prompt_tokens`/`completion_tokens`)
and the metrics. A model whose engine does not serve the path gets a 400
naming it (llmgw.router.passthrough). The file is not kept.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from llmgw.router.dialects import TranslatingRelay
from llmgw.router.errors import GatewayError, bad_request, dumps
from llmgw.router.files import _spool, _text, _within
from llmgw.router.gateway import Gateway
from llmgw.router.passthrough import PassThrough
from llmgw.router.pipeline import serve
from llmgw.router.request_schemas import problem_in
from llmgw.router.sse import SSERelay

#: Form fields read at most, and the longest a field's text may be.
MAX_FIELDS, MAX_FIELD_CHARS = 32, 16_384
#: Bytes read from the temporary file at a time when it is sent on.
SEND_PIECE = 256 * 1024
_NUMBERS = ("temperature",)
_BOOLEANS = ("stream",)


class AudioDialect(PassThrough):
    """One transcription or translation: a form upload in, the engine's answer out."""

    keeps_content_type = True  # text, SRT and VTT answers are not JSON

    def __init__(self, endpoint: str) -> None:
        super().__init__("audio", endpoint)
        self.fields: list[tuple[str, str]] = []  # every text field as sent, repeated ones included
        self.file: Any = None
        self.filename = "audio"
        self.file_type = "application/octet-stream"
        self.size = 0
        self.stream = False

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    async def read_body(self, request: web.Request, gw: Gateway) -> tuple[bytes, dict]:
        """The form: its file into a temporary file, its fields as the body the pipeline reads."""
        if not request.content_type.startswith("multipart/"):
            raise bad_request("send the audio as multipart/form-data with the fields `file` and `model`",
                              code="invalid_upload")
        limit = int(gw.config.router.batch.max_file_bytes)
        if request.content_length is not None and request.content_length > limit + 64 * 1024:
            from llmgw.router.files import _too_large

            raise _too_large(limit)
        pause = gw.config.router.clients.body_timeout.total_seconds()
        reader = await request.multipart()
        while (part := await _within(pause, reader.next())) is not None:
            if part.name == "file":
                if self.file is not None:
                    raise bad_request("the form has more than one `file`", param="file")
                self.filename = (part.filename or self.filename)[:255]
                self.file_type = part.headers.get("Content-Type", self.file_type)
                self.file = tempfile.TemporaryFile()
                self.size = await _spool(part, self.file, limit, pause)
            elif part.name:
                if len(self.fields) >= MAX_FIELDS:
                    raise bad_request(f"the form has more than {MAX_FIELDS} fields", code="invalid_upload")
                text = await _within(pause, _text(part))
                if len(text) > MAX_FIELD_CHARS:
                    raise bad_request(f"{part.name}: at most {MAX_FIELD_CHARS} characters", param=part.name)
                self.fields.append((part.name, text))
        if self.file is None:
            raise bad_request("the form has no `file` field: upload the audio as `file`", param="file")
        if not self.size:
            raise bad_request("the audio file is empty", param="file")
        body = self._body()
        if (problem := problem_in("audio", body)) is not None:
            raise bad_request(problem.message, param=problem.param, code=problem.code)
        self.stream = body.get("stream") is True
        return dumps(body), body

    def _body(self) -> dict[str, Any]:
        """The fields as a JSON body would hold them: numbers and booleans read from their text."""
        body: dict[str, Any] = {}
        for name, text in self.fields:
            value: Any = text
            if name in _NUMBERS:
                try:
                    value = float(text)
                except ValueError:
                    raise bad_request(f"{name}: expected a number, got {text[:40]!r}", param=name) from None
            elif name in _BOOLEANS:
                if text.lower() not in ("true", "false"):
                    raise bad_request(f"{name}: true or false, got {text[:40]!r}", param=name)
                value = text.lower() == "true"
            if name.endswith("[]"):
                body.setdefault(name, []).append(value)
            else:
                body[name] = value
        return body

    def relay(self, inner: SSERelay) -> SSERelay:
        return TranscriptEvents(inner)

    def engine_request(self, engine_model: str) -> tuple[Any, str]:
        """The form for the engine, made anew for each try: its name for the model, the file read again."""
        form = aiohttp.FormData()
        for name, text in self.fields:
            if name == "model":
                continue
            form.add_field(name, text)
        form.add_field("model", engine_model)
        if self.stream:  # vLLM's switch for the usage at the end of a stream
            form.add_field("stream_include_usage", "true")
        form.add_field("file", self._pieces(), filename=self.filename, content_type=self.file_type)
        payload = form()
        return payload, payload.content_type

    async def _pieces(self) -> AsyncIterator[bytes]:
        file = self.file
        file.seek(0)
        while piece := file.read(SEND_PIECE):
            yield piece


class TranscriptEvents(TranslatingRelay):
    """A streamed transcription as OpenAI sends it: `transcript.text.delta` events, then one
    `transcript.text.done` with the whole text and the usage. vLLM streams chat-completion-like
    chunks (`choices[0].delta.content`); an engine that speaks OpenAI's events already is passed on."""

    def __init__(self, inner: SSERelay) -> None:
        super().__init__(inner)
        self.text: list[str] = []
        self.engine_done = False

    def on_chunk(self, chunk: dict) -> bytes:
        kind = chunk.get("type")
        if isinstance(kind, str) and kind.startswith("transcript."):
            self.engine_done = self.engine_done or kind == "transcript.text.done"
            return _event(chunk)
        choices = chunk.get("choices")
        delta = choices[0].get("delta") if isinstance(choices, list) and choices and isinstance(choices[0], dict) \
            else None
        piece = delta.get("content") if isinstance(delta, dict) else None
        if not isinstance(piece, str) or not piece:
            return b""
        self.text.append(piece)
        return _event({"type": "transcript.text.delta", "delta": piece, "logprobs": None})

    def finish(self) -> bytes:
        if self.engine_done:
            return b""
        done: dict[str, Any] = {"type": "transcript.text.done", "text": "".join(self.text), "logprobs": None}
        usage = self.inner.usage
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(prompt, int) and isinstance(completion, int):
                done["usage"] = {"type": "tokens", "input_tokens": prompt, "output_tokens": completion,
                                 "total_tokens": prompt + completion}
        return _event(done)

    def on_engine_error(self, error: dict) -> bytes:
        return _event({"type": "error", "error": error})

    def error_event(self, error: GatewayError) -> bytes:
        return _event({"type": "error", "error": {"message": error.message, "type": error.type,
                                                  "code": error.code, "param": error.param}})


def _event(payload: dict) -> bytes:
    return b"data: " + dumps(payload) + b"\n\n"


async def _serve_audio(request: web.Request, path: str) -> web.StreamResponse:
    dialect = AudioDialect("/v1" + path)
    try:
        return await serve(request, "audio", path, dialect=dialect)
    finally:
        with contextlib.suppress(OSError):
            dialect.close()


async def transcriptions(request: web.Request) -> web.StreamResponse:
    return await _serve_audio(request, "/audio/transcriptions")


async def translations(request: web.Request) -> web.StreamResponse:
    return await _serve_audio(request, "/audio/translations")


__all__ = ["AudioDialect", "transcriptions", "translations"]
