"""The streaming filter on its own: what is held, what is released, when a stream is stopped."""

from __future__ import annotations

import pytest

from llmgw.auth.principal import ANONYMOUS
from llmgw.guard.gateway import GuardLayer
from llmgw.guard.policy import PolicyBook, parse_policies
from llmgw.guard.scan import Scanner
from llmgw.guard.stream import MAX_HELD_CHARS, RELEASE_CHARS
from llmgw.plugins.manager import load_plugins
from llmgw.router.errors import dumps, loads
from llmgw.router.sse import SSERelay


def chunk(content=None, finish=None, role=None, tool_calls=None, index=0) -> bytes:
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}
    return b"data: " + dumps(body) + b"\n\n"


def events(raw: bytes) -> list:
    out = []
    for event in raw.split(b"\n\n"):
        if event.startswith(b"data: "):
            data = event[6:]
            out.append("[DONE]" if data == b"[DONE]" else loads(data))
    return out


def text_of(raw: bytes) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in events(raw)
                   if isinstance(c, dict) and c["choices"])


def finishes(raw: bytes) -> list:
    return [c["choices"][0]["finish_reason"] for c in events(raw) if isinstance(c, dict) and c["choices"]
            and c["choices"][0]["finish_reason"]]


@pytest.fixture(scope="module")
def detectors():
    return load_plugins().detectors()


def relay(detectors, policy: dict, body: dict | None = None):
    layer = GuardLayer(PolicyBook(parse_policies({"p": policy}), ["p"]), Scanner(detectors))
    guard = layer.begin(ANONYMOUS, "m", "chat")
    return guard, guard.wrap(SSERelay(strip_usage=False)), body or {"messages": [{"role": "user", "content": "hi"}]}


async def feed_all(r, pieces: list[bytes]) -> bytes:
    out = b""
    for p in pieces:
        out += await r.feed(p)
    return out + await r.close()


async def test_text_is_held_until_a_sentence_ends_and_released_up_to_the_last_whitespace(detectors):
    guard, r, body = relay(detectors, {"output": {"pii": {"email": "redact"}}})
    await guard.check_input(body)
    first = await r.feed(chunk(role="assistant", content=""))
    assert text_of(first) == ""  # the role passes at once
    assert await r.feed(chunk("Hello there")) == b""
    out = await r.feed(chunk(". More wor"))
    assert text_of(out) == "Hello there. More "  # up to the last whitespace; "wor" waits
    rest = await feed_all(r, [chunk("ds follow"), chunk(finish="stop"), b"data: [DONE]\n\n"])
    assert text_of(rest) == "words follow" and finishes(rest) == ["stop"]
    assert events(rest)[-1] == "[DONE]"


async def test_a_value_arriving_in_pieces_is_never_released_in_halves(detectors):
    guard, r, body = relay(detectors, {"output": {"pii": {"email": "redact"}}})
    await guard.check_input(body)
    out = await feed_all(r, [chunk("Write to jane.d"), chunk("oe@exa"), chunk("mple.com. "), chunk("Thanks!"),
                             chunk(finish="stop"), b"data: [DONE]\n\n"])
    assert text_of(out) == "Write to [EMAIL_1]. Thanks!"


async def test_a_secret_stops_the_stream_with_content_filter_and_done(detectors):
    guard, r, body = relay(detectors, {"output": {"secrets": "block"}})
    await guard.check_input(body)
    out = await r.feed(chunk("Fine. "))
    out += await r.feed(chunk("The key is AKIAIOSFODNN7EXAMPLE ok. "))
    assert r.stopped
    assert "AKIA" not in text_of(out) and finishes(out) == ["content_filter"] and events(out)[-1] == "[DONE]"
    assert await r.feed(chunk("more")) == b""
    assert guard.record.action == "blocked" and guard.record.stage == "output"


async def test_a_value_split_by_a_release_is_still_found(detectors):
    guard, r, body = relay(detectors, {"output": {"pii": {"card": "block"}}})
    await guard.check_input(body)
    filler = "x" * (RELEASE_CHARS - 12)
    out = await r.feed(chunk(f"{filler} 4111 1111"))  # 200 characters: released up to "1111" but not past
    out += await r.feed(chunk(" 1111 1111 and so on. "))
    assert r.stopped and finishes(out) == ["content_filter"]


async def test_buffer_all_holds_everything_until_the_end(detectors):
    guard, r, body = relay(detectors, {"stream": "buffer_all", "output": {"pii": {"email": "redact"}}})
    await guard.check_input(body)
    first = await r.feed(chunk("One sentence. Two sentences. "))
    assert first == b": checking\n\n"  # a comment: the stream has begun, nothing is released
    assert await r.feed(chunk("Mail a@example.com now. ")) == b""
    out = await feed_all(r, [chunk(finish="stop"), b"data: [DONE]\n\n"])
    assert text_of(out) == "One sentence. Two sentences. Mail [EMAIL_1] now. " and finishes(out) == ["stop"]


async def test_a_long_word_is_released_whole_once_it_is_too_long_to_hold(detectors):
    guard, r, body = relay(detectors, {"output": {"pii": {"email": "flag"}}})
    await guard.check_input(body)
    out = await r.feed(chunk("z" * (MAX_HELD_CHARS - 1)))
    assert out == b": checking\n\n"
    out = await r.feed(chunk("zz"))
    assert len(text_of(out)) == MAX_HELD_CHARS + 1


async def test_tool_calls_are_held_until_the_turn_ends_then_checked(detectors):
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    body = {"messages": [{"role": "user", "content": "find"}], "tools": tools}
    guard, r, _ = relay(detectors, {"tools": {"max_calls_per_turn": 1}})
    await guard.check_input(body)
    call = lambda i: [{"index": i, "id": f"t{i}", "type": "function", "function": {"name": "search", "arguments": "{}"}}]
    out = await r.feed(chunk(role="assistant", tool_calls=call(0)))
    out += await r.feed(chunk(tool_calls=call(1)))
    assert all(not c["choices"][0]["delta"].get("tool_calls") for c in events(out) if isinstance(c, dict))
    out += await r.feed(chunk(finish="tool_calls"))
    assert finishes(out) == ["content_filter"] and guard.record.category == "tools"
    guard, r, _ = relay(detectors, {"tools": {"max_calls_per_turn": 2}})
    await guard.check_input(body)
    out = await feed_all(r, [chunk(role="assistant", tool_calls=call(0)), chunk(finish="tool_calls"),
                             b"data: [DONE]\n\n"])
    assert finishes(out) == ["tool_calls"]
    assert [c["choices"][0]["delta"].get("tool_calls") for c in events(out) if isinstance(c, dict)][0] == call(0)


async def test_usage_and_done_pass_through_after_the_held_text(detectors):
    guard, r, body = relay(detectors, {"output": {"pii": {"email": "flag"}}})
    await guard.check_input(body)
    usage = b'data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}\n\n'
    out = await feed_all(r, [chunk("no end in sight"), chunk(finish="length"), usage, b"data: [DONE]\n\n"])
    kinds = [("done" if e == "[DONE]" else "usage" if not e["choices"] else "text") for e in events(out)]
    assert kinds[-2:] == ["usage", "done"] and text_of(out) == "no end in sight"
    assert r.usage == {"prompt_tokens": 1, "completion_tokens": 2}
