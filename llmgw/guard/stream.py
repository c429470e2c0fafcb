"""A streamed answer checked before the client sees it.

`GuardedRelay` sits on the router's SSE relay (it reads the whole events
that relay cuts) and holds each choice's text until a sentence, a line or
`RELEASE_CHARS` characters end; then it checks the held text and releases it
up to its last whitespace, so a value still arriving is never sent in two
halves. The check reads the held text together with the last
`CONTEXT_CHARS` released, so a value split by a release is still found;
only its unreleased part can be redacted then. A word with no whitespace
for `MAX_HELD_CHARS` (a long key, a blob) is checked and released whole.

Blocked text stops the stream: a last chunk with `finish_reason:
content_filter` for every choice still open, then `data: [DONE]`; the
relay then closes the engine's connection, which cancels the request
there. With `stream: buffer_all` nothing is released until the end, so the
structure and the judge's verdict on the whole answer can still stop it.

Tool calls are held until their turn ends, then checked as a whole (the
tools the policy allows, `max_calls_per_turn`, the arguments against the
declared parameters). A judge reads the answer every `JUDGE_EVERY`
characters, in the background, and at the end; what went out between two
readings cannot be taken back.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import attrs

from llmgw.guard.redact import redact
from llmgw.plugins.types import Finding
from llmgw.router.errors import dumps, loads

__all__ = ["CONTEXT_CHARS", "JUDGE_EVERY", "MAX_HELD_CHARS", "RELEASE_CHARS", "GuardedRelay"]

RELEASE_CHARS = 200
CONTEXT_CHARS = 120
MAX_HELD_CHARS = 4096
JUDGE_EVERY = 600
_EVENT_SPLIT = re.compile(rb"\r?\n\r?\n")
_SENTENCE_END = re.compile(r"[.!?…。！？][\"')\]]*\s|\n")
_DONE = b"data: [DONE]\n\n"


@attrs.define
class _Choice:
    index: int
    held: str = ""
    tail: str = ""  #: the end of what was released, as the engine wrote it: context for the next check
    text: list[str] = attrs.Factory(list)  #: everything the engine wrote, for the judge and the structure
    chars: int = 0
    calls: dict[int, list[str]] = attrs.Factory(dict)  #: tool call index -> [name, arguments]
    call_events: list[dict] = attrs.Factory(list)  #: the tool-call deltas, held until the turn ends
    finished: bool = False
    next_judge: int = JUDGE_EVERY


class GuardedRelay:
    """An SSE relay whose text is checked before it is released (see the module's doc).

    `feed` and `close` are coroutines (a judge may be asked); `stopped`
    tells the router to stop reading the engine.
    """

    def __init__(self, inner: Any, guard: Any) -> None:
        self.inner = inner
        self.guard = guard
        self.stopped = False
        self.buffer_all = guard.enforced.stream == "buffer_all"
        self.chat = guard.kind == "chat"
        self._choices: dict[int, _Choice] = {}
        self._template: dict[str, Any] | None = None
        self._judging: list[asyncio.Task] = []
        self._seconds = 0.0
        self._counted = False
        self._sent = False
        stage = guard.compiled.output
        self._patterns = bool(stage)
        self._judge = bool(guard.would.judge.output)

    # -- the relay's interface ------------------------------------------------

    @property
    def usage(self) -> dict | None:
        return self.inner.usage

    @property
    def events(self) -> int:
        return self.inner.events

    @property
    def done(self) -> bool:
        return self.inner.done or self.stopped

    async def feed(self, data: bytes) -> bytes:
        if self.stopped:
            return b""
        ready = self.inner.feed(data)
        if not ready:
            return b""
        out = await self._events(ready)
        if out:
            self._sent = True
        elif not self._sent:
            # Something came and all of it is held: a comment, which clients skip, tells the
            # router the stream has begun (its first_byte wait must not run out meanwhile).
            self._sent = True
            out = b": checking\n\n"
        return out

    async def close(self) -> bytes:
        if self.stopped:
            self.inner.close()
            return b""
        tail = self.inner.close()
        out = await self._events(tail) if tail else b""
        if not self.stopped:
            # An engine that ended without finishing a choice: what it held is checked and released.
            for choice in self._choices.values():
                if not choice.finished and not self.stopped:
                    out += await self._release(choice, final=True)
            self._count()
        return out

    # -- reading events ---------------------------------------------------------

    async def _events(self, ready: bytes) -> bytes:
        out = bytearray()
        for event in _EVENT_SPLIT.split(ready):
            if not event.strip() or self.stopped:
                continue
            payload = _data_of(event)
            chunk = None
            if payload is not None and payload != b"[DONE]":
                try:
                    chunk = loads(payload)
                except ValueError:
                    chunk = None
            if not isinstance(chunk, dict) or not chunk.get("choices"):
                if payload == b"[DONE]":
                    for choice in self._choices.values():
                        if not choice.finished and not self.stopped:
                            out += await self._release(choice, final=True)
                    if self.stopped:
                        break
                    self._count()
                out += event + b"\n\n"  # usage, [DONE], comments: passed on as they are
                continue
            self._template = {k: v for k, v in chunk.items() if k not in ("choices", "usage")}
            for raw in chunk["choices"]:
                if self.stopped:
                    break
                if isinstance(raw, dict):
                    out += await self._choice_event(raw)
        return bytes(out)

    async def _choice_event(self, raw: dict[str, Any]) -> bytes:
        index = raw.get("index", 0)
        choice = self._choices.get(index)
        if choice is None:
            choice = self._choices[index] = _Choice(index)
        out = b""
        delta = raw.get("delta") if self.chat else None
        text = (delta or {}).get("content") if self.chat else raw.get("text")
        calls = (delta or {}).get("tool_calls") if self.chat else None
        finish = raw.get("finish_reason")
        if isinstance(calls, list) and calls:
            self._hold_calls(choice, calls, delta)
        elif isinstance(text, str) and text:
            choice.held += text
            out += await self._release(choice, final=False)
        elif not finish:
            out += self._chunk(index, {k: v for k, v in raw.items() if k != "index"})  # a role, an empty start
        if finish and not self.stopped:
            out += await self._finish(choice, finish)
        return out

    def _hold_calls(self, choice: _Choice, calls: list, delta: dict) -> None:
        for call in calls:
            if not isinstance(call, dict):
                continue
            slot = choice.calls.setdefault(call.get("index", 0), ["", ""])
            fn = call.get("function") or {}
            if isinstance(fn.get("name"), str):
                slot[0] += fn["name"]
            if isinstance(fn.get("arguments"), str):
                slot[1] += fn["arguments"]
        choice.call_events.append(delta)

    # -- releasing text ---------------------------------------------------------

    async def _release(self, choice: _Choice, *, final: bool) -> bytes:
        held = choice.held
        if not held or (self.buffer_all and not final):
            return b""
        if final:
            cut = len(held)
        else:
            if len(held) < RELEASE_CHARS and not _SENTENCE_END.search(held):
                return b""
            cut = max(held.rfind(" "), held.rfind("\n"), held.rfind("\t")) + 1
            if cut <= 0:
                if len(held) < MAX_HELD_CHARS:
                    return b""
                cut = len(held)
        piece, choice.held = held[:cut], held[cut:]
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            released = self._check(choice, piece)
            if released is None:
                return self._stop(None)
            choice.text.append(piece)
            choice.chars += len(piece)
            choice.tail = (choice.tail + piece)[-CONTEXT_CHARS:]
            verdict = await self._judge_now(choice, final=final)
            if verdict is not None:
                return self._stop(verdict)
        finally:
            self._seconds += loop.time() - started
        return self._chunk(choice.index, {"delta": {"content": released}} if self.chat else {"text": released})

    def _check(self, choice: _Choice, piece: str) -> str | None:
        """`piece` as it may be released (redacted), or None when it must stop the stream."""
        if not self._patterns:
            return piece
        window = choice.tail + piece
        offset = len(choice.tail)
        found = self.guard.scan("output", self.guard.compiled.output, [window])
        if found is None:
            return None
        hits = [h for h in found if h.finding.end > offset]
        self.guard.note_hits("output", hits)
        if any(h.action == "block" for h in hits):
            return None
        redacting = [Finding(h.finding.kind, max(h.finding.start, offset) - offset, h.finding.end - offset,
                             h.finding.category) for h in hits if h.action == "redact"]
        if not redacting:
            return piece
        self.guard._count_redactions(redacting)
        return redact(piece, redacting, self.guard.numbering)

    async def _judge_now(self, choice: _Choice, *, final: bool) -> str | None:
        """Start a background reading every JUDGE_EVERY characters; at the end, wait for all of them.

        Returns the label to stop with, or None.
        """
        if not self._judge:
            return None
        for task in [t for t in self._judging if t.done()]:
            self._judging.remove(task)
            label = task.result()
            if label:
                return label
        if final:
            pending, self._judging = self._judging, []
            for label in await asyncio.gather(*pending):
                if label:
                    return label
            return await self._ask(choice)
        if not self.buffer_all and choice.chars >= choice.next_judge:
            choice.next_judge = choice.chars + JUDGE_EVERY
            self._judging.append(asyncio.ensure_future(self._ask(choice)))
        return None

    async def _ask(self, choice: _Choice) -> str | None:
        action, label, _ = await self.guard.ask_judge("output", self.guard._judge_messages("".join(choice.text)))
        return label if action == "block" else None

    # -- ending a choice, stopping ------------------------------------------------

    async def _finish(self, choice: _Choice, reason: str) -> bytes:
        calls = [tuple(v) for _, v in sorted(choice.calls.items())]
        full = "".join(choice.text) + choice.held
        stop = self.guard.check_finished(calls, full, buffered=self.buffer_all)
        if stop:
            return self._stop(stop)
        had_held = bool(choice.held)
        out = await self._release(choice, final=True) if had_held else b""
        if self.stopped:
            return out
        if not had_held and choice.text and self._judge:
            verdict = await self._judge_now(choice, final=True)
            if verdict:
                return self._stop(verdict)
        for delta in choice.call_events:
            out += self._chunk(choice.index, {"delta": delta})
        choice.finished = True
        empty = {"delta": {}} if self.chat else {"text": ""}
        return out + self._chunk(choice.index, {**empty, "finish_reason": reason})

    def _stop(self, label: str | None) -> bytes:
        """End the stream with content_filter; `label` is recorded unless the patterns' hit already was."""
        self.stopped = True
        for task in self._judging:
            task.cancel()
        self._judging.clear()
        if label is not None:
            self.guard.note("output", "block", label)
        metrics = self.guard.layer.metrics
        if metrics is not None:
            metrics.stream_stops.inc()
        out = b""
        empty = {"delta": {}} if self.chat else {"text": ""}
        for choice in self._choices.values():
            if not choice.finished:
                choice.finished = True
                out += self._chunk(choice.index, {**empty, "finish_reason": "content_filter"})
        self._count()
        return out + _DONE

    def _chunk(self, index: int, fields: dict[str, Any]) -> bytes:
        base = self._template or {"object": "chat.completion.chunk" if self.chat else "text_completion"}
        choice = {"index": index, **fields}
        choice.setdefault("finish_reason", None)
        if self.chat:
            choice.setdefault("delta", {})
        return b"data: " + dumps({**base, "choices": [choice]}) + b"\n\n"

    def _count(self) -> None:
        if not self._counted:
            self._counted = True
            self.guard.spent("output", self._seconds)


def _data_of(event: bytes) -> bytes | None:
    """The data of one server-sent event (its `data:` lines joined), or None."""
    lines = [line[5:].lstrip(b" ") if line.startswith(b"data:") else None for line in event.splitlines()]
    data = [d for d in lines if d is not None]
    return b"\n".join(data) if data else None

