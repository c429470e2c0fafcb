"""A recording proxy in front of the gateway: clients (SDKs, Node, Claude Code, Codex) talk to it as to
the gateway, and every answer they got is kept, byte for byte, to be checked against OpenAI's document."""

from __future__ import annotations

import attrs
import aiohttp
from aiohttp import web

#: Request headers not passed on (aiohttp sets its own).
_HOP = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}


@attrs.define
class Exchange:
    method: str
    path: str
    status: int
    content_type: str
    body: bytes


@attrs.define
class CapturingProxy:
    target: str  # the gateway, like http://127.0.0.1:PORT
    exchanges: list[Exchange] = attrs.Factory(list)
    runner: web.AppRunner | None = None
    session: aiohttp.ClientSession | None = None
    url: str = ""

    async def start(self) -> CapturingProxy:
        self.session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        if self.session is not None:
            await self.session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        body = await request.read()
        async with self.session.request(request.method, self.target + request.path_qs, data=body or None,
                                        headers=headers) as upstream:
            out = web.StreamResponse(status=upstream.status, headers={
                k: v for k, v in upstream.headers.items() if k.lower() not in _HOP | {"content-encoding"}})
            await out.prepare(request)
            kept = bytearray()
            async for piece in upstream.content.iter_any():
                kept += piece
                await out.write(piece)
            await out.write_eof()
        self.exchanges.append(Exchange(request.method, request.path, upstream.status,
                                       upstream.headers.get("Content-Type", ""), bytes(kept)))
        return out
