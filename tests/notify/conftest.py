"""A local receiver for notifications (an aiohttp server recording what is posted), and fast sinks."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import attrs
import pytest
from aiohttp import web
from llmgw_notify_sinks import RetryPolicy, SlackSink, WebhookSink

from llmgw.config import parse_server_config

#: Sinks that give up quickly, so retries take milliseconds.
FAST = RetryPolicy(attempts=3, backoff=0.01, timeout=2.0)


@attrs.frozen
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """Records every POST; answers each with the next of `answers` (a status), then 200."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.answers: list[int] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        self.received.append(Received(request.path, dict(request.headers), await request.read()))
        status = self.answers.pop(0) if self.answers else 200
        return web.Response(status=status, text="ok" if status < 300 else f"refused with {status}")

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def on(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]


class ThreadedReceiver(Receiver):
    """A Receiver on a loop of its own, for tests that are not async (ctl's)."""

    def __enter__(self) -> ThreadedReceiver:
        self._loop = asyncio.new_event_loop()
        started = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self.start())
            started.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self.stop())
            self._loop.close()

        self._thread = threading.Thread(target=main, name="notify-receiver", daemon=True)
        self._thread.start()
        assert started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
async def receiver():
    r = await Receiver().start()
    try:
        yield r
    finally:
        await r.stop()


def fast_sinks() -> dict:
    return {"webhook": WebhookSink(FAST), "slack": SlackSink(FAST)}


def server_config(*sinks: dict, repeat_after: str = "1h"):
    return parse_server_config({"notify": {"sinks": list(sinks), "repeat_after": repeat_after}})
