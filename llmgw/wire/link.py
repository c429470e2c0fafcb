"""One WebSocket of the agent port, either end: frames in and out, liveness by ping.

Internal to llmgw.wire: `channel.py` builds the two ends on it. A link
answers pings itself (aiohttp's autoping is off) so that it can tell a pong
from silence: when nothing has arrived for `ping_interval` it pings, and a
peer silent for `pong_timeout` after that is taken for dead.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Awaitable, Callable

import aiohttp
from aiohttp import web

from llmgw.wire.codec import WireError, decode, encode

__all__ = ["PATH", "PING_INTERVAL", "PONG_TIMEOUT", "MAX_FRAME_BYTES", "ConnectionClosed", "Link",
           "SessionBase", "run_session", "maybe_await", "log_fields"]

log = logging.getLogger("llmgw.wire")

PATH = "/agent/v1"
PING_INTERVAL = 10.0
PONG_TIMEOUT = 5.0
MAX_FRAME_BYTES = 16 * 1024 * 1024
_QUEUE_SIZE = 1024  # messages read ahead of the handler before reading waits


class ConnectionClosed(WireError):
    """A send on a connection that has ended; the message says why it ended."""


def log_fields(**kw: Any) -> dict[str, Any]:
    return {"fields": kw}


async def maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class Link:
    """One WebSocket: send messages, read them (`next_message`, or `pump` then `get`), close once."""

    def __init__(
        self,
        ws: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
        *,
        peer: str,
        expect: tuple[type, ...],
        ping_interval: float,
        pong_timeout: float,
    ) -> None:
        self._ws = ws
        self.peer = peer
        self._expect = expect
        self._ping_interval = ping_interval
        self._pong_timeout = pong_timeout
        self._loop = asyncio.get_running_loop()
        self._last_rx = self._loop.time()
        self._ping_sent: float | None = None
        self._queue: asyncio.Queue[Any] = asyncio.Queue(_QUEUE_SIZE)
        self._wakeup = asyncio.Event()
        self._ended = False
        self._send_lock = asyncio.Lock()
        self.close_reason: str | None = None
        self.on_message: Callable[[Any], None] | None = None
        self._closing: asyncio.Future[None] | None = None

    async def send(self, msg: Any) -> None:
        if self.close_reason is not None:
            raise ConnectionClosed(f"the connection with {self.peer} has ended: {self.close_reason}")
        frame = encode(msg)
        async with self._send_lock:
            try:
                await self._ws.send_bytes(frame)
            except (ConnectionError, RuntimeError, aiohttp.ClientError) as exc:
                self._finish(f"sending failed: {exc or type(exc).__name__}")
                raise ConnectionClosed(f"the connection with {self.peer} has ended: {self.close_reason}") from exc

    async def next_message(self, *, timeout: float | None = None, strict: bool = False) -> Any | None:
        """The next message, or None when the connection ended (close_reason says why).

        `timeout` raises TimeoutError; `strict` raises WireError for a frame
        that is not a message this side takes, where otherwise it is logged
        and skipped (a newer peer's message, most likely).
        """
        deadline = None if timeout is None else self._loop.time() + timeout
        ws = self._ws
        while True:
            now = self._loop.time()
            due = (self._last_rx + self._ping_interval) if self._ping_sent is None else (
                self._ping_sent + self._pong_timeout
            )
            wait = due - now
            if deadline is not None and deadline - now < wait:
                if deadline <= now:
                    raise asyncio.TimeoutError
                wait = deadline - now
            if wait <= 0:
                if self._ping_sent is not None:
                    self._finish(f"no answer to a ping within {self._pong_timeout:g} s")
                    return None
                self._ping_sent = now
                try:
                    await ws.ping()
                except Exception as exc:  # the transport is gone
                    self._finish(f"sending a ping failed: {exc or type(exc).__name__}")
                    return None
                continue
            try:
                msg = await ws.receive(timeout=max(wait, 0.001))  # 0 would mean "no timeout"
            except asyncio.TimeoutError:
                continue
            except RuntimeError as exc:  # receiving on a closed WebSocket
                self._finish(str(exc))
                return None
            self._last_rx = self._loop.time()
            self._ping_sent = None
            kind = msg.type
            if kind is aiohttp.WSMsgType.BINARY:
                try:
                    return decode(msg.data, expect=self._expect)
                except WireError as exc:
                    if strict:
                        raise
                    log.warning("skipped a frame: %s", exc, extra=log_fields(peer=self.peer))
                    continue
            if kind is aiohttp.WSMsgType.PING:
                try:
                    await ws.pong(msg.data)
                except Exception:  # the next receive reports the closed transport
                    pass
                continue
            if kind is aiohttp.WSMsgType.PONG:
                continue
            if kind is aiohttp.WSMsgType.TEXT:
                if strict:
                    raise WireError("a text frame: frames on /agent/v1 are binary msgpack")
                log.warning("skipped a text frame", extra=log_fields(peer=self.peer))
                continue
            self._finish(_describe_close(msg, ws))
            return None

    async def pump(self) -> None:
        """Read until the connection ends, queueing messages for the iterator."""
        try:
            while (msg := await self.next_message()) is not None:
                if self.on_message is not None:
                    try:
                        self.on_message(msg)
                    except Exception:  # an observer's bug must not end the connection
                        log.exception("an observer of %s failed", msg.type, extra=log_fields(peer=self.peer))
                await self._queue.put(msg)
                self._wakeup.set()
        finally:
            self._finish("the connection ended")
            await self.close_ws()

    async def get(self) -> Any:
        """The next queued message; StopAsyncIteration once the connection ended and the queue is empty."""
        while True:
            try:
                return self._queue.get_nowait()
            except asyncio.QueueEmpty:
                pass
            if self._ended:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()

    def _finish(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason
        self._ended = True
        self._wakeup.set()

    async def close(self, reason: str, *, code: int = 1000) -> None:
        self._finish(reason)
        await self.close_ws(code=code, message=reason)

    async def close_ws(self, *, code: int = 1000, message: str = "") -> None:
        # One close for everyone: the first caller's code and message are the
        # ones sent, and later callers (the pump ending) wait for that close.
        if self._closing is None:
            if self._ws.closed:
                return
            self._closing = asyncio.ensure_future(self._close_ws(code, message))
        await asyncio.shield(self._closing)

    async def _close_ws(self, code: int, message: str) -> None:
        try:
            # A close message is at most 123 bytes.
            await self._ws.close(code=code, message=message.encode()[:120])
        except Exception as exc:  # closing a broken connection is best effort
            log.debug("closing the WebSocket failed: %s", exc, extra=log_fields(peer=self.peer))


def _describe_close(msg: aiohttp.WSMessage, ws: Any) -> str:
    if msg.type is aiohttp.WSMsgType.ERROR:
        return f"the connection failed: {msg.data or type(msg.data).__name__}"
    code = ws.close_code
    extra = f": {msg.extra}" if isinstance(msg.extra, str) and msg.extra else ""
    if code is None or code == 1000:
        return f"closed by the peer{extra}"
    return f"closed by the peer (code {code}{extra})"


async def run_session(link: Link, handler: Callable[[Any], Awaitable[None]], session: Any, grace: float) -> None:
    """Run the pump and the caller's handler together; whichever ends first ends the other."""
    pump = asyncio.create_task(link.pump(), name=f"wire-pump {link.peer}")
    user = asyncio.create_task(handler(session), name=f"wire-session {link.peer}")
    try:
        done, _ = await asyncio.wait({pump, user}, return_when=asyncio.FIRST_COMPLETED)
        if user in done:
            failed = not user.cancelled() and user.exception() is not None
            await link.close("the session's handler failed" if failed else "the session's handler returned")
            await pump
        else:
            # The connection ended: the handler's `async for` is finishing; let it clean up.
            await asyncio.wait({user}, timeout=grace)
    finally:
        for task in (user, pump):
            if not task.done():
                task.cancel()
        await asyncio.gather(user, pump, return_exceptions=True)
        await link.close_ws()
    if not user.cancelled() and user.exception() is not None:
        exc = user.exception()
        log.error("the session's handler failed: %r", exc, exc_info=exc, extra=log_fields(peer=link.peer))


class SessionBase:
    """What both ends' sessions share: one reader iterates it; close it, or ask why it closed."""

    def __init__(self, link: Link) -> None:
        self._link = link

    @property
    def closed(self) -> bool:
        return self._link.close_reason is not None

    @property
    def close_reason(self) -> str | None:
        """Why the connection ended; None while it is open."""
        return self._link.close_reason

    def __aiter__(self) -> SessionBase:
        return self

    async def __anext__(self) -> Any:
        return await self._link.get()

    async def close(self, reason: str = "closed by this side") -> None:
        await self._link.close(reason)
