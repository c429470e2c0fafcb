"""Limits on what one client can hold of the client API's listener (router.clients in server.yaml).

`ClientRunner` is an aiohttp `AppRunner` whose connections are guarded:

- a connection that takes longer than `header_timeout` to send a request's
  headers (from the moment it opens, or from the first byte of its next
  request) is closed: a slowloris client holds nothing for long;
- a kept-alive connection idle for `idle_timeout` is closed (aiohttp's own
  keep-alive timer, set from the same section);
- past `max_connections` open connections in all, or
  `max_connections_per_client` from one address, a new connection gets a
  canned `503` with `Retry-After` and is closed, before any parsing.

A slow body is the readers' business (`llmgw.router.body`, the uploads):
only they know whether the client or the gateway is the one taking time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from llmgw.config.server import ClientLimits
from llmgw.obs import logs

log = logs.get("llmgw.server.limits")

#: Seconds a refused client is told to wait before it tries again.
RETRY_AFTER_S = 2


def _refusal(reason: str) -> bytes:
    body = (b'{"error":{"message":"' + reason.encode() + b'; retry later","type":"server_error",'
            b'"param":null,"code":"too_many_connections"}}')
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Retry-After: " + str(RETRY_AFTER_S).encode() + b"\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


_TOO_MANY_IN_ALL = _refusal("the gateway has as many connections open as it takes (router.clients.max_connections)")
_TOO_MANY_FROM_YOU = _refusal("this address has as many connections open as one client may "
                              "(router.clients.max_connections_per_client)")


@attrs.define
class ConnectionCounts:
    """Open connections, in all and per address; what the listener refused, for the metrics and tests."""

    total: int = 0
    by_address: dict[str, int] = attrs.Factory(dict)
    refused: int = 0
    slow_headers_closed: int = 0

    def open(self, address: str) -> None:
        self.total += 1
        self.by_address[address] = self.by_address.get(address, 0) + 1

    def close(self, address: str) -> None:
        self.total -= 1
        left = self.by_address.get(address, 1) - 1
        if left > 0:
            self.by_address[address] = left
        else:
            self.by_address.pop(address, None)


class GuardedHandler(RequestHandler):
    """aiohttp's connection handler, with a header deadline and the connection caps."""

    def __init__(self, manager: GuardedServer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._limits: ClientLimits = manager.client_limits
        self._counts: ConnectionCounts = manager.connection_counts
        self._address: str | None = None  # set once counted
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, (tuple, list)) and peer else "unix"
        counts, limits = self._counts, self._limits
        super().connection_made(transport)
        if counts.total >= limits.max_connections > 0:
            self._refuse(transport, _TOO_MANY_IN_ALL)
            return
        if counts.by_address.get(address, 0) >= limits.max_connections_per_client > 0:
            self._refuse(transport, _TOO_MANY_FROM_YOU)
            return
        counts.open(address)
        self._address = address
        self._arm_header_timer()

    def _refuse(self, transport: asyncio.BaseTransport, answer: bytes) -> None:
        self._counts.refused += 1
        try:
            transport.write(answer)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - the client went away already
            pass
        self.force_close()

    def data_received(self, data: bytes) -> None:
        waiting = self._waiter is not None and not self._waiter.done()  # between two requests
        before = self._request_count
        super().data_received(data)
        if self._request_count > before:
            self._cancel_header_timer()
        elif waiting and self._header_timer is None:
            self._arm_header_timer()  # the first bytes of a request whose headers are not all here

    def _arm_header_timer(self) -> None:
        seconds = self._limits.header_timeout.total_seconds()
        if seconds > 0:
            self._header_timer = self._loop.call_later(seconds, self._headers_too_slow)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._waiter is not None and not self._waiter.done():  # still no whole request
            self._counts.slow_headers_closed += 1
            self.force_close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_header_timer()
        if self._address is not None:
            self._counts.close(self._address)
            self._address = None
        super().connection_lost(exc)


class GuardedServer(web.Server):
    """aiohttp's protocol factory, making `GuardedHandler`s."""

    client_limits: ClientLimits
    connection_counts: ConnectionCounts

    def __call__(self) -> RequestHandler:
        return GuardedHandler(self, loop=self._loop, **self._kwargs)


class ClientRunner(web.AppRunner):
    """An AppRunner whose listeners apply `limits` (router.clients) to every connection."""

    def __init__(self, app: web.Application, limits: ClientLimits, **kwargs: Any) -> None:
        kwargs.setdefault("keepalive_timeout", limits.idle_timeout.total_seconds())
        super().__init__(app, **kwargs)
        self.limits = limits
        self.connections = ConnectionCounts()

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = GuardedServer  # the same object, making guarded handlers
        server.client_limits = self.limits  # type: ignore[attr-defined]
        server.connection_counts = self.connections  # type: ignore[attr-defined]
        return server


__all__ = ["ClientRunner", "ConnectionCounts", "GuardedHandler", "GuardedServer", "RETRY_AFTER_S"]
