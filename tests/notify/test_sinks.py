"""The `webhook` and `slack` sinks of llmgw-notify-sinks against a local receiver: bodies, signatures, retries."""

from __future__ import annotations

import datetime as dt
import re
import time
from pathlib import Path

import aiohttp
import pytest
from llmgw_notify_sinks import RetryPolicy, SlackSink, WebhookSink

from llmgw.plugins.types import Event, SinkTarget

from .conftest import FAST

DOCS = Path(__file__).resolve().parents[2] / "docs" / "notifications.md"

EVENT = Event(kind="model_parked", subject="qwen", summary="qwen is parked <after> 3 failed starts & more.",
              details={"model": "qwen", "failures": 3, "replicas": ["r1", "r2"]},
              time=dt.datetime(2026, 9, 1, 14, 3, tzinfo=dt.UTC), source="cp-1", id="evt-0123")


def receiver_verify():
    """The `verify` function docs/notifications.md gives receivers, run as written there."""
    text = DOCS.read_text()
    block = re.search(r"```python\n(.*?def verify\(.*?)```", text, re.DOTALL)
    assert block, "docs/notifications.md has no ```python block defining verify()"
    scope: dict = {}
    exec(block.group(1), scope)  # noqa: S102 - our own documentation's code
    return scope["verify"]


async def send(sink, url: str, event: Event = EVENT, secret: str | None = None):
    async with aiohttp.ClientSession() as session:
        return await sink.send(SinkTarget(name="t", url=url, secret=secret), event, session)


async def test_a_webhook_body_is_the_event_and_its_signature_verifies_as_the_docs_say(receiver):
    delivery = await send(WebhookSink(FAST), receiver.url + "/hook", secret="s3cr3t-signing-key")
    assert delivery.ok and delivery.status == 200 and delivery.attempts == 1
    [got] = receiver.received
    assert got.json() == {
        "id": "evt-0123", "kind": "model_parked", "subject": "qwen",
        "summary": "qwen is parked <after> 3 failed starts & more.",
        "details": {"model": "qwen", "failures": 3, "replicas": ["r1", "r2"]},
        "time": "2026-09-01T14:03:00.000Z", "source": "cp-1",
    }
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["X-Llmgw-Event"] == "model_parked" and got.headers["X-Llmgw-Event-Id"] == "evt-0123"
    assert abs(int(got.headers["X-Llmgw-Timestamp"]) - time.time()) < 5
    assert got.headers["X-Llmgw-Signature"].startswith("sha256=")
    assert "s3cr3t" not in str(got.headers)

    verify = receiver_verify()
    assert verify(b"s3cr3t-signing-key", got.headers, got.body)
    assert not verify(b"another-key", got.headers, got.body)
    assert not verify(b"s3cr3t-signing-key", got.headers, got.body.replace(b"qwen", b"qwex"))
    old = {**got.headers, "X-Llmgw-Timestamp": str(int(got.headers["X-Llmgw-Timestamp"]) - 3600)}
    assert not verify(b"s3cr3t-signing-key", old, got.body)  # a replay, an hour later


async def test_a_webhook_without_a_secret_is_sent_unsigned(receiver):
    assert (await send(WebhookSink(FAST), receiver.url + "/hook")).ok
    [got] = receiver.received
    assert "X-Llmgw-Signature" not in got.headers and "X-Llmgw-Timestamp" in got.headers


async def test_a_slack_body_says_the_event_in_words_with_simple_blocks(receiver):
    assert (await send(SlackSink(FAST), receiver.url + "/services/T000/B000/XXXX", secret="ignored")).ok
    [got] = receiver.received
    body = got.json()
    assert set(body) == {"text", "blocks"}
    assert body["text"] == "Model parked: qwen is parked <after> 3 failed starts & more."
    assert [b["type"] for b in body["blocks"]] == ["header", "section", "section", "context"]
    assert body["blocks"][0]["text"] == {"type": "plain_text", "text": "Model parked"}
    assert body["blocks"][1]["text"]["text"] == "qwen is parked &lt;after&gt; 3 failed starts &amp; more."
    assert body["blocks"][2]["text"]["text"] == "*model*: qwen\n*failures*: 3\n*replicas*: r1, r2"
    assert body["blocks"][3]["elements"][0]["text"] == "qwen · cp-1 · 2026-09-01 14:03:00 UTC · `model_parked`"
    assert "X-Llmgw-Signature" not in got.headers


async def test_a_5xx_is_tried_again_until_it_passes(receiver):
    receiver.answers = [500, 503]
    delivery = await send(WebhookSink(FAST), receiver.url + "/hook", secret="k")
    assert delivery.ok and delivery.status == 200 and delivery.attempts == 3
    assert len(receiver.received) == 3
    assert len({r.headers["X-Llmgw-Event-Id"] for r in receiver.received}) == 1  # one event, tried three times


async def test_a_5xx_every_time_gives_up_after_the_last_try(receiver):
    receiver.answers = [502, 502, 502, 502]
    delivery = await send(SlackSink(FAST), receiver.url + "/slack")
    assert not delivery.ok and delivery.status == 502 and delivery.attempts == 3
    assert delivery.error == "answered 502: refused with 502"


async def test_a_4xx_is_not_tried_again(receiver):
    receiver.answers = [400]
    delivery = await send(WebhookSink(FAST), receiver.url + "/hook")
    assert not delivery.ok and delivery.status == 400 and delivery.attempts == 1
    assert len(receiver.received) == 1 and delivery.error.startswith("answered 400")


async def test_a_refused_connection_is_tried_again_and_its_error_hides_the_address_path():
    from llmgw.admin.testing import free_port

    url = f"http://127.0.0.1:{free_port()}/services/T000/B000/slack-key-in-the-path"
    policy = RetryPolicy(attempts=2, backoff=0.01, timeout=2.0)
    delivery = await send(SlackSink(policy), url)
    assert not delivery.ok and delivery.status is None and delivery.attempts == 2
    assert delivery.error and "slack-key-in-the-path" not in delivery.error and "/services" not in delivery.error


async def test_a_try_that_gets_no_answer_in_time_is_tried_again(receiver):
    import asyncio

    from aiohttp import web

    slow = web.Application()
    release = asyncio.Event()

    async def hang(request):
        await release.wait()
        return web.Response()

    slow.router.add_post("/", hang)
    runner = web.AppRunner(slow)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        delivery = await send(WebhookSink(RetryPolicy(attempts=2, backoff=0.01, timeout=0.2)),
                              f"http://127.0.0.1:{port}/")
    finally:
        release.set()
        await runner.cleanup()
    assert not delivery.ok and delivery.attempts == 2 and delivery.error == "no answer within 0.2 s"


@pytest.mark.parametrize("kind", ["webhook", "slack", "email"])
def test_the_plugin_gives_both_kinds(kind):
    from llmgw.plugins.manager import load_plugins

    sinks = load_plugins(allow={"notify-sinks"}).sinks()
    assert set(sinks) == {"webhook", "slack", "email"} and sinks[kind].description
