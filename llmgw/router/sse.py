"""Relaying an engine's server-sent events as they come.

The relay sees the stream as bytes and looks inside an event only when it
must: to find the usage an engine sends last (a chunk with `"usage":{` and
no choices) and, when the client did not ask for it, to leave that event
out. Whole events are passed on as soon as their blank line arrives;
nothing is decoded or encoded again.
"""

from __future__ import annotations

from llmgw.router.errors import loads
from llmgw.router.openai_shape import stream_bytes

_EVENT_END = b"\n\n"
_USAGE_MARK = b'"usage":{'
_NO_CHOICES = b'"choices":[]'
_DONE = b"data: [DONE]"


def find_usage(raw: bytes, start: int = 0) -> dict | None:
    """The last `"usage": {...}` object in a JSON text, read without parsing the rest.

    Used on whole answers (an embeddings answer can be megabytes of
    numbers) and on single stream events alike.
    """
    at = raw.rfind(b'"usage"', start)
    if at < 0:
        return None
    open_at = raw.find(b"{", at + 7)
    if open_at < 0 or raw[at + 7:open_at].strip(b" \t\r\n:"):
        return None  # "usage": null, or not an object
    depth = 0
    for i in range(open_at, len(raw)):
        c = raw[i]
        if c == 0x7B:  # {
            depth += 1
        elif c == 0x7D:  # }
            depth -= 1
            if depth == 0:
                try:
                    value = loads(raw[open_at:i + 1])
                except ValueError:
                    return None
                return value if isinstance(value, dict) else None
    return None


class SSERelay:
    """Cuts an engine's stream into whole events, takes the usage out of it.

    `feed(data)` returns the bytes to send the client now (whole events
    only); `close()` returns what is left. `usage` is the engine's usage
    once seen; `events` counts the data events passed (a rough count of
    tokens when an engine gives no usage).
    """

    __slots__ = ("_rest", "done", "events", "strip_usage", "usage")

    def __init__(self, *, strip_usage: bool) -> None:
        self.strip_usage = strip_usage
        self.usage: dict | None = None
        self.events = 0
        self.done = False
        self._rest = b""

    def feed(self, data: bytes) -> bytes:
        buf = self._rest + data if self._rest else data
        end = buf.rfind(_EVENT_END)
        if end < 0:
            # An engine that ends lines with \r\n: look for that ending too.
            end = buf.rfind(b"\r\n\r\n")
            if end < 0:
                self._rest = buf
                return b""
            end += 4
        else:
            end += 2
        ready, self._rest = buf[:end], buf[end:]
        self.events += ready.count(b"data: {") + ready.count(b"data:{")
        if _DONE in ready:
            self.done = True
        if _USAGE_MARK in ready or b'"usage": {' in ready:
            ready = self._take_usage(ready)
        return stream_bytes(ready)  # tool call ids as OpenAI's (call_…)

    def close(self) -> bytes:
        rest, self._rest = self._rest, b""
        if rest and (_USAGE_MARK in rest or b'"usage": {' in rest):
            rest = self._take_usage(rest)
        return stream_bytes(rest)

    def _take_usage(self, ready: bytes) -> bytes:
        """Read the last event with a usage object in `ready`; drop it when it is usage only and hidden."""
        at = max(ready.rfind(_USAGE_MARK), ready.rfind(b'"usage": {'))
        if at < 0:
            return ready
        start = ready.rfind(_EVENT_END, 0, at)
        start = 0 if start < 0 else start + 2
        end = ready.find(_EVENT_END, at)
        end = len(ready) if end < 0 else end + 2
        event = ready[start:end]
        usage = find_usage(event)
        if usage is None:
            return ready
        self.usage = usage
        if self.strip_usage and (_NO_CHOICES in event or b'"choices": []' in event):
            self.events -= 1
            return ready[:start] + ready[end:]
        return ready
